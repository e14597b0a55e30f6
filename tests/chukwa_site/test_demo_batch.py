"""The demo's ``--experiment park --batch`` (chukwa_site/demo.py, demo_batch.py): the flag goes
with the park experiment only; the batch run's scenario is a fork of ``park`` whose walker's LLM
source declares ``interface.batch``, the plain ``park`` left as it is; the design runs in batch
mode through ``run_experiment --mode batch``."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from chukwa_site.demo import _park_design, main
from chukwa_site.demo_batch import BATCH, park_batch_scenario
from scenarios_app.models import ResponseSource, Scenario
from scenarios_app.services import scenario_assemble
from tests.support.worlds import fixture_body
from worlds_app.models import Experiment
from worlds_app.services.experiments import experiment_create

pytestmark = pytest.mark.django_db


def _llm_interfaces() -> list[dict[str, object]]:
    return [
        source.content["interface"]
        for source in ResponseSource.objects.all()
        if source.content["interface"]["name"] == "llm_chat_completions"
    ]


def test_batch_goes_with_the_park_experiment_only() -> None:
    count = Scenario.objects.count()
    for experiment in ("picnic", "visitors", "none"):
        with pytest.raises(SystemExit) as refused:
            main(["--experiment", experiment, "--batch"])
        assert refused.value.code == 2
    assert Scenario.objects.count() == count


def test_the_batch_run_forks_park_with_a_batch_source_and_leaves_park_as_it_is() -> None:
    call_command("load_demo_scenarios", "park")
    plain = scenario_assemble(data=fixture_body("park"))["scenario_hash"]
    assert [i for i in _llm_interfaces() if "batch" in i] == []
    forked = park_batch_scenario()
    assert forked != plain
    assert park_batch_scenario() == forked  # content-addressed: a second run stores nothing new
    interfaces = _llm_interfaces()
    assert [i["batch"] for i in interfaces if "batch" in i] == [BATCH]
    # the plain park's source is still there, without batch, and park still names it
    assert any("batch" not in i for i in interfaces)
    assert scenario_assemble(data=fixture_body("park"))["scenario_hash"] == plain


def test_the_batch_design_is_accepted_in_batch_mode() -> None:
    call_command("load_demo_scenarios", "park")
    design = _park_design("park-thirst-batch-test", {"hash": park_batch_scenario()})
    assert {arm["scenario_ref"]["hash"] for arm in design["arms"]} == {park_batch_scenario()}
    experiment_create(data={**design, "mode": "batch"}, created_by="demo")
    assert Experiment.objects.get(slug="park-thirst-batch-test").typed_design.mode == "batch"

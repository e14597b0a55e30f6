"""The demo's ``--experiment visitors`` (chukwa_site/demo.py): its design on
park_visitors_rules — a control and a forked arm on rule policies — is accepted, runs, and
answers a results table with both arms."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from chukwa_site.demo import _visitors_design, main
from tests.surfaces.pages.test_experiment_pages import run_experiment
from worlds_app.experiment_results import experiment_results
from worlds_app.services.experiments import experiment_create

pytestmark = pytest.mark.django_db


def test_the_visitors_option_is_offered() -> None:
    with pytest.raises(SystemExit) as shown:
        main(["--help"])
    assert shown.value.code == 0
    with pytest.raises(SystemExit) as refused:
        main(["--experiment", "crowds"])
    assert refused.value.code == 2


def test_the_visitors_experiment_runs_and_answers_both_arms(toy_sources: str) -> None:
    call_command("load_demo_scenarios", "park_visitors_rules")  # as the demo loads them
    design = _visitors_design("visitors-queue-test")
    assert [arm["label"] for arm in design["arms"]] == ["control", "short_queue"]
    experiment_create(data=design, created_by="demo")
    metric = design["metrics"][0]["hash"]
    run_experiment("visitors-queue-test", [metric])
    (result,) = experiment_results(slug="visitors-queue-test").results
    arms = {arm.arm: arm for arm in result.arms}
    assert set(arms) == {"control", "short_queue"}
    assert all(arm.n == 3 for arm in arms.values())

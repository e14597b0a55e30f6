"""Names beside hashes on the pages: a workflow or a cognition profile is shown with the profile
label it is bound to in each named scenario (``picnic/<label>``), a metric with its label, next
to the short hash (store lists, a component's page and its uses, a scenario's profiles, an
attempt's node detail, an invocation)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from cognition_app.models import SourceInvocation
from scenarios_app.hash_names import hash_names
from scenarios_app.selectors import scenario_get
from scenarios_app.services import scenario_assemble, scenario_name_set, scenario_name_unset
from tests.cognition_app.test_llm_retry import ANT_OK
from tests.support.scripted_llm import ScriptedLLM
from tests.support.worlds import fixture_body, run_turn
from tests.surfaces.pages.test_experiment_pages import expression_metric
from worlds_app.models import AttemptStatus
from worlds_app.services import world_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def picnic() -> dict[str, str]:
    scenario = scenario_assemble(data=fixture_body("picnic_rules"))["scenario_hash"]
    scenario_name_set(name="picnic", scenario_hash=scenario, note="")
    body = scenario_get(ref=scenario)
    (label, profile), *_ = sorted(body["cognition_profiles"].items())
    workflow = body["scenario"]["cognition_profiles"][label]["workflow_hash"]
    return {"scenario": scenario, "label": label, "profile": profile, "workflow": workflow}


def test_hash_names_reads_every_kind_in_three_queries(
    picnic: dict[str, str], django_assert_max_num_queries: object
) -> None:
    metric = expression_metric("patched", "length(patches)")
    wanted = [picnic["scenario"], picnic["profile"], picnic["workflow"], metric, "0" * 64]
    with django_assert_max_num_queries(3):  # type: ignore[operator]
        names = hash_names(hashes=wanted)
    bound = f"picnic/{picnic['label']}"
    assert [n["text"] for n in names[picnic["scenario"]]] == ["picnic"]
    assert [n["text"] for n in names[picnic["profile"]]] == [bound]
    assert [n["text"] for n in names[picnic["workflow"]]] == [bound]
    assert names[picnic["workflow"]][0]["url"] == "/names/picnic/"
    assert names[metric] == [{"text": "patched", "url": f"/store/metrics/{metric}/"}]
    assert "0" * 64 not in names
    # a name that moves away takes its names with it
    scenario_name_unset(name="picnic", note="gone")
    assert picnic["workflow"] not in hash_names(hashes=wanted)


def test_pages_show_the_names_beside_workflow_and_profile_hashes(
    client: Client, reader_user: User, picnic: dict[str, str]
) -> None:
    client.force_login(reader_user)
    bound = f'<a class="hash-name" href="/names/picnic/">picnic/{picnic["label"]}</a> · '
    workflow, profile = picnic["workflow"], picnic["profile"]
    for url in (
        "/store/cognition-workflows/",
        "/store/cognition-profiles/",
        f"/store/cognition-workflows/{workflow}/",
        f"/store/cognition-profiles/{profile}/",
        f"/store/cognition-workflows/{workflow}/uses/",
        f"/scenarios/{picnic['scenario']}/",
    ):
        page = client.get(url)
        assert page.status_code == 200, url
        assert bound in page.content.decode(), url


def test_an_attempt_and_its_invocations_show_the_workflows_names(
    client: Client, reader_user: User, scripted_llm: ScriptedLLM
) -> None:
    client.force_login(reader_user)
    scenario = scenario_assemble(data=fixture_body("ant_on_plate"))["scenario_hash"]
    scenario_name_set(name="plate", scenario_hash=scenario, note="")
    world_create(data={"slug": "crumbs", "scenario_ref": {"hash": scenario}})
    scripted_llm.script(ANT_OK)
    attempt = run_turn("crumbs")
    assert attempt.status == AttemptStatus.COMMITTED, attempt.failure_reason
    generation = SourceInvocation.objects.get(attempt=attempt, kind="llm_generation")
    profiles = scenario_get(ref=scenario)["scenario"]["cognition_profiles"]
    (label,) = [k for k, v in profiles.items() if v["workflow_hash"] == generation.workflow_hash]
    named = f'Workflow <a class="hash-name" href="/names/plate/">plate/{label}</a> · '
    assert named in client.get(f"/attempts/{attempt.pk}/").content.decode()
    invocation = client.get(f"/invocations/{generation.pk}/").content.decode()
    assert f'<dd><a class="hash-name" href="/names/plate/">plate/{label}</a> · ' in invocation

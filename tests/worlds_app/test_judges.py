"""LLM judges (docs/measurement.md, "LLM judges"): a judge metric scores every committed turn on
the scripted model through the real HTTP of the source layer, each call traced as a ``judge``
generation outside any attempt, priced and linked to its measurement; an answer off the scale
goes to the corrective retry lane; an interview renders the subject's own view; measuring again
asks no judge; a world's budget refuses a call it cannot afford; a replayed world is measured
without a request; a judge's row left running by a dead worker is interrupted by the reaper."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from cognition_app.models import InvocationStatus, LlmCall, ModelPrice, SourceInvocation
from scenarios_app.services import metric_put, response_source_put
from tests.conftest import LLM_SOURCE
from tests.support.scripted_llm import ScriptedLLM
from tests.worlds_app.test_measurements import buyers_world, judge, values
from worlds_app.models import Measurement
from worlds_app.services import turn_attempt_reap, world_budget_set, world_create
from worlds_app.services.measurements import world_measure

pytestmark = pytest.mark.django_db


def _score(score: float, why: str = "it follows from the rules") -> str:
    return json.dumps({"score": score, "rationale": why})


def _judge_metric(**extra: Any) -> str:
    source = {"hash": response_source_put(content=LLM_SOURCE)["hash"]}
    return metric_put(content=judge(source, **extra))["hash"]


def test_a_judge_scores_every_turn_traced_priced_and_linked(
    scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    ModelPrice.objects.create(
        url_env="CHUKWA_LLM_BASE_URL",
        model="gpt-4o-mini",
        input_per_million=Decimal("0.15"),
        output_per_million=Decimal("0.60"),
        cached_input_per_million=Decimal("0.075"),
        valid_from=timezone.now() - timedelta(days=1),
    )
    world = buyers_world("buyers", 2)
    plausible = _judge_metric()
    scripted_llm.script(_score(5), _score(4), _score(2.5, "Ben found it empty"))
    assert world_measure(world_id=world.pk, metric_hashes=[plausible])["written"] == 3
    assert values("buyers", plausible) == {0: 5.0, 1: 4.0, 2: 2.5}
    # each prompt carries its turn: turn 1's patches (Ann got the bar), turn 0 has none
    prompts = [r["messages"][1]["content"] for r in scripted_llm.requests]
    assert prompts[0].endswith("Rate this turn 1-5:\n[]")
    assert "Ann presses the button: dispensed." in prompts[1]
    assert "Ann presses the button" not in prompts[2]  # turn 2: both wait
    assert all(
        r["response_format"]["json_schema"]["name"] == "judge_score" for r in scripted_llm.requests
    )
    for row in Measurement.objects.filter(metric_id=plausible).select_related("llm_call"):
        call = row.llm_call
        assert call is not None and call.status == InvocationStatus.SUCCEEDED
        inv = call.invocation
        assert (inv.kind, inv.attempt_id, inv.world_id) == ("judge", None, world.pk)
        assert inv.attempted_turn == row.turn_number and inv.node_id == "metric:plausible"
        assert call.cost is not None and call.cost > 0  # priced
        assert call.artifacts["judge_score"]["score"] == row.value
    # a judge's call is not one of the turn's calls
    assert not SourceInvocation.objects.filter(attempt__isnull=False, kind="judge").exists()


def test_measuring_again_asks_no_judge(scripted_llm: ScriptedLLM, toy_sources: str) -> None:
    world = buyers_world("buyers", 1)
    plausible = _judge_metric()
    scripted_llm.script(_score(3), _score(3))
    world_measure(world_id=world.pk, metric_hashes=[plausible])
    asked = len(scripted_llm.requests)
    assert world_measure(world_id=world.pk, metric_hashes=[plausible])["written"] == 0
    assert len(scripted_llm.requests) == asked == 2


def test_a_score_off_the_scale_goes_to_the_retry_lane(
    scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    world = buyers_world("buyers", 1)
    patient = _judge_metric(max_generation_attempts=2)
    # turn 0: off the scale, then right; turn 1: off the scale twice, then the lane is spent
    scripted_llm.script(_score(9), _score(3), _score(0), "not json")
    world_measure(world_id=world.pk, metric_hashes=[patient])
    assert values("buyers", patient) == {0: 3.0, 1: "judge_output"}
    retried = scripted_llm.requests[1]["messages"]
    assert retried[2] == {"role": "assistant", "content": _score(9)}
    assert "/score: 9 is greater than the maximum of 5" in retried[3]["content"]
    failed = Measurement.objects.get(metric_id=patient, turn_number=1)
    assert "2 judge generation(s) rejected" in failed.error_message
    assert failed.llm_call is not None and failed.llm_call.parse_error  # the last try's
    tries = SourceInvocation.objects.filter(kind="judge", attempted_turn=1).order_by("seq")
    assert [t.generation_attempt for t in tries] == [1, 2]
    assert {t.validation_status for t in tries} == {"invalid"}


def test_an_interview_renders_the_subjects_own_view(
    scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    world = buyers_world("buyers", 1)
    source = {"hash": response_source_put(content=LLM_SOURCE)["hash"]}
    interview = metric_put(
        content=judge(
            source,
            label="ann_content",
            subject="ann",
            user_template="You are {{subject.id}}.\n{{subject.rendered}}\nMemory: {{subject.memory}}",
        )
    )["hash"]
    scripted_llm.script(_score(2), _score(5))
    world_measure(world_id=world.pk, metric_hashes=[interview])
    assert values("buyers", interview) == {0: 2.0, 1: 5.0}
    first, second = (r["messages"][1]["content"] for r in scripted_llm.requests)
    assert first.startswith("You are ann.\n") and "Memory: (nothing yet)" in first
    assert first != second  # each turn's own view
    assert {i.subject_id for i in SourceInvocation.objects.filter(kind="judge")} == {"ann"}


def test_a_budget_refuses_a_judge_it_cannot_afford(
    scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    world = buyers_world("buyers", 1)
    world_budget_set(slug="buyers", budget={"max_tokens_total": 10})
    plausible = _judge_metric()
    world_measure(world_id=world.pk, metric_hashes=[plausible])
    assert values("buyers", plausible) == {0: "budget_exhausted", 1: "budget_exhausted"}
    assert "max_tokens_total" in Measurement.objects.filter(metric_id=plausible)[0].error_message
    assert scripted_llm.requests == []  # nothing was sent
    assert not LlmCall.objects.filter(invocation__kind="judge").exclude(usage_source="not_sent")


def test_a_strictly_replayed_world_is_judged_without_a_request(
    scripted_llm: ScriptedLLM, toy_sources: str
) -> None:
    world = buyers_world("buyers", 1)
    plausible = _judge_metric()
    scripted_llm.script(_score(4), _score(1))
    world_measure(world_id=world.pk, metric_hashes=[plausible])
    asked = len(scripted_llm.requests)
    replay = world_create(
        data={
            "slug": "buyers-again",
            "scenario_ref": {"hash": world.scenario_id},
            "replay_from": {"world": "buyers", "mode": "replay_strict"},
        }
    )
    from worlds_app.services import turn_attempt_enqueue, turn_attempt_run

    (attempt_id,) = turn_attempt_enqueue(slug="buyers-again")["attempt_ids"]
    assert turn_attempt_run(attempt_id=attempt_id, owner="test") == "committed"
    replay.refresh_from_db()
    world_measure(world_id=replay.pk, metric_hashes=[plausible])
    assert values("buyers-again", plausible) == {0: 4.0, 1: 1.0}
    assert len(scripted_llm.requests) == asked  # no request: served from the recording
    served = SourceInvocation.objects.filter(world=replay, kind="judge")
    assert served.count() == 2 and all(s.replayed_from for s in served)


@pytest.mark.parametrize("kind", ["judge", "interview", "biography"])
def test_the_reaper_interrupts_a_call_outside_attempts_left_running(
    toy_sources: str, kind: str
) -> None:
    """A judge's, an interview's or a biography's call (no attempt: their tasks' own) left
    running by a dead worker, longer ago than a task may run, is interrupted."""
    world = buyers_world("buyers", 1) if kind != "biography" else None
    stale = SourceInvocation.objects.create(
        attempt=None,
        world=world,
        attempted_turn=1,
        seq=1,
        kind=kind,
        source_hash="0" * 64,
        started_at=timezone.now() - timedelta(hours=3),
        request={},
        request_key="k",
    )
    fresh = SourceInvocation.objects.create(
        attempt=None,
        world=world,
        attempted_turn=1,
        seq=2,
        kind=kind,
        source_hash="0" * 64,
        started_at=timezone.now(),
        request={},
        request_key="k",
    )
    turn_attempt_reap()
    stale.refresh_from_db()
    fresh.refresh_from_db()
    assert (stale.status, stale.failure_class) == ("interrupted", "interrupted")
    assert fresh.status == "running"


def test_a_judges_call_reads_everywhere_a_call_is_shown(
    scripted_llm: ScriptedLLM, toy_sources: str, reader_client: Any, reader_user: Any
) -> None:
    from django.test import Client

    world = buyers_world("buyers", 1)
    plausible = _judge_metric()
    scripted_llm.script(_score(4, "Ann bought the bar"), _score(2))
    world_measure(world_id=world.pk, metric_hashes=[plausible])
    call = Measurement.objects.get(metric_id=plausible, turn_number=0).llm_call
    assert call is not None
    browser = Client()
    browser.force_login(reader_user)
    for url in (
        f"/llm-calls/{call.pk}/",
        "/llm-calls/",
        "/invocations/",
        "/invocations/?kind=judge",
        "/worlds/buyers/turns/0/",
        "/worlds/buyers/",
        f"/store/metrics/{plausible}/",
    ):
        page = browser.get(url)
        assert page.status_code == 200, (url, page.content[:300])
        assert b"/attempts/None" not in page.content, url  # a judge has no attempt to link
    turn = browser.get("/worlds/buyers/turns/0/").content.decode()
    assert "Ann bought the bar" in turn and f"/llm-calls/{call.pk}/" in turn
    for url in (
        f"/api/llm-calls/{call.pk}/",
        f"/api/source-invocations/{call.invocation_id}/",
        "/api/source-invocations/?kind=judge",
        "/api/llm-calls/",
        "/api/worlds/buyers/measurements/",
    ):
        answer = reader_client.get(url)
        assert answer.status_code == 200, (url, answer.content[:300])
    listed = reader_client.get("/api/source-invocations/?kind=judge").json()["results"]
    assert {row["kind"] for row in listed} == {"judge"} and len(listed) == 2

"""One real turn of ant_on_plate against the embedded SmolLM2 endpoint (llama.cpp, real HTTP,
schema-constrained decoding): it commits a schema-valid WorldPatch. Slow-ish (the 135M model
runs on the CPU), but it runs in CI."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from jsonschema import Draft202012Validator

from chukwa_core.patch_schema import WORLD_PATCH_SCHEMA
from cognition_app.models import LlmCall, LlmChunk, SourceProbe
from devservices import embedded_llm
from scenarios_app.fixture_files import load_fixture
from scenarios_app.services import scenario_assemble
from worlds_app import selectors
from worlds_app.services import turn_attempt_enqueue, turn_attempt_run, world_create

# transaction=True: the lease heartbeat runs on its own connection and must see the attempt row
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture(scope="module")
def embedded_endpoint() -> Iterator[str]:
    server = embedded_llm.serve("127.0.0.1", 0, threads=2, ctx=4096)
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_a_real_ant_turn_on_the_embedded_model_commits_a_valid_patch(
    embedded_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHUKWA_LLM_BASE_URL", embedded_endpoint)
    monkeypatch.setenv("CHUKWA_LLM_API_KEY", "embedded-model-needs-no-key")
    scenario = scenario_assemble(data=load_fixture("ant_on_plate"))["scenario_hash"]
    # A fixed world seed: the fixture samples at temperature 0.7, and with a seed drawn at
    # random the 135M model now and then fails all three generations (CI saw it once); with
    # one, llama.cpp gives the same reply every run (the test below), so this turn is the same
    # turn every run.
    world_create(data={"slug": "real-ant", "scenario_ref": {"hash": scenario}, "seed": 5})
    attempt_id = turn_attempt_enqueue(slug="real-ant")["attempt_ids"][0]

    status = turn_attempt_run(attempt_id=attempt_id, owner="test")
    attempt = selectors.attempt_get(attempt_id=attempt_id)
    assert status == "committed", attempt["failure"]

    turn = selectors.turn_get(slug="real-ant", number=1)
    (patch,) = [p["patch"] for p in turn["patches"]]
    assert not list(Draft202012Validator(WORLD_PATCH_SCHEMA).iter_errors(patch))
    accepted = LlmCall.objects.get(
        pk=next(e["llm_call_id"] for e in attempt["events"] if e["kind"] == "world_patch_applied")
    )
    assert accepted.response_model == "SmolLM2-135M-Instruct"
    assert accepted.artifacts["accepted_world_patch"] == patch
    assert accepted.usage_source == "provider" and accepted.completion_tokens > 0
    chunks = "".join(
        LlmChunk.objects.filter(call=accepted).order_by("seq").values_list("text", flat=True)
    )
    assert chunks == accepted.raw_text
    # the backend proved it enforces schemas before the first schema-bound generation
    assert SourceProbe.objects.get(base_url=embedded_endpoint).enforces_schema


def test_seeded_worlds_on_the_embedded_model_commit_identical_turns(
    embedded_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """llama.cpp is deterministic for a given seed: the same scenario, start time and world
    seed give the same reply, byte for byte, and the same turn; another seed another reply.
    (The fixture's source fixes no seed, so each call's seed is derived from the world's.)"""
    monkeypatch.setenv("CHUKWA_LLM_BASE_URL", embedded_endpoint)
    monkeypatch.setenv("CHUKWA_LLM_API_KEY", "embedded-model-needs-no-key")
    scenario = scenario_assemble(data=load_fixture("ant_on_plate"))["scenario_hash"]
    replies: dict[str, list[str]] = {}
    hashes: dict[str, str] = {}
    for slug, seed in (("ant-s5-a", 5), ("ant-s5-b", 5), ("ant-s6", 6)):
        world_create(
            data={
                "slug": slug,
                "scenario_ref": {"hash": scenario},
                "seed": seed,
                "start_time": "2026-05-01T08:00:00+00:00",
            }
        )
        attempt_id = turn_attempt_enqueue(slug=slug)["attempt_ids"][0]
        status = turn_attempt_run(attempt_id=attempt_id, owner="test")
        assert status == "committed", selectors.attempt_get(attempt_id=attempt_id)["failure"]
        calls = LlmCall.objects.filter(
            invocation__world__slug=slug, invocation__kind="llm_generation"
        ).order_by("started_at")
        replies[slug] = [c.raw_text for c in calls]
        assert calls and all(isinstance(c.params.get("seed"), int) for c in calls)
        hashes[slug] = selectors.turn_get(slug=slug, number=1)["state_hash"]
    assert replies["ant-s5-a"] == replies["ant-s5-b"]
    assert hashes["ant-s5-a"] == hashes["ant-s5-b"]
    assert replies["ant-s5-a"] != replies["ant-s6"]

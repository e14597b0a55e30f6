"""Seeds, branches and interventions (docs/worlds.md), on turns run in this process against the
scripted OpenAI-compatible server over real HTTP and through the API: the seeds a seeded world
sends, rule draws from the seed, a branch that re-runs nothing and lines up with its parent, an
intervention in the very prompt of the turn it joins, and every bad field refused with nothing
written."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from chukwa_core.seeds import call_seed, generation_number, rule_seed
from cognition_app.models import LlmCall
from scenarios_app.services import scenario_assemble
from tests.cognition_app.test_llm_retry import ANT_OK
from tests.support.scripted_llm import ScriptedLLM
from tests.support.worlds import create_world, fixture_body, run_turn, workflow_of
from worlds_app.comparison import world_compare
from worlds_app.models import (
    AttemptEvent,
    AttemptStatus,
    Intervention,
    PatchTransition,
    Turn,
    World,
)
from worlds_app.services import world_create, world_delete

pytestmark = pytest.mark.django_db


@pytest.fixture
def browser(reader_user: User) -> Client:
    """A signed-in reader's browser session (pages take sessions, not tokens)."""
    client = Client()
    client.force_login(reader_user)
    return client


def _ant(narration: str, state: str) -> dict[str, Any]:
    reply = copy.deepcopy(ANT_OK)
    reply["patch"]["narration"] = narration
    reply["patch"]["effects"][0]["state"] = state
    return reply


def _sent_seeds(llm: ScriptedLLM) -> list[Any]:
    return [request.get("seed", "absent") for request in llm.requests]


# --- seeds -----------------------------------------------------------------------------------


def test_seeded_worlds_send_identical_seeds_and_commit_identical_turns(
    scripted_llm: ScriptedLLM,
) -> None:
    hashes: dict[str, list[str]] = {}
    for slug, seed in (("seed-a", 11), ("seed-b", 11), ("seed-c", 12), ("unseeded", None)):
        body: dict[str, Any] = {
            "slug": slug,
            "scenario_ref": {"data": fixture_body("ant_on_plate")},
        }
        body["start_time"] = "2026-05-01T08:00:00+00:00"
        if seed is not None:
            body["seed"] = seed
        world_create(data=body)  # type: ignore[arg-type]
        start = len(scripted_llm.requests)
        for n in range(2):
            scripted_llm.script(_ant(f"Turn {n}: the ant walks.", f"step {n}"))
            assert run_turn(slug).status == AttemptStatus.COMMITTED
        hashes[slug] = list(
            Turn.objects.filter(world__slug=slug)
            .order_by("number")
            .values_list("state_hash", flat=True)
        )
        sent = _sent_seeds(scripted_llm)[start:]
        if seed is None:
            assert sent == ["absent", "absent"]  # an unseeded world sends none, as before
        else:
            # the seed of each call is derived from the world's, the turn, subject and node
            assert sent == [
                call_seed(seed, turn, "ant", "act", generation_number(None, 1)) for turn in (1, 2)
            ]
            assert all(0 <= s < 2**31 for s in sent)
    a, b, c = (
        _sent_seeds(scripted_llm)[0:2],
        _sent_seeds(scripted_llm)[2:4],
        _sent_seeds(scripted_llm)[4:6],
    )
    assert a == b
    assert a != c and set(a).isdisjoint(c)
    assert hashes["seed-a"] == hashes["seed-b"]
    # The seed is in the traced parameters of each LLM call.
    world = World.objects.get(slug="seed-a")
    params = list(
        LlmCall.objects.filter(
            invocation__world=world, invocation__kind="llm_generation"
        ).values_list("params", flat=True)
    )
    assert sorted(p["seed"] for p in params) == sorted(a)


def test_a_source_that_fixes_its_seed_wins_and_the_world_says_so(
    scripted_llm: ScriptedLLM, reader_client: APIClient, browser: Client
) -> None:
    body = fixture_body("ant_on_plate")
    node = workflow_of(body, "ant")["nodes"][0]
    node["llm_source_ref"]["inline"]["interface"]["params"]["seed"] = 7
    world_create(data={"slug": "fixed", "scenario_ref": {"data": body}, "seed": 99})
    world_create(data={"slug": "fixed-unseeded", "scenario_ref": {"data": body}})
    scripted_llm.script(ANT_OK)
    run_turn("fixed")
    assert _sent_seeds(scripted_llm) == [7]
    read = reader_client.get("/api/worlds/fixed/").json()
    (warning,) = read["warnings"]
    assert warning["code"] == "source_seed_fixed"
    assert "fixes seed 7" in warning["message"]
    assert reader_client.get("/api/worlds/fixed-unseeded/").json()["warnings"] == []
    page = browser.get("/worlds/fixed/").content.decode()
    assert "Seed overridden" in page and "fixes seed 7" in page


RULE_SCENARIO: dict[str, Any] = {
    "scenario_slug": "coin_room",
    "description": "A coin on a table and someone who may flip it.",
    "chronon_seconds": 60,
    "cognition_profiles": {
        "flipper": {
            "inline": {
                "workflow": {
                    "inline": {
                        "version": 1,
                        "execution": "per_subject_ordered",
                        "ambient_sources": [],
                        "nodes": [
                            {
                                "id": "decide",
                                "type": "rule_policy",
                                "rules": [
                                    {
                                        "id": "flip",
                                        "when": [],
                                        "probability": 0.5,
                                        "intent": "flip the coin",
                                        "plan": [
                                            {
                                                "op": "set_entity_state",
                                                "entity_id": "coin",
                                                "state": "flipped on turn {{world.attempted_turn}}",
                                            }
                                        ],
                                        "memory": "Turn {{world.attempted_turn}}: flipped.",
                                        "narration": "{{subject.name}} flips the coin.",
                                    },
                                    {
                                        "id": "wait",
                                        "when": [],
                                        "intent": "wait",
                                        "plan": [],
                                        "memory": "Turn {{world.attempted_turn}}: waited.",
                                        "narration": "{{subject.name}} waits.",
                                    },
                                ],
                            }
                        ],
                        "apply": {"from": "decide.final"},
                    }
                }
            }
        }
    },
    "environments": {"room": {"inline": "A bare room with a table."}},
    "entities": [
        {
            "inline": {
                "id": "flo",
                "name": "Flo",
                "state": "standing by the table",
                "environment": "room",
                "kind": {
                    "agent": {"goal": "pass time", "memory": "", "cognition_profile": "flipper"}
                },
            }
        },
        {
            "inline": {
                "id": "coin",
                "name": "Coin",
                "state": "heads up",
                "environment": "room",
                "kind": "prop",
            }
        },
    ],
}


def _rule_world(slug: str, seed: int | None, *, branch: dict[str, Any] | None = None) -> World:
    body: dict[str, Any] = {"slug": slug, "start_time": "2026-05-01T08:00:00+00:00"}
    if branch is None:
        body["scenario_ref"] = {"data": RULE_SCENARIO}
    else:
        body["branch_from"] = branch
    if seed is not None:
        body["seed"] = seed
    return world_create(data=body)  # type: ignore[arg-type]


def _monologues(slug: str) -> list[dict[str, Any]]:
    return list(
        AttemptEvent.objects.filter(attempt__world__slug=slug, kind="inner_monologue")
        .order_by("attempt__seq")
        .values_list("payload", flat=True)
    )


def test_rule_policies_draw_from_the_seed() -> None:
    for slug, seed in (("coin-a", 5), ("coin-b", 5), ("coin-c", 6), ("coin-x", None)):
        _rule_world(slug, seed)
        for _ in range(6):
            assert run_turn(slug).status == AttemptStatus.COMMITTED
    a, b, c = _monologues("coin-a"), _monologues("coin-b"), _monologues("coin-c")
    # Same seed, different slugs: the same draws, the same rules, the same states.
    assert [m["seed"] for m in a] == [m["seed"] for m in b]
    assert [m["seed"] for m in a] == [
        format(rule_seed(5, turn, "flo", "decide"), "016x") for turn in range(1, 7)
    ]
    assert [m["matched_rule"] for m in a] == [m["matched_rule"] for m in b]
    hashes = {
        slug: list(
            Turn.objects.filter(world__slug=slug)
            .order_by("number")
            .values_list("state_hash", flat=True)
        )
        for slug in ("coin-a", "coin-b")
    }
    assert hashes["coin-a"] == hashes["coin-b"]
    # Another seed draws other numbers; an unseeded world still draws from its slug.
    assert [m["seed"] for m in a] != [m["seed"] for m in c]
    x = _monologues("coin-x")
    assert all(
        m["seed"] != format(rule_seed(5, i + 1, "flo", "decide"), "016x") for i, m in enumerate(x)
    )


def test_a_replay_takes_the_seed_of_the_world_it_replays() -> None:
    _rule_world("coin-source", 41)
    replay = world_create(
        data={
            "slug": "coin-replay",
            "scenario_ref": {"data": RULE_SCENARIO},
            "replay_from": {"world": "coin-source", "mode": "replay_strict"},
        }
    )
    assert replay.seed == 41
    explicit = world_create(
        data={
            "slug": "coin-replay-2",
            "scenario_ref": {"data": RULE_SCENARIO},
            "replay_from": {"world": "coin-source", "mode": "replay_strict"},
            "seed": 3,
        }
    )
    assert explicit.seed == 3


# --- branches --------------------------------------------------------------------------------


def test_a_branch_at_turn_3_with_a_changed_prompt_reruns_nothing_and_diverges_after(
    scripted_llm: ScriptedLLM, reader_client: APIClient, browser: Client
) -> None:
    body = fixture_body("ant_on_plate")
    create_world(body, "parent")
    for n in range(1, 6):
        scripted_llm.script(_ant(f"Turn {n}: the ant walks.", f"parent step {n}"))
        assert run_turn("parent").status == AttemptStatus.COMMITTED
    parent_requests = len(scripted_llm.requests)
    assert parent_requests == 5

    changed = copy.deepcopy(body)
    messages = workflow_of(changed, "ant")["nodes"][0]["prompt_template"]["messages"]
    messages[1]["content"] += "\nThe ant is very thirsty."
    changed_hash = scenario_assemble(data=changed)["scenario_hash"]
    branch = world_create(
        data={
            "slug": "branch",
            "scenario_ref": {"hash": changed_hash},
            "branch_from": {"world": "parent", "turn": 3},
        }
    )
    assert (branch.current_turn, branch.branched_from_slug, branch.branched_from_turn) == (
        3,
        "parent",
        3,
    )
    # Nothing was re-run: no call, and the branch's first turn is the parent's turn 3 copied.
    assert len(scripted_llm.requests) == parent_requests
    assert Turn.objects.get(world=branch, number=3).state_hash == (
        Turn.objects.get(world__slug="parent", number=3).state_hash
    )
    scripted_llm.script(_ant("Turn 4: the thirsty ant looks for water.", "looking for water"))
    attempt = run_turn("branch")
    assert (attempt.status, attempt.attempted_turn) == (AttemptStatus.COMMITTED, 4)
    (request,) = scripted_llm.requests[parent_requests:]
    assert "The ant is very thirsty." in request["messages"][1]["content"]
    assert "Turn 3: the ant walks." not in json.dumps(request)  # narration is not state
    assert "parent step 3" in request["messages"][1]["content"]  # the copied state is what it sees

    comparison = world_compare(slug="parent", other="branch", params={})
    assert comparison["first_divergent_turn"] == 4
    assert comparison["first_common_turn"] == 0
    assert comparison["other_branched_from"] == {"world": "parent", "turn": 3}
    shown = browser.get("/worlds/parent/compare/branch/").content.decode()
    assert "branch is a branch of parent from turn 3" in shown and "Turns 0–4 in common" in shown
    # the branch's side of turn 2 tells its parent's turn (the branch has no turn of its own)
    assert shown.count("Turn 2: the ant walks.") == 2
    assert [t["number"] for t in comparison["turns"]] == [0, 1, 2, 3, 4]
    assert [t["identical"] for t in comparison["turns"]] == [True, True, True, True, False]

    read = reader_client.get("/api/worlds/branch/").json()
    assert read["branched_from"] == {"world": "parent", "turn": 3}
    before = reader_client.get("/api/worlds/branch/turns/2/")
    assert before.status_code == 404
    assert before.json()["error"]["code"] == "before_branch"
    assert "parent" in before.json()["error"]["message"]
    assert reader_client.get("/api/worlds/branch/turns/3/").status_code == 200
    page = browser.get("/worlds/branch/").content.decode()
    assert 'href="/worlds/parent/turns/3/"' in page

    # The parent can go; the branch keeps its turns and its origin.
    world_delete(slug="parent")
    read = reader_client.get("/api/worlds/branch/").json()
    assert read["branched_from"] == {"world": "parent", "turn": 3}
    assert reader_client.get("/api/worlds/branch/turns/4/").status_code == 200


def test_a_branch_takes_its_scenarios_cognition_and_its_parents_state() -> None:
    _rule_world("coin-parent", 5)
    for _ in range(2):
        run_turn("coin-parent")
    parent_state = Turn.objects.get(world__slug="coin-parent", number=2).state
    changed = copy.deepcopy(RULE_SCENARIO)
    rules = changed["cognition_profiles"]["flipper"]["inline"]["workflow"]["inline"]["nodes"][0]
    rules["rules"][0]["probability"] = 1.0  # always flips now
    _rule_world_scenario = scenario_assemble(data=changed)["scenario_hash"]
    branch = world_create(
        data={
            "slug": "coin-branch",
            "scenario_ref": {"hash": _rule_world_scenario},
            "branch_from": {"world": "coin-parent", "turn": 2},
            "seed": 5,
        }
    )
    first = Turn.objects.get(world=branch, number=2)
    assert first.state == parent_state
    assert first.attempt_id is None
    run_turn("coin-branch")
    assert Turn.objects.get(world=branch, number=3).state["entities"][1]["state"] == (
        "flipped on turn 3"
    )


# --- interventions ---------------------------------------------------------------------------

RAIN = {
    "narration": "Rain starts to fall on the plate.",
    "effects": [
        {"op": "set_entity_state", "entity_id": "crumb", "state": "soaked by the rain, soggy"}
    ],
}


def test_an_intervention_is_in_the_very_prompt_of_the_turn_it_joins(
    scripted_llm: ScriptedLLM,
    operator_client: APIClient,
    reader_client: APIClient,
    browser: Client,
) -> None:
    create_world("ant_on_plate", "rainy")
    scripted_llm.script(ANT_OK)
    run_turn("rainy")
    made = operator_client.post(
        "/api/worlds/rainy/interventions/", {"patch": RAIN, "note": "rain starts"}, format="json"
    )
    assert made.status_code == 201, made.json()
    assert made.json()["turn"] == 2 and made.json()["status"] == "pending"
    assert made.json()["created_by"] == "ops"
    # the count the claim reads (a turn looks its intervention up only when there is one)
    assert World.objects.get(slug="rainy").pending_interventions == 1
    scripted_llm.script(ANT_OK)
    attempt = run_turn("rainy")
    assert World.objects.get(slug="rainy").pending_interventions == 0
    assert attempt.status == AttemptStatus.COMMITTED
    prompt = scripted_llm.requests[-1]["messages"][1]["content"]
    assert "soaked by the rain, soggy" in prompt

    turn = reader_client.get("/api/worlds/rainy/turns/2/").json()
    first, second = turn["patches"]
    assert (first["patch_seq"], first["subject_id"]) == (1, "")
    assert first["narration"] == "Rain starts to fall on the plate."
    assert second["subject_id"] == "ant" and second["patch_seq"] == 2
    (transition,) = PatchTransition.objects.filter(world__slug="rainy", target_id="crumb")
    assert transition.intervention_id == made.json()["id"]
    listed = reader_client.get("/api/worlds/rainy/interventions/").json()["results"]
    assert [(i["status"], str(i["consumed_by_attempt"])) for i in listed] == [
        ("consumed", str(attempt.pk))
    ]
    # Provenance names the operator and the note.
    history = browser.get("/worlds/rainy/entities/crumb/").content.decode()
    turn_page = browser.get("/worlds/rainy/turns/2/").content.decode()
    assert "operator ops" in turn_page and "rain starts" in turn_page
    assert "operator ops" in history and "rain starts" in history
    # A consumed intervention is history: it cannot be deleted.
    refused = operator_client.delete(f"/api/worlds/rainy/interventions/{made.json()['id']}/")
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "intervention_consumed"


def test_an_intervention_whose_targets_do_not_fit_fails_the_turn_and_stays_pending(
    scripted_llm: ScriptedLLM, operator_client: APIClient
) -> None:
    create_world("ant_on_plate", "badrain")
    wrong = copy.deepcopy(RAIN)
    wrong["effects"][0]["entity_id"] = "umbrella"
    made = operator_client.post(
        "/api/worlds/badrain/interventions/", {"patch": wrong}, format="json"
    )
    assert made.status_code == 201
    attempt = run_turn("badrain")
    assert attempt.status == AttemptStatus.FAILED
    assert attempt.failure_step == "intervention_invalid"
    assert "umbrella" in attempt.failure_reason
    assert scripted_llm.requests == []  # nobody thought: the turn failed before
    pending = Intervention.objects.get(pk=made.json()["id"])
    assert not pending.consumed
    # Deleted and replaced, the next try of that turn applies the new one.
    assert (
        operator_client.delete(f"/api/worlds/badrain/interventions/{pending.pk}/").status_code
        == 204
    )
    assert World.objects.get(slug="badrain").pending_interventions == 0
    again = operator_client.post(
        "/api/worlds/badrain/interventions/", {"patch": RAIN, "turn": 1}, format="json"
    )
    assert again.status_code == 201
    scripted_llm.script(ANT_OK)
    assert run_turn("badrain").status == AttemptStatus.COMMITTED
    assert Intervention.objects.get(pk=again.json()["id"]).consumed


# --- bad input -------------------------------------------------------------------------------


def _counts() -> tuple[int, int, int]:
    return World.objects.count(), Turn.objects.count(), Intervention.objects.count()


@pytest.mark.parametrize(
    ("body", "status", "code", "field"),
    [
        ({"seed": -1}, 400, "invalid_seed", "seed"),
        ({"seed": 2**63}, 400, "invalid_seed", "seed"),
        ({"seed": 2**53}, 400, "invalid_seed", "seed"),
        ({"seed": "7"}, 400, "invalid_seed", "seed"),
        ({"seed": 1.5}, 400, "invalid_seed", "seed"),
        ({"seed": True}, 400, "invalid_seed", "seed"),
        (
            {"branch_from": {"world": "nowhere", "turn": 0}},
            400,
            "invalid_branch_from",
            "branch_from.world",
        ),
        (
            {"branch_from": {"world": "base", "turn": 9}},
            400,
            "invalid_branch_from",
            "branch_from.turn",
        ),
        (
            {"branch_from": {"world": "base", "turn": -1}},
            400,
            "invalid_branch_from",
            "branch_from.turn",
        ),
        ({"branch_from": {"world": "base"}}, 400, "invalid_branch_from", "branch_from.turn"),
        (
            {"branch_from": {"world": "base", "turn": 0, "x": 1}},
            400,
            "invalid_input",
            "branch_from.x",
        ),
        ({"branch_from": "base:0"}, 400, "invalid_branch_from", "branch_from"),
        (
            {"branch_from": {"world": "base", "turn": 0}, "start_time": "2026-01-01T00:00:00Z"},
            400,
            "invalid_start_time",
            "start_time",
        ),
    ],
)
def test_bad_world_fields_are_refused_naming_the_field_and_write_nothing(
    operator_client: APIClient, body: dict[str, Any], status: int, code: str, field: str
) -> None:
    _rule_world("base", None)
    before = _counts()
    payload: dict[str, Any] = {"slug": "newborn", **body}
    if "branch_from" not in body:
        payload["scenario_ref"] = {"data": RULE_SCENARIO}
    response = operator_client.post("/api/worlds/", payload, format="json")
    assert response.status_code == status, response.json()
    error = response.json()["error"]
    assert error["code"] == code
    assert error["details"]["field"] == field
    assert _counts() == before


def test_a_branch_of_a_scenario_with_other_entities_is_a_mismatch_naming_it(
    operator_client: APIClient,
) -> None:
    _rule_world("base", None)
    other = copy.deepcopy(RULE_SCENARIO)
    dice = copy.deepcopy(other["entities"][1])
    dice["inline"].update({"id": "dice", "name": "Dice"})
    other["entities"].append(dice)
    relabelled = copy.deepcopy(RULE_SCENARIO)
    relabelled["environments"] = {"hall": relabelled["environments"]["room"]}
    for entity in relabelled["entities"]:
        entity["inline"]["environment"] = "hall"
    kinds = copy.deepcopy(RULE_SCENARIO)
    kinds["entities"][1]["inline"]["kind"] = {
        "agent": {"goal": "roll", "memory": "", "cognition_profile": "flipper"}
    }
    before = _counts()
    for scenario, named in (
        (other, "entity 'dice' is in the scenario but not in world 'base'"),
        (relabelled, "environment 'hall' is in the scenario but not in world 'base'"),
        (kinds, "entity 'coin' is 'agent' in the scenario but 'prop' in world 'base'"),
    ):
        response = operator_client.post(
            "/api/worlds/",
            {
                "slug": "mismatch",
                "scenario_ref": {"data": scenario},
                "branch_from": {"world": "base", "turn": 0},
            },
            format="json",
        )
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == "branch_mismatch" and error["details"]["field"] == "scenario_ref"
        assert named in error["message"]
    assert _counts()[:2] == before[:2]


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"patch": {"narration": "x"}}, 400, "invalid_patch"),
        ({"patch": {"narration": "  ", "effects": []}}, 400, "invalid_patch"),
        ({"patch": {"narration": "x", "effects": [{"op": "teleport"}]}}, 400, "invalid_patch"),
        ({"patch": "rain"}, 400, "invalid_patch"),
        ({"patch": RAIN, "turn": 0}, 400, "invalid_turn"),
        ({"patch": RAIN, "turn": "2"}, 400, "invalid_turn"),
        ({"patch": RAIN, "note": 5}, 400, "invalid_input"),
        ({"patch": RAIN, "extra": 1}, 400, "invalid_input"),
        ({"note": "no patch"}, 400, "invalid_input"),
    ],
)
def test_bad_interventions_are_refused_and_write_nothing(
    operator_client: APIClient, body: dict[str, Any], status: int, code: str
) -> None:
    _rule_world("base", None)
    before = _counts()
    response = operator_client.post("/api/worlds/base/interventions/", body, format="json")
    assert response.status_code == status, response.json()
    assert response.json()["error"]["code"] == code
    assert _counts() == before


def test_interventions_for_taken_or_past_turns_are_409_and_readers_cannot_add(
    operator_client: APIClient, reader_client: APIClient
) -> None:
    _rule_world("base", None)
    run_turn("base")
    past = operator_client.post(
        "/api/worlds/base/interventions/",
        {"patch": {"narration": "x", "effects": []}, "turn": 1},
        format="json",
    )
    assert past.status_code == 409 and past.json()["error"]["code"] == "turn_past"
    first = operator_client.post(
        "/api/worlds/base/interventions/",
        {"patch": {"narration": "x", "effects": []}, "turn": 4},
        format="json",
    )
    assert first.status_code == 201
    taken = operator_client.post(
        "/api/worlds/base/interventions/",
        {"patch": {"narration": "y", "effects": []}, "turn": 4},
        format="json",
    )
    assert taken.status_code == 409 and taken.json()["error"]["code"] == "turn_taken"
    refused = reader_client.post(
        "/api/worlds/base/interventions/",
        {"patch": {"narration": "z", "effects": []}},
        format="json",
    )
    assert refused.status_code == 403
    missing = operator_client.post(
        "/api/worlds/nowhere/interventions/",
        {"patch": {"narration": "z", "effects": []}},
        format="json",
    )
    assert missing.status_code == 404
    assert Intervention.objects.count() == 1


# --- the command line ------------------------------------------------------------------------


def test_the_cli_creates_seeded_worlds_and_branches_and_intervenes(tmp_path: Any) -> None:
    from io import StringIO

    from django.core.management import call_command
    from django.core.management.base import CommandError

    scenario = scenario_assemble(data=RULE_SCENARIO)["scenario_hash"]
    out = StringIO()
    call_command("create_world", "cli-coin", "--scenario-hash", scenario, "--seed", "5", stdout=out)
    assert "seed 5" in out.getvalue()
    run_turn("cli-coin")
    out = StringIO()
    call_command("create_world", "cli-branch", "--branch-from", "cli-coin:1", stdout=out)
    assert "turn 1, branched from 'cli-coin' at turn 1" in out.getvalue()
    assert World.objects.get(slug="cli-branch").current_turn == 1
    with pytest.raises(CommandError, match="WORLD:TURN"):
        call_command("create_world", "cli-bad", "--branch-from", "cli-coin", stdout=StringIO())
    with pytest.raises(CommandError, match="invalid_branch_from"):
        call_command("create_world", "cli-bad", "--branch-from", "cli-coin:7", stdout=StringIO())
    with pytest.raises(CommandError, match="invalid_seed"):
        call_command(
            "create_world",
            "cli-bad",
            "--scenario-hash",
            scenario,
            "--seed",
            "-1",
            stdout=StringIO(),
        )
    assert not World.objects.filter(slug="cli-bad").exists()

    patch = tmp_path / "rain.json"
    patch.write_text(json.dumps(RAIN | {"effects": []}))
    out = StringIO()
    call_command(
        "intervene", "cli-coin", str(patch), "--note", "rain", "--operator", "alice", stdout=out
    )
    assert "joins turn 2" in out.getvalue()
    made = Intervention.objects.get(world__slug="cli-coin")
    assert (made.turn, made.note, made.created_by) == (2, "rain", "alice")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(CommandError, match="is not JSON"):
        call_command("intervene", "cli-coin", str(broken), stdout=StringIO())
    with pytest.raises(CommandError, match="turn_taken"):
        call_command("intervene", "cli-coin", str(patch), "--turn", "2", stdout=StringIO())


# --- MCP -------------------------------------------------------------------------------------


def test_mcp_tools_create_seeded_branches_and_interventions(
    operator_user: User, reader_user: User
) -> None:
    from surfaces.mcp.calls import Caller, call
    from surfaces.mcp.catalog import api_tools

    tools = api_tools()
    assert {"intervention_create", "intervention_list", "intervention_delete"} <= set(tools)
    assert {"seed", "branch_from"} <= set(tools["world_create"].input_schema["properties"])

    def use(name: str, user: User, **arguments: Any) -> tuple[int, dict[str, Any]]:
        answer = call(tools[name], arguments, Caller(user=user, token=None))
        return answer.status, answer.body

    status, made = use(
        "world_create", operator_user, slug="mcp-coin", scenario_ref={"data": RULE_SCENARIO}, seed=3
    )
    assert status == 201 and made["seed"] == 3
    run_turn("mcp-coin")
    status, branch = use(
        "world_create",
        operator_user,
        slug="mcp-branch",
        branch_from={"world": "mcp-coin", "turn": 1},
    )
    assert status == 201 and branch["branched_from"] == {"world": "mcp-coin", "turn": 1}
    status, added = use(
        "intervention_create",
        operator_user,
        slug="mcp-coin",
        patch=RAIN | {"effects": []},
        note="n",
    )
    assert status == 201 and added["turn"] == 2
    status, listed = use("intervention_list", reader_user, slug="mcp-coin")
    assert status == 200 and [i["id"] for i in listed["results"]] == [added["id"]]
    status, refused = use("intervention_create", reader_user, slug="mcp-coin", patch=RAIN)
    assert status == 403 and refused["error"]["code"] == "permission_denied"
    status, _ = use(
        "intervention_delete", operator_user, slug="mcp-coin", intervention_id=added["id"]
    )
    assert status == 204
    assert not Intervention.objects.exists()

"""The SQL of the most frequent reads of worlds, turns and attempts (``worlds_app.selectors``
shapes their rows): every API client polls them, and the ORM spent more CPU compiling their
dozen queries than PostgreSQL spent running them (``scenarios_app.sql_rows``). Each read is one
or two statements; counts, the newest finished attempt, the budget in force and the cost totals
are LATERAL subqueries of the same statement.
"""

# ruff: noqa: S608  (the statements are built from constants; every value is a parameter)

from __future__ import annotations

from typing import Any
from uuid import UUID

from cognition_app.selectors import COST_TOTALS_COLUMNS, COST_TOTALS_SELECT
from scenarios_app.sql_rows import fetch_dict, fetch_dicts
from worlds_app.models import ACTIVE_STATUSES, AttemptStatus, EventKind

_ACTIVE = ", ".join(f"'{status.value}'" for status in ACTIVE_STATUSES)
_QUEUED, _RUNNING = AttemptStatus.QUEUED.value, AttemptStatus.RUNNING.value

# A world's summary columns (``world_summary``), its attempt counts and its newest finished
# attempt (``last_*``), for a FROM clause that names the world ``w``.
_SUMMARY_SELECT = (
    "w.id, w.slug, w.name, w.label, w.scenario_id, w.scenario_ref, w.replay_from, "
    "w.seed, w.reuse, w.branched_from_slug, w.branched_from_turn, w.chronon_seconds, w.current_turn, w.created_at, n.queued, n.running, "
    "e.slug AS experiment_slug, w.arm, w.replicate, "
    "l.id AS last_id, l.seq AS last_seq, l.status AS last_status, l.ended_at AS last_ended_at"
)
_SUMMARY_JOINS = (
    "CROSS JOIN LATERAL (SELECT "
    f"count(*) FILTER (WHERE a.status = '{_QUEUED}') AS queued, "
    f"count(*) FILTER (WHERE a.status = '{_RUNNING}') AS running "
    "FROM worlds_app_turnattempt a WHERE a.world_id = w.id) n "
    # the newest finished attempt that is not a batch's cancellation: a failure that ended a
    # batch stays the world's last outcome, not the cancellations it caused after it
    "LEFT JOIN LATERAL (SELECT a.id, a.seq, a.status, a.ended_at "
    "FROM worlds_app_turnattempt a "
    f"WHERE a.world_id = w.id AND a.status NOT IN ({_ACTIVE}) "
    f"AND NOT (a.status = '{AttemptStatus.CANCELLED.value}' AND a.failure_step = 'batch') "
    "ORDER BY a.seq DESC LIMIT 1) l ON true "
    "LEFT JOIN worlds_app_experiment e ON e.id = w.experiment_id"
)
_SUMMARY_JSON = ("scenario_ref", "replay_from")


def _cost_columns(alias: str) -> str:
    return ", ".join(f"{alias}.{name} AS cost_{name}" for name in COST_TOTALS_COLUMNS)


def world_page(*, scenario: str | None, limit: int, offset: int) -> list[dict[str, Any]]:
    """Summary rows of worlds, newest first (optionally one scenario's), each with ``total``:
    how many worlds match (an uncorrelated subquery, counted once per statement)."""
    where, params = ("WHERE scenario_id = %s", [scenario]) if scenario else ("", [])
    return fetch_dicts(
        f"SELECT {_SUMMARY_SELECT}, (SELECT count(*) FROM worlds_app_world {where}) AS total "
        f"FROM worlds_app_world w {_SUMMARY_JOINS} {where.replace('scenario_id', 'w.scenario_id')} "
        "ORDER BY w.created_at DESC, w.slug LIMIT %s OFFSET %s",
        [*params, *params, limit, offset],
        json_columns=_SUMMARY_JSON,
    )


def world_count(*, scenario: str | None) -> int:
    where, params = ("WHERE scenario_id = %s", [scenario]) if scenario else ("", [])
    row = fetch_dict(f"SELECT count(*) AS n FROM worlds_app_world {where}", params)
    assert row is not None
    return int(row["n"])


_BUDGET_LIMITS = ("max_tokens_per_turn", "max_cost_per_turn", "max_tokens_total", "max_cost_total")

_WORLD_DETAIL = (
    f"SELECT {_SUMMARY_SELECT}, w.scenario_snapshot, "
    "t.id AS turn_id, t.simulation_time, t.state, t.state_hash, b.id AS budget_id, "
    f"{', '.join(f'b.{name}' for name in _BUDGET_LIMITS)}, {_cost_columns('cost')}, "
    # the metrics it was measured with (``json``: psycopg decodes it), by label
    "(SELECT coalesce(json_agg(json_build_object('hash', m.metric_id, 'label', m.label, "
    "'kind', m.kind, 'turns', m.turns, 'error_turns', m.error_turns) ORDER BY m.label, m.metric_id), "
    "'[]') FROM (SELECT x.metric_id, mt.label, mt.kind, count(*) AS turns, "
    "count(*) FILTER (WHERE x.error_code <> '') AS error_turns FROM worlds_app_measurement x "
    "JOIN scenarios_app_metric mt ON mt.hash = x.metric_id WHERE x.world_id = w.id "
    "GROUP BY x.metric_id, mt.label, mt.kind) m) AS measured_metrics "
    f"FROM worlds_app_world w {_SUMMARY_JOINS} "
    "LEFT JOIN worlds_app_turn t ON t.world_id = w.id AND t.number = w.current_turn "
    # the budget in force is the newest setting (world_budget_history's first row)
    "LEFT JOIN LATERAL (SELECT * FROM worlds_app_worldbudget wb WHERE wb.world_id = w.id "
    "ORDER BY wb.set_at DESC, wb.id DESC LIMIT 1) b ON true "
    f"CROSS JOIN LATERAL ({COST_TOTALS_SELECT} WHERE inv.world_id = w.id) cost "
    "WHERE w.slug = %s"
)


def world_detail(*, slug: str) -> dict[str, Any] | None:
    """A world's summary, snapshot, current turn (``turn_id`` null if it is missing), budget
    in force (``budget_id`` null if none), ``cost_*`` totals and the metrics it was measured
    with; None if no such world."""
    return fetch_dict(
        _WORLD_DETAIL,
        [slug],
        json_columns=(*_SUMMARY_JSON, "scenario_snapshot", "state"),
    )


RECENT_ATTEMPTS = 20


def recent_attempts(*, world_id: int) -> list[dict[str, Any]]:
    return fetch_dicts(
        "SELECT id, seq, status, attempted_turn, produced_turn, queued_at, ended_at, "
        "failure_reason FROM worlds_app_turnattempt WHERE world_id = %s "
        "ORDER BY seq DESC LIMIT %s",
        [world_id, RECENT_ATTEMPTS],
    )


TRANSITION_COLUMNS = (
    "patch_seq",
    "effect_index",
    "subject_id",
    "node_id",
    "workflow_hash",
    "op",
    "target_kind",
    "target_id",
    "before",
    "after",
    "intervention_id",
)
_TURN = (
    "SELECT w.id AS world_id, w.current_turn, t.id AS turn_id, t.number, t.simulation_time, "
    f"t.state, t.state_hash, t.attempt_id, t.created_at, {_cost_columns('cost')}, "
    # transitions and narrations hold only JSON-exact types (text, integers, jsonb), so they
    # travel as one JSON array each, in the order the ORM read them
    "(SELECT coalesce(json_agg(json_build_object("
    + ", ".join(f"'{c}', p.{c}" for c in TRANSITION_COLUMNS)
    + ") ORDER BY p.patch_seq, p.effect_index), '[]') "
    "FROM worlds_app_patchtransition p WHERE p.world_id = w.id AND p.turn_number = t.number"
    ") AS transitions, "
    "(SELECT coalesce(json_agg(json_build_array(e.subject_id, e.patch_seq, e.payload) "
    "ORDER BY e.seq), '[]') FROM worlds_app_attemptevent e "
    f"WHERE e.attempt_id = t.attempt_id AND e.kind = '{EventKind.WORLD_PATCH_APPLIED.value}') "
    "AS narrations "
    "FROM worlds_app_world w "
    "LEFT JOIN worlds_app_turn t ON t.world_id = w.id AND t.number = %s "
    f"CROSS JOIN LATERAL ({COST_TOTALS_SELECT} "
    "WHERE inv.world_id = w.id AND inv.attempted_turn = %s) cost "
    "WHERE w.slug = %s"
)


def turn(*, slug: str, number: int) -> dict[str, Any] | None:
    """A committed turn with its transitions, narration events and ``cost_*`` totals (of every
    attempt at it); ``turn_id`` null if the world has no such turn; None if no such world."""
    # transitions and narrations are ``json`` (not ``jsonb``): psycopg decodes them itself
    return fetch_dict(_TURN, [number, number, slug], json_columns=("state",))


_ATTEMPT = (
    "SELECT a.*, w.slug AS world_slug, "
    f"{_cost_columns('cost')} "
    "FROM worlds_app_turnattempt a JOIN worlds_app_world w ON w.id = a.world_id "
    f"CROSS JOIN LATERAL ({COST_TOTALS_SELECT} "
    "WHERE inv.world_id = a.world_id AND inv.attempt_id = a.id) cost "
    "WHERE a.id = %s"
)
EVENT_COLUMNS = (
    "seq",
    "kind",
    "subject_id",
    "node_id",
    "workflow_hash",
    "patch_seq",
    "payload",
    "content_hash",
    "invocation_id",
    "llm_call_id",
    "created_at",
)


def attempt(*, attempt_id: UUID) -> dict[str, Any] | None:
    """An attempt's row, its world's slug and its ``cost_*`` totals; None if no such attempt."""
    return fetch_dict(_ATTEMPT, [attempt_id])


def attempt_events(
    *, attempt_id: UUID, after: int = 0, limit: int | None = None
) -> list[dict[str, Any]]:
    """The attempt's events numbered above ``after``, in order, at most ``limit`` (None: all;
    ``LIMIT NULL`` is no limit, so the statement's text is one)."""
    return fetch_dicts(
        f"SELECT {', '.join(EVENT_COLUMNS)} FROM worlds_app_attemptevent "
        "WHERE attempt_id = %s AND seq > %s ORDER BY seq LIMIT %s",
        [attempt_id, after, limit],
        json_columns=("payload",),
    )

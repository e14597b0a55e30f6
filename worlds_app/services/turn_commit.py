"""Committing a turn: turn N's snapshot, the attempt's last events (the outcome
``turn_committed`` among them), its transitions and the attempt committed, in one transaction.

The transaction is one batch (``cognition_app.rows.send_batch``: a pipeline, or one
multi-statement query) — one round trip, its commit included — when the rows are few (an LLM
turn); PostgreSQL runs such a batch as one transaction, all or nothing.
The checks it depends on come first in it and abort it when they fail
(``worlds_app_refuse_unless``, migration 0010): the attempt still running under this worker's
lease (else ``LeaseLost``: the reaper owns its outcome) and the world still at turn N-1. When
the rows are many (a big rule-policy turn) they are sent by ``COPY`` after that query, in an
explicit transaction. (Rows travel as one JSON parameter per statement now, so the
threshold is kept as it was measured, not re-measured: two side-by-side runs were too noisy.)

With ``claim_next``, the next attempt of the batch is claimed in the same transaction
(``claims.py``), so the task goes on with it without a broker round trip and without a gap:
the batch's turns follow each other like the statements of one worker.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from datetime import timedelta
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from chukwa_core.hashing import json_hash
from chukwa_core.world_state import WorldState
from cognition_app.rows import RowTable, Statement, insert_rows, send_batch
from cognition_app.subject_run import AttemptFailure, StagedEvent
from worlds_app.models import Intervention, PatchTransition, Turn, TurnAttempt, World
from worlds_app.services.attempt_recorder import AttemptRecorder
from worlds_app.services.claims import (
    Claim,
    LeaseLost,
    follower_claim,
    follower_statement,
    next_queued_statement,
    refusal_of,
)
from worlds_app.services.dispatch import (
    MEASURE_DEFER_SECONDS,
    dispatch_on_commit,
    export_on_commit,
    kick_on_commit,
    measure_on_commit,
)
from worlds_app.services.events import EVENT_ROWS, EventLog
from worlds_app.services.execution import StagedTransition

# Transition rows as tuples, in this column order (a plain multi-row INSERT or COPY).
TRANSITION_ROWS = RowTable.of(
    PatchTransition,
    (
        "attempt",
        "world",
        "turn_number",
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
        "invocation_id",
        "llm_call_id",
        "intervention",
    ),
)
TURN_ROWS = RowTable.of(
    Turn, ("world", "number", "simulation_time", "state", "state_hash", "attempt", "created_at")
)

# Event and transition rows of at most this many values (rows times columns) in all go with the
# commit's batch; more are sent by COPY after it.
INLINE_PARAMS = 600

_WORLD = connection.ops.quote_name(World._meta.db_table)
_ATTEMPT = connection.ops.quote_name(TurnAttempt._meta.db_table)
# The commit's checks, first in its transaction: the world advances from turn N-1 (its row
# locked first, as everything that locks both locks it first) and the attempt, still running
# under this worker's lease, is committed — else the whole transaction is refused, a lost lease
# reported before a moved world. (The subquery, fenced by OFFSET 0, reads ``w`` before ``a``.)
# Identifiers from the models, quoted; every value is a parameter.
_CHECKS = f"""WITH w AS (
    UPDATE {_WORLD} SET current_turn = %s WHERE id = %s AND current_turn = %s RETURNING 1
), a AS (
    UPDATE {_ATTEMPT} SET status = 'committed', produced_turn = %s, ended_at = %s, duration_ms = %s
    WHERE id = %s AND status = 'running' AND lease_owner = %s RETURNING 1
)
SELECT worlds_app_refuse_unless(attempts = 1, 'lease_lost'),
    worlds_app_refuse_unless(worlds = 1, 'world_moved')
FROM (SELECT (SELECT count(*) FROM w) AS worlds, (SELECT count(*) FROM a) AS attempts OFFSET 0) n
"""  # noqa: S608


# The intervention the turn applied, consumed, and the world's count of pending ones lowered.
_CONSUME = f"""WITH i AS (
    UPDATE {connection.ops.quote_name(Intervention._meta.db_table)}
    SET consumed_by_id = %s, consumed_at = %s WHERE id = %s AND consumed_by_id IS NULL
    RETURNING world_id
)
UPDATE {_WORLD} SET pending_interventions = pending_interventions - 1
WHERE id = (SELECT world_id FROM i)
"""  # noqa: S608


def commit_turn(
    claim: Claim,
    working: WorldState,
    staged: list[StagedTransition],
    recorder: AttemptRecorder,
    started: float,
    *,
    owner: str,
    claim_next: bool = False,
    intervention_id: int | None = None,
) -> tuple[Turn, Claim | None]:
    """Commit the turn; returns it and, with ``claim_next``, the next attempt of the batch
    claimed for ``owner`` (None when there is none or it is not queued: then, and without
    ``claim_next``, the world's next attempt is kicked as always). ``intervention_id``: the
    intervention the turn applied, marked consumed by this commit."""
    if claim.previous is None:
        raise RuntimeError("the claim's turn N-1 is loaded before the commit")
    # A committed turn's calls are finished rows: the writer thread's last writes are waited
    # for, and what it has not taken yet (usually the last call's: the subject had the thread
    # wait for the interpreter since) goes in the commit's transaction, one round trip less.
    with recorder.before_commit() as finishing:
        return _commit(
            claim,
            claim.previous,
            working,
            staged,
            recorder.events,
            started,
            finishing,
            owner=owner,
            claim_next=claim_next,
            intervention_id=intervention_id,
        )


def _commit(
    claim: Claim,
    previous: Turn,
    working: WorldState,
    staged: list[StagedTransition],
    events: EventLog,
    started: float,
    finishing: list[Statement],
    *,
    owner: str,
    claim_next: bool,
    intervention_id: int | None,
) -> tuple[Turn, Claim | None]:
    """:func:`commit_turn` once the calls' finishing rows are written but ``finishing``, which
    go in its transaction."""
    attempt = claim.attempt
    world = attempt.world
    number = previous.number + 1
    # The working world is done with: its snapshot shares its entities (no copy) and is hashed
    # once; the next attempt of the batch starts from it as it is (a copy of each entity).
    state = working.to_snapshot(share=True)
    turn = Turn(
        world_id=world.pk,
        number=number,
        simulation_time=previous.simulation_time + timedelta(seconds=world.chronon_seconds),
        state=state,
        state_hash=json_hash(state),
        attempt_id=attempt.pk,
    )
    transitions = [
        (
            *(attempt.pk, world.pk, number, seq, t.effect_index, subject_id, node_id),
            *(workflow_hash, t.op, t.target_kind, t.target_id, t.before, t.after),
            *(invocation_id, llm_call_id, intervention),
        )
        for seq, subject_id, node_id, workflow_hash, t, invocation_id, llm_call_id, intervention in (
            staged
        )
    ]
    has_next = attempt.batch_index + 1 < attempt.batch_size
    follows = claim_next and has_next
    outcome = StagedEvent("turn_committed", {"turn": number, "state_hash": turn.state_hash})
    with events.finishing(outcome) as event_rows:
        params = len(event_rows) * len(EVENT_ROWS.columns)
        params += len(transitions) * len(TRANSITION_ROWS.columns)
        # One round trip is one transaction of its own (not inside a caller's, e.g. a test's).
        inline = params <= INLINE_PARAMS and not connection.in_atomic_block
        # The attempt ends (and its follower starts) when the commit is sent.
        turn.created_at = now = timezone.now()
        duration_ms = int((time.monotonic() - started) * 1000)
        statements: list[Statement] = [
            (
                _CHECKS,
                [
                    *(number, world.pk, previous.number),
                    *(number, now, duration_ms, attempt.pk, attempt.lease_owner),
                ],
            ),
            *finishing,  # after the checks: the world's row is locked first
            *TURN_ROWS.statements(
                [(world.pk, number, turn.simulation_time, state, turn.state_hash, attempt.pk, now)]
            ),
        ]
        if intervention_id is not None:
            # Consumed with the turn that applied it, or not at all (it stays pending).
            statements.append((_CONSUME, [attempt.pk, now, intervention_id]))
        if inline:
            statements += [
                *EVENT_ROWS.statements(event_rows),
                *TRANSITION_ROWS.statements(transitions),
            ]
        if follows:
            statements.append(follower_statement(attempt, number + 1, owner, now))
        elif has_next:  # its id, to send its task after the commit without a query
            statements.append(next_queued_statement(attempt))
        try:
            with nullcontext() if inline else transaction.atomic(durable=True):
                row = _send(statements)
                if not inline:
                    insert_rows(EVENT_ROWS, event_rows)
                    insert_rows(TRANSITION_ROWS, transitions)
        except DatabaseError as exc:
            refusal = refusal_of(exc)
            if refusal == "lease_lost":
                raise LeaseLost(str(attempt.pk)) from None
            if refusal == "world_moved":
                raise AttemptFailure(
                    "commit", f"world {world.slug!r} moved past turn {previous.number}"
                ) from None
            raise
    follower = follower_claim(row, claim, turn) if follows and row is not None else None
    # Committed: these run at once.
    experiment = world.experiment_id is not None
    admitted = not experiment or world.admitted_at is not None
    if follower is None and has_next and not follows and row is not None and admitted:
        # the batch's next attempt is queued: its task is sent as the kick would send it
        dispatch_on_commit(attempt_id=row[0], world_slug=world.slug, experiment=experiment)
    elif follower is None:
        kick_on_commit(world.pk)
    export_on_commit(attempt.pk)
    if world.experiment_id is not None:  # an experiment's worlds are measured as turns commit
        quick = duration_ms < MEASURE_DEFER_SECONDS * 1000
        measure_on_commit(world.pk, world.experiment_id, quick=quick)
    return turn, follower


def _send(statements: list[Statement]) -> Any:
    """Run the statements in one round trip (``cognition_app.rows.send_batch``); the row the
    last one returned, if it returns rows and returned one."""
    last = send_batch(statements)[-1]
    return last[0] if last else None

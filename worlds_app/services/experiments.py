"""Experiments (docs/experiments.md): one request makes arms by replicates ordinary worlds
``<slug>--<arm>--<i>``, replicate i seeded alike in every arm (paired), with the arm's
interventions, ``turns`` turns queued on each, and every world measured with the experiment's
metrics at turn 0 and as each turn commits.

The design is validated, and every reference resolved, before anything is written; the worlds,
their interventions and their turns are then written in one transaction (a 400 or 409 found
while writing — a world slug taken, a start time out of range — writes nothing either).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Field, Model
from django.utils import timezone

from chukwa_core.errors import ConflictError, NotFoundError, invalid
from chukwa_core.experiment_design import Budget, PlannedIntervention, world_slug
from chukwa_core.hashing import json_hash
from chukwa_core.seeds import replicate_seed
from cognition_app import batches
from cognition_app.batch_queue import experiment_owner
from worlds_app.models import (
    AttemptStatus,
    Experiment,
    ExperimentLedger,
    Intervention,
    Turn,
    TurnAttempt,
    World,
)
from worlds_app.selectors import require_slug
from worlds_app.services.branches import design_branch_point
from worlds_app.services.cancelling import cancel_queued
from worlds_app.services.dispatch import admit_on_commit, measure_on_commit
from worlds_app.services.experiment_design import (
    MAX_WORLDS,
    check_slug_length,
    check_world_count,
    design_of,
)
from worlds_app.services.factorial_arms import factorial_arms
from worlds_app.services.measure_redrive import batch_answers_redrive
from worlds_app.services.measurements import resolve_metric_refs
from worlds_app.services.world_inputs import whole_number
from worlds_app.services.worlds import new_world_rows, parse_start_time, world_start


def _budget_columns(budget: Budget | None) -> dict[str, Any]:
    if budget is None:
        return {}
    cost = budget.max_cost_total
    return {
        "max_tokens_total": budget.max_tokens_total,
        "max_cost_total": None if cost is None else Decimal(cost),
    }


def experiment_create(*, data: Any, created_by: str = "") -> Experiment:
    """Validate the design, then create the experiment, its worlds, their interventions and
    turns in one transaction; after it commits, turn 0 of every world is measured and the
    first worlds the fairness bound admits are dispatched."""
    design = design_of(data)
    slug = design.slug
    with transaction.atomic(durable=True):
        if Experiment.objects.filter(slug=slug).exists():
            raise ConflictError(
                "experiment_exists",
                f"slug: an experiment {slug!r} already exists",
                {"field": "slug"},
            )
        try:
            with transaction.atomic():
                experiment = Experiment.objects.create(
                    slug=slug,
                    name=design.name,
                    description=design.description,
                    design=design.to_json(),
                    registered_design=design.to_json(),
                    registered_hash=json_hash(design.to_json()),
                    seed=design.seed,
                    created_by=created_by,
                    **_budget_columns(design.budget),
                )
        except IntegrityError:  # a create of the same slug committed meanwhile: the index decides
            raise ConflictError(
                "experiment_exists",
                f"slug: an experiment {slug!r} was just created",
                {"field": "slug"},
            ) from None
        if design.factorial is not None:  # the arms' forks, written with the experiment
            written = factorial_arms(design.factorial, write=True)
            assert [a.scenario_hash for a in written] == [a.scenario_hash for a in design.arms]
        ExperimentLedger.objects.create(experiment=experiment)
        _make_worlds(experiment, range(1, design.replicates + 1), created_by)
    return experiment


def _make_worlds(experiment: Experiment, replicates: range, created_by: str) -> None:
    """Replicates ``replicates`` of every arm, in the caller's transaction and in bulk: each
    arm's start (scenario copy, first state) computed once; the worlds, their first turns,
    interventions and queued turns written a few statements for all; once it commits, the
    worlds the fairness bound admits are dispatched (the rest as admitted worlds finish) and
    every world is measured at its first turn (the baseline)."""
    design = experiment.typed_design
    replayed = design.replay_from
    point = design_branch_point(design.branch_from)
    slugs = design.world_slugs(replicates)
    taken = World.objects.filter(slug__in=slugs).values_list("slug", flat=True).first()
    if taken is not None:
        raise ConflictError(
            "world_exists", f"slug: a world {taken!r} already exists", {"field": "slug"}
        )
    pairs: dict[str, World] = {}
    pair_times: dict[int, datetime] = {}
    if replayed is not None:
        pair_slugs = [
            world_slug(replayed.experiment, label, i)
            for label in design.arm_labels
            for i in replicates
        ]
        pairs = {w.slug: w for w in World.objects.filter(slug__in=pair_slugs)}
        for slug in pair_slugs:
            if slug not in pairs:
                raise invalid("invalid_replay_from", "replay_from.experiment", f"no world {slug!r}")
        pair_times = dict(
            Turn.objects.filter(world__in=list(pairs.values()))
            .order_by("world_id", "number")
            .distinct("world_id")
            .values_list("world_id", "simulation_time")
        )
    start = parse_start_time(design.start_time) if point is None else None
    rows: list[tuple[World, Turn]] = []
    interventions: list[tuple[World, PlannedIntervention]] = []
    for arm in design.arms:
        scenario_hash = arm.scenario_hash
        shared = world_start(scenario_hash, {"hash": scenario_hash}, start or _now(), point)
        own_start = replayed is not None and design.start_time is None and point is None
        for replicate in replicates:
            fields: dict[str, Any] = {}
            begin = shared
            if replayed is not None:
                pair = pairs[world_slug(replayed.experiment, arm.label, replicate)]
                fields = {
                    "replay_source": pair,
                    "replay_from": {"world": pair.slug, "mode": replayed.mode},
                }
                if own_start:  # the pair's own start: the same simulation time in prompts
                    begin = shared.starting_at(pair_times[pair.pk])
            world, turn = new_world_rows(
                begin,
                slug=design.world_slug(arm.label, replicate),
                name=f"{design.name}: {arm.label} #{replicate}",
                seed=replicate_seed(design.seed, replicate),
                experiment=experiment,
                arm=arm.label,
                replicate=replicate,
                reuse=design.reuse,
                next_attempt_seq=1 + design.turns,
                # the counter a turn reads before it looks for its intervention
                # (interventions.intervention_create keeps it one by one; here in bulk)
                pending_interventions=len(arm.interventions),
                **fields,
            )
            rows.append((world, turn))
            interventions.extend((world, item) for item in arm.interventions)
    worlds = [world for world, _ in rows]
    try:
        with transaction.atomic():
            # (the arm's scenario_ref, ~80 bytes, is cheaper inline than by an UPDATE of
            # every world row)
            with _json_once(World, worlds, ("scenario_snapshot",)):
                World.objects.bulk_create(worlds)
    except IntegrityError:  # a create racing on one of the slugs: the constraint decides
        raise ConflictError(
            "world_exists",
            "slug: one of the experiment's world slugs was just taken",
            {"field": "slug"},
        ) from None
    for world, turn in rows:
        turn.world = world
    _insert_first_turns([turn for _, turn in rows])
    Intervention.objects.bulk_create(
        [
            Intervention(
                world=world,
                turn=item.turn,
                patch=dict(item.patch),
                note=item.note,
                created_by=created_by,
            )
            for world, item in interventions
        ]
    )
    world_ids = [world.pk for world, _ in rows]
    _queue_turns(world_ids, design.turns, created_by)
    world_ids = [world.pk for world, _ in rows]
    # The first CHUKWA_EXPERIMENT_WORLDS_IN_FLIGHT worlds are dispatched after commit; each
    # of the rest when an admitted world is done (dispatch.experiment_admit).
    admit_on_commit(experiment.pk)
    measure_on_commit(world_ids, experiment.pk)  # the first turn, the baseline


# A JSON value this many rows share (an arm's scenario snapshot, its first state) is written
# once for all of them instead of as one copy per row in the bulk insert's arrays, which psycopg
# quotes in Python, a regular-expression substitution per double quote of every copy.
SHARED_JSON_ROWS = 50


@contextmanager
def _json_once(model: type[Model], instances: list[Any], names: tuple[str, ...]) -> Iterator[None]:
    """Around a ``bulk_create`` of ``instances``: each of the fields ``names`` whose value (the
    same object) ``SHARED_JSON_ROWS`` or more instances share is inserted as null-free
    placeholder ``{}`` and then set by one UPDATE per shared value; the instances keep their
    values. Rows with a value of their own are inserted as they are."""
    shared: dict[tuple[str, int], list[Any]] = {}
    for instance in instances:
        for name in names:
            shared.setdefault((name, id(getattr(instance, name))), []).append(instance)
    groups = [
        (name, items) for (name, _), items in shared.items() if len(items) >= SHARED_JSON_ROWS
    ]
    values = [getattr(items[0], name) for name, items in groups]
    for (name, items), _ in zip(groups, values, strict=True):
        for instance in items:
            setattr(instance, name, {})
    try:
        yield
    finally:
        for (name, items), value in zip(groups, values, strict=True):
            for instance in items:
                setattr(instance, name, value)
    table = connection.ops.quote_name(model._meta.db_table)
    with connection.cursor() as cursor:
        for (name, items), value in zip(groups, values, strict=True):
            field = model._meta.get_field(name)
            assert isinstance(field, Field) and field.column is not None
            cursor.execute(
                f"UPDATE {table} SET {connection.ops.quote_name(field.column)} = %s "  # noqa: S608
                "WHERE id = ANY(%s)",
                [field.get_db_prep_value(value, connection), [item.pk for item in items]],
            )


def _insert_first_turns(turns: list[Turn]) -> None:
    """The worlds' first turns: a state ``SHARED_JSON_ROWS`` or more of them share (an arm's
    first state: the same hash) sent once, PostgreSQL copying it into their rows (``INSERT …
    SELECT``; a turn row cannot be updated once written, so ``_json_once`` cannot serve)."""
    groups: dict[str, list[Turn]] = {}
    for turn in turns:  # the same hash, the same state
        groups.setdefault(turn.state_hash, []).append(turn)
    # a state of its own (fewer than SHARED_JSON_ROWS turns share it): the plain bulk insert
    Turn.objects.bulk_create(
        [turn for group in groups.values() if len(group) < SHARED_JSON_ROWS for turn in group]
    )
    table = connection.ops.quote_name(Turn._meta.db_table)
    state_field = Turn._meta.get_field("state")
    assert isinstance(state_field, Field)
    created = timezone.now()
    with connection.cursor() as cursor:
        for state_hash, group in groups.items():
            if len(group) < SHARED_JSON_ROWS:
                continue
            cursor.execute(
                f"INSERT INTO {table} (world_id, number, simulation_time, state, state_hash, "  # noqa: S608
                "attempt_id, created_at) SELECT u.world_id, u.number, u.simulation_time, %s, "
                "%s, NULL, %s FROM unnest(%s::bigint[], %s::integer[], %s::timestamptz[]) "
                "AS u(world_id, number, simulation_time)",
                [
                    state_field.get_db_prep_value(group[0].state, connection),
                    state_hash,
                    created,
                    [turn.world.pk for turn in group],
                    [turn.number for turn in group],
                    [turn.simulation_time for turn in group],
                ],
            )


def _queue_turns(world_ids: list[int], turns: int, created_by: str) -> None:
    """Each world's ``turns`` queued attempts (one batch per world, seq 1…turns), made by
    PostgreSQL in one statement: 10,000 worlds by 20 turns are 200,000 rows, which model
    instances and their bound parameters would take most of the creation's time to build."""
    table = connection.ops.quote_name(TurnAttempt._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (id, world_id, seq, batch_id, batch_index, batch_size, "  # noqa: S608
            "status, lease_owner, queued_at, failure_step, failure_subject, failure_reason, "
            "requested_by, waiting_for) "
            "SELECT gen_random_uuid(), w.id, i + 1, w.batch_id, i, %s, %s, '', now(), '', '', "
            "'', %s, '' FROM (SELECT id, gen_random_uuid() AS batch_id "
            "FROM unnest(%s::bigint[]) AS id) AS w CROSS JOIN generate_series(0, %s - 1) AS i "
            "ORDER BY w.id, i",
            [turns, AttemptStatus.QUEUED.value, created_by, world_ids, turns],
        )


def _note(experiment: Experiment, change: str, detail: str, by: str) -> None:
    """A change after creation, for the results' ``history`` (what was decided after looking)."""
    entry = {"at": timezone.now().isoformat(), "change": change, "detail": detail, "by": by}
    experiment.history = [*experiment.history, entry]


def _now() -> datetime:
    return timezone.now()


def _locked(slug: str) -> Experiment:
    """The experiment, with its structural lock held until the caller's transaction ends: the
    changes that add worlds or metrics, and a cancel, one at a time. Its row is not locked (every
    turn reads it, a budget refusal writes it), only written once, at the end of the change."""
    require_slug(slug)
    found = Experiment.objects.filter(slug=slug).values_list("pk", flat=True).first()
    if found is None:
        raise NotFoundError(
            "experiment_not_found", f"slug: no experiment {slug!r}", {"field": "slug"}
        )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtext(%s))", [f"experiment-structure:{found}"]
        )
    return Experiment.objects.get(pk=found)  # read after the lock: the last change's design


def experiment_add_replicates(
    *, slug: str, count: Any, created_by: str = "", expect_replicates: int | None = None
) -> Experiment:
    """Add ``count`` replicates to every arm: their seeds continue the experiment's (replicate
    R+1, R+2…), their turns are queued and they are measured like the first.
    ``expect_replicates``: add only if the experiment still has that many (a stopping rule's
    step, taken once however many measure tasks see the look)."""
    count = whole_number(count, "count", 1, MAX_WORLDS, "invalid_count")
    with transaction.atomic(durable=True):
        experiment = _locked(slug)
        if (
            expect_replicates is not None
            and experiment.typed_design.replicates != expect_replicates
        ):
            return experiment
        if experiment.cancelled_at is not None:
            raise ConflictError(
                "experiment_cancelled",
                f"slug: experiment {slug!r} was cancelled",
                {"field": "slug"},
            )
        design = experiment.typed_design
        first, total = design.replicates + 1, design.replicates + count
        check_world_count(len(design.arms), total, "count")
        check_slug_length(slug, list(design.arm_labels), total, "count")
        experiment.design = design.with_replicates(total).to_json()
        _note(experiment, "replicates", f"{design.replicates} → {total} per arm", created_by)
        _make_worlds(experiment, range(first, total + 1), created_by)
        experiment.save(update_fields=["design", "history"])  # its row locked only from here
    return experiment


def experiment_add_metrics(*, slug: str, metrics: Any, created_by: str = "") -> Experiment:
    """Add metrics to the experiment and measure every turn its worlds committed (and every
    turn they commit from now on) with them: researchers think of measures after the run."""
    found = resolve_metric_refs(metrics, "metrics")
    with transaction.atomic(durable=True):
        experiment = _locked(slug)
        design = experiment.typed_design
        changed = design.with_metrics(m["hash"] for m in found)
        added = [m for m in found if m["hash"] in changed.metrics[len(design.metrics) :]]
        experiment.design = changed.to_json()
        if added:
            labels = ", ".join(f"{m['label']} ({m['hash'][:12]})" for m in added)
            _note(experiment, "metrics", f"added {labels}", created_by)
        experiment.save(update_fields=["design", "history"])
        measure_on_commit(
            list(World.objects.filter(experiment=experiment).values_list("pk", flat=True)),
            experiment.pk,
        )
    return experiment


def experiment_cancel(*, slug: str) -> Experiment:
    """Cancel what has not started: every queued attempt of the experiment's worlds (a running
    one ends as it would have), and its judge calls waiting in provider batches (a batch holding
    only its requests is cancelled at the provider; those judgings fail ``batch_cancelled``)."""
    with transaction.atomic(durable=True):
        experiment = _locked(slug)
        if experiment.cancelled_at is None:
            experiment.cancelled_at = timezone.now()
            experiment.save(update_fields=["cancelled_at"])
        cancel_queued(
            experiment.pk,
            f"cancelled: experiment {slug!r} was cancelled",
            experiment.cancelled_at,
        )
    # after the commit: it asks the provider over HTTP; the judgings that waited are measured
    # (failed ``batch_cancelled``) at once
    if batches.cancel_owner(experiment_owner(experiment.pk)):
        batch_answers_redrive(check_queue=False)
    return experiment

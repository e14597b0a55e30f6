"""Measuring a world (docs/measurement.md, "Measuring"): a request names metrics and is handed to
a worker on the measure queue; the worker writes one row per (world, turn, metric) that has none,
for every committed turn of the world's history (turn 0 included). Measuring never runs inside a
turn: it reads committed turns only, on workers of its own queue.
"""

from __future__ import annotations

import logging
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypedDict

from django.db import connection, transaction

from chukwa_core.errors import invalid
from chukwa_core.ids import is_hash, label_problem
from chukwa_core.metric_kinds import METRIC_KINDS, turn_scale
from chukwa_core.metric_types import scale_label
from chukwa_core.metric_values import SUBJECT_NOT_AGENT, Outcome
from scenarios_app.selectors import metric_rows
from worlds_app.history import first_turn, history_owners
from worlds_app.models import Measurement, PendingJudging, World
from worlds_app.selectors import world_row
from worlds_app.services.dispatch import send_measure
from worlds_app.services.metric_evaluators import evaluator
from worlds_app.turn_view import TurnView, turn_views

logger = logging.getLogger(__name__)

MAX_METRICS_PER_REQUEST = 50
# the first key of the measuring locks (the second is the world's id)
MEASURING_LOCK_SPACE = zlib.crc32(b"chukwa measuring") - 2**31


class MetricSummary(TypedDict):
    hash: str
    label: str
    kind: str


class MeasureRequestResult(TypedDict):
    world: str
    metrics: list[MetricSummary]
    first_turn: int
    current_turn: int


def resolve_metric_refs(refs: Any, field: str = "metrics") -> list[MetricSummary]:
    """``[{"hash": H} | {"label": L}, …]`` → the stored metrics, in order (a label names its
    newest version); 400 naming the first ref that names none."""
    if not isinstance(refs, list) or not refs:
        raise invalid("invalid_metrics", field, "must be a non-empty array of metric refs")
    if len(refs) > MAX_METRICS_PER_REQUEST:
        raise invalid("invalid_metrics", field, f"at most {MAX_METRICS_PER_REQUEST} metrics")
    hashes: list[str] = []
    labels: list[str] = []
    for index, ref in enumerate(refs):
        where = f"{field}[{index}]"
        if isinstance(ref, dict) and set(ref) == {"hash"} and is_hash(ref["hash"]):
            hashes.append(ref["hash"])
        elif (
            isinstance(ref, dict) and set(ref) == {"label"} and label_problem(ref["label"]) is None
        ):
            labels.append(ref["label"])
        else:
            raise invalid(
                "invalid_metric_ref",
                where,
                f'must be {{"hash": "<sha256>"}} or {{"label": "<label>"}}, got {ref!r}',
            )
    by_hash: dict[str, MetricSummary] = {}
    by_label: dict[str, MetricSummary] = {}
    for row in metric_rows(hashes=hashes, labels=labels):  # newest first
        summary: MetricSummary = {"hash": row["hash"], "label": row["label"], "kind": row["kind"]}
        by_hash[row["hash"]] = summary
        by_label.setdefault(row["label"], summary)
    found: list[MetricSummary] = []
    for index, ref in enumerate(refs):
        summary_or_none = by_hash.get(ref["hash"]) if "hash" in ref else by_label.get(ref["label"])
        if summary_or_none is None:
            what = f"hash {ref['hash']}" if "hash" in ref else f"label {ref['label']!r}"
            raise invalid(
                "unresolved_reference", f"{field}[{index}]", f"no stored metric has {what}"
            )
        if summary_or_none not in found:
            found.append(summary_or_none)
    return found


def _check_subjects(world: World, found: list[MetricSummary]) -> None:
    """A metric that asks about agents (a judge's ``subject``) asks about agents of this world
    (its entities are the same on every turn): 400 naming the metric otherwise."""
    subjects = {
        row["hash"]: METRIC_KINDS[row["kind"]].subjects(row["content"])
        for row in metric_rows(hashes=[m["hash"] for m in found])
    }
    if not any(subjects.values()):
        return
    entities = turn_views(world=world, numbers=[world.current_turn])[world.current_turn]["entities"]
    for index, metric in enumerate(found):
        for subject in subjects.get(metric["hash"], ()):
            _check_subject(world, metric, index, subject, entities)


def _check_subject(
    world: World, metric: MetricSummary, index: int, subject: str, entities: Mapping[str, Any]
) -> None:
    entity = entities.get(subject)
    kind = entity["kind"] if entity is not None else None
    if kind != "agent":
        what = "no entity" if kind is None else f"a {kind}, not an agent"
        raise invalid(
            SUBJECT_NOT_AGENT,
            f"metrics[{index}]",
            f"metric {metric['label']!r} interviews {subject!r}, which is {what} of world "
            f"{world.slug!r}",
        )


def measurement_request(*, slug: str, metrics: Any) -> MeasureRequestResult:
    """Check the world and the metrics, then hand the measuring to a worker (the measure queue).
    Nothing is written here; a broker that cannot take the message answers 503."""
    world = world_row(slug)
    found = resolve_metric_refs(metrics)
    _check_subjects(world, found)
    _dispatch(world_id=world.pk, metric_hashes=[m["hash"] for m in found])
    return {
        "world": world.slug,
        "metrics": found,
        "first_turn": first_turn(history_owners(world)),
        "current_turn": world.current_turn,
    }


def _dispatch(*, world_id: int, metric_hashes: list[str]) -> None:
    send_measure(world_id, metric_hashes)  # a broker that cannot take it: 503, nothing kept


class MeasureResult(TypedDict):
    world: str | None
    turns: int
    written: int


def subject_problem(metric: Mapping[str, Any], views: Mapping[int, TurnView]) -> Outcome | None:
    """Every agent a metric asks about (a judge's ``subject``) must be an agent of the world
    (which no turn changes)."""
    if not views:
        return None
    entities = next(iter(views.values()))["entities"]
    for subject in METRIC_KINDS[metric["kind"]].subjects(metric["content"]):
        entity = entities.get(subject)
        if entity is not None and entity["kind"] == "agent":
            continue
        what = "no entity" if entity is None else f"a {entity['kind']}, not an agent"
        return Outcome(
            error_code=SUBJECT_NOT_AGENT,
            error_message=f"subject: {subject!r} is {what} of this world",
        )
    return None


def world_measure(*, world_id: int, metric_hashes: list[str]) -> MeasureResult:
    """Write the missing measurements of every committed turn of a world for some metrics.
    Idempotent: a (world, turn, metric) that has its row is not measured again, and a judge is
    asked at most once for it whatever the number of measure tasks running at once: each
    world's turns are measured under that world's measuring lock (:func:`measuring_lock`),
    what is missing read once the lock is held. A branch's turns before its branch point are
    its parent's rows and are measured as the parent's, once for every branch sharing them (a
    branched experiment's shared turns are judged once, not once per world)."""
    world = World.objects.select_related("branch_parent").filter(pk=world_id).first()
    if world is None:  # deleted since the request
        return {"world": None, "turns": 0, "written": 0}
    segments = history_segments(world)
    metrics = metric_rows(hashes=metric_hashes)
    result: MeasureResult = {
        "world": world.slug,
        "turns": sum(len(numbers) for _, numbers in segments),
        "written": 0,
    }
    for owner, numbers in segments:
        with measuring_lock(owner.pk):
            result["written"] += _measure_own(owner, numbers, metrics)
    return result


def history_segments(world: World, end: int | None = None) -> list[tuple[World, range]]:
    """The world's committed history (before turn ``end``, if given) as (the world whose rows
    hold them, turn numbers), the world's own turns first: a branch's turns before its branch
    point are its parent's (and its parent's parent's). A deleted parent ends the chain."""
    segments: list[tuple[World, range]] = []
    current: World | None = world
    end = world.current_turn + 1 if end is None else end
    while current is not None:
        start = current.branched_from_turn or 0
        segments.append((current, range(start, end)))
        if current.branched_from_turn is None:
            break
        end = start
        parent = current.branch_parent
        current = (
            World.objects.select_related("branch_parent").filter(pk=parent.pk).first()
            if parent is not None
            else None
        )
    return segments


def unmeasured_before(world: World, end: int, metric_hashes: list[str]) -> dict[str, int]:
    """Per metric, how many of the world's committed turns before ``end`` have no measurement
    yet (a branched experiment's shared turns: what measuring its worlds will still ask)."""
    counts = dict.fromkeys(metric_hashes, 0)
    for owner, numbers in history_segments(world, end):
        done = Counter(
            metric_id
            for metric_id, _ in Measurement.objects.filter(
                world=owner, metric_id__in=metric_hashes, turn_number__in=list(numbers)
            )
            .order_by()
            .values_list("metric_id", "turn_number")
            .distinct()  # a survey's turn has a row per agent
        )
        for metric_hash in metric_hashes:
            counts[metric_hash] += len(numbers) - done[metric_hash]
    return counts


@contextmanager
def measuring_lock(world_id: int) -> Iterator[None]:
    """The world's measuring lock: a PostgreSQL session advisory lock (two-key form: the
    measuring space, the world's id), so measure tasks of one world, on any worker, measure
    one after the other and the later finds the earlier's rows. A worker that dies gives it
    back with its connection."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s, %s)", [MEASURING_LOCK_SPACE, world_id])
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [MEASURING_LOCK_SPACE, world_id])


def _measure_own(world: World, numbers: range, metrics: list[dict[str, Any]]) -> int:
    """Measure the turns ``numbers`` the world's own rows hold (its measuring lock held)."""
    done = set(
        Measurement.objects.filter(
            world=world,
            metric_id__in=[m["hash"] for m in metrics],
            turn_number__in=list(numbers),
        ).values_list("metric_id", "turn_number")
    )
    missing = {m["hash"]: [n for n in numbers if (m["hash"], n) not in done] for m in metrics}
    wanted = {n for turns in missing.values() for n in turns}
    if not wanted:
        return 0
    written = 0
    views = turn_views(world=world, numbers=wanted)
    for metric in metrics:
        turns = [n for n in missing[metric["hash"]] if n in views]
        if not turns:
            continue
        problem = subject_problem(metric, views)
        # each batch is written as soon as it is measured (a judge's: one turn), so a measuring
        # cut short (a worker killed) keeps what it measured and asks again only the rest
        batches: Iterable[Mapping[int, Outcome | tuple[Outcome, ...]]] = (
            [{n: problem for n in turns}]
            if problem is not None
            else evaluator(metric["kind"])(world=world, metric=metric, views=views, turns=turns)
        )
        for outcomes in batches:
            written += _write(world, metric, outcomes)
    return written


def _in_type(metric: Mapping[str, Any], outcome: Outcome) -> Outcome:
    """A value outside the metric's declared type (a count of -1, a binary 2) is recorded as
    the error ``metric_range``, never as a value the statistics would trust."""
    content = metric["content"]
    if outcome.value is None or "type" not in content:
        return outcome
    scale = turn_scale(content)
    try:
        scale.check(outcome.value)
    except ValueError as exc:
        return Outcome(
            error_code="metric_range",
            error_message=f"{exc} (declared type: {scale_label(scale)})",
            llm_call_id=outcome.llm_call_id,
            subject=outcome.subject,
        )
    return outcome


def _write(
    world: World, metric: Mapping[str, Any], outcomes: Mapping[int, Outcome | tuple[Outcome, ...]]
) -> int:
    """The rows of ``outcomes`` (a survey's turn: one per agent, each with its subject); one
    that exists already (a redelivered task) is left as it is. Answers the rows offered."""
    flat = [
        (n, _in_type(metric, outcome))
        for n, found in outcomes.items()
        for outcome in (found if isinstance(found, tuple) else (found,))
    ]
    if not flat:
        return 0
    with transaction.atomic(durable=True):
        Measurement.objects.bulk_create(
            [
                Measurement(
                    world=world,
                    turn_number=n,
                    metric_id=metric["hash"],
                    value=outcome.value,
                    error_code=outcome.error_code,
                    error_message=outcome.error_message,
                    llm_call_id=outcome.llm_call_id,
                    subject=outcome.subject,
                )
                for n, outcome in flat
            ],
            ignore_conflicts=True,
        )
        # a judging that waited on a provider batch is measured now
        PendingJudging.objects.filter(
            world=world, metric_id=metric["hash"], turn_number__in=[n for n, _ in flat]
        ).delete()
    return len(flat)

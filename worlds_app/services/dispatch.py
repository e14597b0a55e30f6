"""Handing queued turn attempts to workers: the kick after a commit and the periodic re-drive
("a queued attempt always runs").

The database is the queue of record; a broker message is only a wake-up call. A kick that
cannot be sent is logged, and the re-drive (run by the periodic reaper task) sends the next
attempt of every world left with queued attempts and nothing running, so a lost message delays
an attempt by at most one reaper period.

Fairness (docs/operations.md, "Fair queues"): attempts of an experiment's worlds go to their own
queue (``CHUKWA_EXPERIMENT_QUEUE``), interactive turns to the default one, and every turn worker
consumes both; and an experiment's worlds are dispatched only once *admitted*, at most
``CHUKWA_EXPERIMENT_WORLDS_IN_FLIGHT`` of one experiment at a time (:func:`experiment_admit`),
so a second experiment's worlds queue behind a bounded number of the first's.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerOperationalError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from cognition_app.rows import send_one
from scenarios_app.sql_rows import fetch_tuples
from worlds_app.models import ACTIVE_STATUSES, AttemptStatus, Experiment, TurnAttempt, World

logger = logging.getLogger(__name__)


RUN_TURN_ATTEMPT_TASK = "worlds.run_turn_attempt"
EXPORT_ATTEMPT_TRACE_TASK = "worlds.export_attempt_trace"
MEASURE_WORLD_TASK = "worlds.measure_world"  # = tasks.measure_world
RUN_INTERVIEW_TASK = "worlds.run_interview"  # = tasks.run_interview
WRITE_BIOGRAPHIES_TASK = "worlds.write_biographies"  # = tasks.write_biographies
# A new experiment's worlds are measured at their first turn by one message per this many
# worlds (10,000 worlds: 200 messages, not 10,000 sent in the creation's request).
MEASURE_WORLDS_PER_MESSAGE = 50


_WORLD = connection.ops.quote_name(World._meta.db_table)
_ATTEMPT = connection.ops.quote_name(TurnAttempt._meta.db_table)
_QUEUED = AttemptStatus.QUEUED.value
# A world and its first queued attempt (its head): one statement written once, not a queryset
# compiled at every kick.
_HEAD = f"""SELECT w.slug, w.experiment_id, w.admitted_at,
    (SELECT a.id FROM {_ATTEMPT} a WHERE a.world_id = w.id AND a.status = '{_QUEUED}'
     ORDER BY a.seq LIMIT 1)
FROM {_WORLD} w WHERE w.id = %s"""  # noqa: S608


def kick_on_commit(world_id: int) -> None:
    """After commit, hand the world's next queued attempt to a worker; for a world of an
    experiment that is not admitted yet, or has nothing queued any more (its slot is free),
    admit what the experiment may run now instead (:func:`experiment_admit`).

    The database, not the broker, is the queue of record: a kick that cannot be sent (broker
    down, database gone between commit and this read) is logged and left to the periodic
    re-drive (:func:`turn_attempt_redrive`), so it never fails the request or task that
    committed the rows."""

    def kick() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute(_HEAD, [world_id])
                world = cursor.fetchone()
            if world is None:
                return  # deleted since
            slug, experiment_id, admitted_at, attempt_id = world
            if attempt_id is None:
                if experiment_id is not None:  # a world done: its slot is free
                    experiment_admit(experiment_id=experiment_id)
                return
            if experiment_id is not None and admitted_at is None:
                experiment_admit(experiment_id=experiment_id)
                return
        except (OperationalError, InterfaceError) as exc:
            logger.warning(
                "world %s: next attempt not dispatched, database unavailable (%s); "
                "the periodic re-drive will send it",
                world_id,
                type(exc).__name__,
            )
            return
        _dispatch(attempt_id=str(attempt_id), world_slug=slug, experiment=experiment_id is not None)

    transaction.on_commit(kick)


def dispatch_on_commit(*, attempt_id: UUID, world_slug: str, experiment: bool) -> None:
    """After commit, send the task of an attempt the commit knows is its world's next (the
    commit read its id: no query after it, unlike :func:`kick_on_commit`); a send that fails
    is logged and left to the re-drive, as a kick's."""
    transaction.on_commit(
        lambda: _dispatch(attempt_id=str(attempt_id), world_slug=world_slug, experiment=experiment)
    )


# Errors that mean "the broker cannot take the message now": kombu wraps the transport's
# connection errors in its OperationalError once its publish retries are spent; redis-py's own
# are listed in case one escapes unwrapped.
BROKER_ERRORS: tuple[type[Exception], ...] = (
    BrokerOperationalError,
    RedisConnectionError,
    RedisTimeoutError,
)
# The queue check talks to Redis directly: any error of redis-py's too.
QUEUE_CHECK_ERRORS: tuple[type[Exception], ...] = (*BROKER_ERRORS, RedisError)


def attempt_queue(*, experiment: bool) -> str:
    """The queue of a world's attempts: the experiments queue for an experiment's world, the
    default (interactive) queue for any other. Read at send time so tests can route to their
    own worker."""
    return settings.CHUKWA_EXPERIMENT_QUEUE if experiment else settings.CELERY_TASK_DEFAULT_QUEUE


def _dispatch(*, attempt_id: str, world_slug: str, experiment: bool) -> bool:
    """Send the attempt's task; False (and a warning naming the world) if the broker is down."""
    # By name: the tasks module (an entry point above the services) is not imported here.
    from celery import current_app

    try:
        current_app.send_task(
            RUN_TURN_ATTEMPT_TASK, args=[attempt_id], queue=attempt_queue(experiment=experiment)
        )
    except BROKER_ERRORS as exc:
        # The message text names a host or socket, never the URL's credentials.
        logger.warning(
            "world %r: attempt %s not dispatched, broker unavailable (%s: %s); "
            "the periodic re-drive will send it",
            world_slug,
            attempt_id,
            type(exc).__name__,
            exc,
        )
        return False
    return True


def turn_messages_waiting() -> bool:
    """Whether any turn attempt's message waits in the interactive or the experiments queue.

    An experiment's attempt continues its batch in the same task (no broker trip) only while
    nothing waits: otherwise its world's next attempt goes to the back of the experiments
    queue, so the worker takes the waiting turn first. A broker that cannot answer counts as
    "something waits" (the next attempt is then kicked as usual).

    The queues' lists (one per message priority, named by the transport) are counted in one
    round trip on the thread's own connection to the broker's server
    (``cognition_app.sources.admission.leases.commands``), not through a pooled broker
    connection, whose acquiring costs more CPU than the count itself, at every commit of
    an experiment's turn."""
    from cognition_app.sources.admission.leases import commands

    try:
        keys = _queue_keys((settings.CELERY_TASK_DEFAULT_QUEUE, settings.CHUKWA_EXPERIMENT_QUEUE))
        return any(commands(*(("LLEN", key) for key in keys)))
    except QUEUE_CHECK_ERRORS:
        return True


_queue_keys_of: dict[tuple[str, ...], list[str]] = {}


def _queue_keys(queues: tuple[str, ...]) -> list[str]:
    """The Redis lists that hold the queues' messages, as the broker's transport names them
    (a list per priority step), asked of the transport once per process and set of queues."""
    keys = _queue_keys_of.get(queues)
    if keys is None:
        from celery import current_app

        with current_app.pool.acquire(block=True) as conn:
            channel: Any = conn.default_channel
            keys = [channel._q_for_pri(q, pri) for q in queues for pri in channel.priority_steps]
        _queue_keys_of[queues] = keys
    return keys


def export_on_commit(attempt_id: UUID) -> None:
    """After commit, ask the control queue to export the finished attempt's trace.

    Nothing at all happens while export is off. A message the broker cannot take is a trace
    lost, logged, never an error for the attempt that just ended."""
    if not settings.OTEL_EXPORTER_OTLP_ENDPOINT:
        return

    def send() -> None:
        from celery import current_app

        try:
            current_app.send_task(
                EXPORT_ATTEMPT_TRACE_TASK,
                args=[str(attempt_id)],
                queue=settings.CHUKWA_CONTROL_QUEUE,
            )
        except BROKER_ERRORS as exc:
            logger.warning(
                "attempt %s: trace not exported, broker unavailable (%s: %s)",
                attempt_id,
                type(exc).__name__,
                exc,
            )

    transaction.on_commit(send)


# The metrics' hashes in the design's order (none when its "metrics" is not a list).
_METRICS = f"""SELECT m.value FROM {connection.ops.quote_name(Experiment._meta.db_table)} e,
    jsonb_array_elements_text(CASE jsonb_typeof(e.design -> 'metrics') WHEN 'array'
        THEN e.design -> 'metrics' ELSE '[]'::jsonb END) WITH ORDINALITY AS m(value, n)
WHERE e.id = %s ORDER BY m.n"""  # noqa: S608


def send_measure(world_id: int | list[int], metric_hashes: list[str]) -> None:
    """Hand a world's measuring to the measure queue (read at send time, so tests can route to
    their own worker); a broker error propagates."""
    from celery import current_app

    current_app.send_task(
        MEASURE_WORLD_TASK, args=[world_id, metric_hashes], queue=settings.CHUKWA_MEASURE_QUEUE
    )


def experiment_metrics(experiment_id: int) -> list[str]:
    """The hashes of the experiment's metrics, read now (``POST …/metrics/`` adds to them):
    only they, not the whole design read back and parsed, in a statement written once, not a
    queryset compiled at every commit of an experiment's turn."""
    return [str(m) for (m,) in send_one((_METRICS, [experiment_id]))]


# A task running turns one after another (``attempts.turn_attempt_run``) sends the measure
# messages of its quick turns together: a turn that took less than this long to run has its
# world's measuring wait for the task's next commits, until the oldest waiting is this old or
# a slower turn commits or the task ends. Measuring a world measures everything it is missing,
# so one message stands for several of its turns.
MEASURE_DEFER_SECONDS = 1.0


@dataclass
class _DeferredMeasures:
    """The measuring a task's quick commits left to send: world ids by experiment, in order
    (a dict's keys: each once, in the order first left)."""

    worlds: dict[int, dict[int, None]] = field(default_factory=dict)
    since: float | None = None  # when the oldest was left

    def add(self, experiment_id: int, worlds: list[int]) -> None:
        self.worlds.setdefault(experiment_id, {}).update(dict.fromkeys(worlds))
        if self.since is None:
            self.since = time.monotonic()

    def due(self) -> bool:
        return self.since is not None and time.monotonic() - self.since >= MEASURE_DEFER_SECONDS

    def flush(self) -> None:
        worlds, self.worlds, self.since = self.worlds, {}, None
        for experiment_id, waiting in worlds.items():
            ids = list(waiting)
            try:
                _send_measures(ids, experiment_id)
            except (OperationalError, InterfaceError) as exc:  # re-driven once they are idle
                logger.warning(
                    "worlds %s: not measured now, database unavailable (%s)",
                    ids[:5],
                    type(exc).__name__,
                )


_DEFERRED: contextvars.ContextVar[_DeferredMeasures | None] = contextvars.ContextVar(
    "chukwa_deferred_measures", default=None
)


@contextmanager
def measures_deferred() -> Iterator[None]:
    """While this lasts, this thread's quick commits leave their measuring for later (see
    ``MEASURE_DEFER_SECONDS``); what is left is sent at the end, whatever ends it. A task killed
    before then loses nothing for good: the world's next commit measures what it is missing,
    and an idle world's missing measurements are re-driven (``measure_redrive``)."""
    holder = _DeferredMeasures()
    token = _DEFERRED.set(holder)
    try:
        yield
    finally:
        _DEFERRED.reset(token)
        holder.flush()


def measure_on_commit(
    world_ids: int | list[int], experiment_id: int, *, quick: bool = False
) -> None:
    """After commit, have the measure queue measure experiment worlds with the experiment's
    metrics (what is missing: the turn just committed, or the first turn of new worlds). A
    ``quick`` turn's measuring may wait for the task's next commits (``measures_deferred``). A
    message the broker cannot take is logged; the experiment's progress shows the measurements
    still missing, and ``POST /api/experiments/<slug>/metrics/`` or a measurement request
    measures them."""
    worlds = [world_ids] if isinstance(world_ids, int) else list(world_ids)
    holder = _DEFERRED.get()
    if holder is None:
        transaction.on_commit(lambda: _send_measures(worlds, experiment_id))
        return

    def later() -> None:
        holder.add(experiment_id, worlds)
        if not quick or holder.due():
            holder.flush()

    transaction.on_commit(later)


def _send_measures(worlds: list[int], experiment_id: int) -> None:
    metrics = experiment_metrics(experiment_id)
    if not metrics:
        return
    step = MEASURE_WORLDS_PER_MESSAGE
    for chunk in (worlds[i : i + step] for i in range(0, len(worlds), step)):
        try:
            send_measure(chunk[0] if len(chunk) == 1 else chunk, metrics)
        except BROKER_ERRORS as exc:
            logger.warning(
                "world %s: not measured now, broker unavailable (%s: %s)",
                chunk[0],
                type(exc).__name__,
                exc,
            )
            return


# --- admission of an experiment's worlds ----------------------------------------------------


def admit_on_commit(experiment_id: int) -> None:
    """After commit, admit and dispatch what the experiment may run now (its new worlds)."""

    def admit() -> None:
        try:
            experiment_admit(experiment_id=experiment_id)
        except (OperationalError, InterfaceError) as exc:
            logger.warning(
                "experiment %s: worlds not dispatched, database unavailable (%s); "
                "the periodic re-drive will send them",
                experiment_id,
                type(exc).__name__,
            )

    transaction.on_commit(admit)


# Worlds looked at this many at a time (lowest id first) for their attempts' statuses.
ADMIT_CHUNK = 1000

# in flight: queued or running; an active attempt besides (parked in a provider batch) holds no
# worker; a world with no active attempt at all is done
_IN_FLIGHT = [_QUEUED, AttemptStatus.RUNNING.value]
_PARKED = [s.value for s in ACTIVE_STATUSES if s.value not in _IN_FLIGHT]
# The admission in one round trip: worlds_app_experiment_admit (worlds_app migration 0030).
_ADMIT = "SELECT attempt_id, slug FROM worlds_app_experiment_admit(%s, %s, %s, %s, %s, %s, %s)"


@dataclass
class Handoff:
    """The first attempt of a world admitted while a task ends a world of the same experiment,
    kept for that task to run next (:func:`handing_off`) instead of sent through the broker."""

    attempt_id: str | None = None
    world_slug: str = ""

    def release(self) -> None:
        """The task cannot run it after all: send its message as admission would have."""
        if self.attempt_id is not None:
            _dispatch(attempt_id=self.attempt_id, world_slug=self.world_slug, experiment=True)
            self.attempt_id = None


_HANDOFF: contextvars.ContextVar[Handoff | None] = contextvars.ContextVar(
    "chukwa_handoff", default=None
)


@contextmanager
def handing_off() -> Iterator[Handoff]:
    """While this lasts, an admission made on this thread's commits (a world of an experiment
    done: its slot goes to the next world) keeps one admitted world's first attempt for the
    caller (a task that may go on running turns), unless a turn's message waits.

    Why: with as many worlds in flight as worker processes, the admitted world's message,
    sent while the task that freed the slot is still ending, was seen waiting by the other
    processes' commits, each of which then yielded its world's next turn to the queue
    (``turn_messages_waiting``), whose message the next commit saw waiting in turn: every turn
    went through the broker from then on, though no other work waited."""
    holder = Handoff()
    token = _HANDOFF.set(holder)
    try:
        yield holder
    finally:
        _HANDOFF.reset(token)


def experiment_admit(*, experiment_id: int) -> list[str]:
    """Admit the experiment's next worlds (lowest id first) while fewer than
    ``CHUKWA_EXPERIMENT_WORLDS_IN_FLIGHT`` of its admitted worlds have turns queued or running,
    then send the first queued attempt of each; the attempts sent. The worlds in flight are
    counted among those marked ``in_flight`` (marked when admitted, unmarked once found with
    nothing active), so a world's end costs the same at 10 worlds done as at 10,000.

    Admission commits before anything is sent: a message lost after it is re-sent by the
    re-drive (the world is admitted and idle), and admission lost before it (a worker killed
    between a world's last commit and this call) is done by the re-drive's next call. Two
    callers for one experiment (two worlds finishing at once) are serialized by a transaction
    advisory lock, so they never admit past the bound together. A world admitted once stays
    admitted: turns queued on it later run without waiting (the bound is then exceeded by
    those worlds only, which are not counted once their mark is cleared)."""
    limit = int(settings.CHUKWA_EXPERIMENT_WORLDS_IN_FLIGHT)
    now = timezone.now()
    heads = fetch_tuples(
        _ADMIT, [experiment_id, limit, now, ADMIT_CHUNK, _IN_FLIGHT, _PARKED, _QUEUED]
    )
    sent: list[str] = []
    holder = _HANDOFF.get()
    if holder is not None and holder.attempt_id is None and heads and not turn_messages_waiting():
        (attempt_id, slug), heads = heads[0], heads[1:]
        holder.attempt_id, holder.world_slug = str(attempt_id), slug
        sent.append(holder.attempt_id)  # the caller's task runs it next
    for attempt_id, slug in heads:
        if not _dispatch(attempt_id=str(attempt_id), world_slug=slug, experiment=True):
            break  # the broker is down: the re-drive sends the rest
        sent.append(str(attempt_id))
    return sent


# --- re-drive ------------------------------------------------------------------------------


def turn_attempt_redrive(*, limit: int | None = None) -> list[str]:
    """Re-send the task of every world's next attempt when the world has queued attempts and
    none running ("a queued attempt always runs"), skipping experiments' worlds not admitted
    yet; then admit, for every experiment with worlds waiting, what it may run now.

    A dispatch can be lost in many ways: a worker killed after taking the message, the
    database down during the claim, Redis restarted without its queue, an enqueue while the
    broker was down. Claiming is idempotent (a conditional UPDATE), so a message sent for an
    attempt whose first message is still on its way is harmless: the loser claims nothing.
    At most ``limit`` worlds per call (the longest-waiting first), so one period's work stays
    bounded; the rest are picked up by the next periods. Every queued attempt runs: a world
    not admitted waits only for admitted worlds of its experiment, and those are re-driven
    here until their turns are done; their slots then go to the next worlds, here at the
    latest."""
    limit = limit if limit is not None else int(getattr(settings, "CHUKWA_REDRIVE_LIMIT", 500))
    world_attempts = TurnAttempt.objects.filter(world_id=OuterRef("world_id"))
    heads = list(
        TurnAttempt.objects.filter(status=AttemptStatus.QUEUED)
        .exclude(world__experiment__isnull=False, world__admitted_at__isnull=True)
        .exclude(Exists(world_attempts.filter(status=AttemptStatus.RUNNING)))
        .exclude(
            Exists(
                world_attempts.filter(
                    status__in=(AttemptStatus.QUEUED, AttemptStatus.WAITING),
                    seq__lt=OuterRef("seq"),
                )
            )
        )
        .order_by("queued_at", "seq")
        .values_list("id", "world__slug", "world__experiment_id")[:limit]
    )
    sent: list[str] = []
    for attempt_id, world_slug, experiment_id in heads:
        if not _dispatch(
            attempt_id=str(attempt_id), world_slug=world_slug, experiment=experiment_id is not None
        ):
            return sent  # the broker is down: the next period tries again
        sent.append(str(attempt_id))
    # every experiment with worlds not admitted yet: its admission finds those with queued
    # turns (an EXISTS per world here was planned like the one _with_attempts replaces)
    waiting = (
        World.objects.filter(experiment__isnull=False, admitted_at__isnull=True)
        .order_by("experiment_id")
        .values_list("experiment_id", flat=True)
        .distinct()
    )
    for experiment_id in list(waiting):
        sent += experiment_admit(experiment_id=experiment_id)
    if sent:
        logger.info("re-drove %d queued attempt(s) of idle worlds", len(sent))
    return sent


# --- interviews and biographies runs (services.interview_runs, services.biography_runs) ---


def _send_measure_task(task: str, row_id: int) -> None:
    """Hand a leased row's task to the measure queue (where judges' calls run; read at send
    time, so tests route it to their worker); a broker error propagates."""
    from celery import current_app

    current_app.send_task(task, args=[row_id], queue=settings.CHUKWA_MEASURE_QUEUE)


def _send_measure_task_on_commit(task: str, row_id: int, what: str) -> None:
    """After commit, wake a worker; a broker that cannot take the message is logged and the
    row stays queued for the re-drive."""

    def send() -> None:
        try:
            _send_measure_task(task, row_id)
        except BROKER_ERRORS as exc:
            logger.warning(
                "%s %s: not sent now, broker unavailable (%s); the re-drive will send it",
                what,
                row_id,
                type(exc).__name__,
            )

    transaction.on_commit(send)


def interview_send(interview_id: int) -> None:
    _send_measure_task(RUN_INTERVIEW_TASK, interview_id)


def interview_send_on_commit(interview_id: int) -> None:
    _send_measure_task_on_commit(RUN_INTERVIEW_TASK, interview_id, "interview")


def biography_send(run_id: int) -> None:
    _send_measure_task(WRITE_BIOGRAPHIES_TASK, run_id)


def biography_send_on_commit(run_id: int) -> None:
    _send_measure_task_on_commit(WRITE_BIOGRAPHIES_TASK, run_id, "biographies run")

"""An experiment at scale (docs/experiments.md; docs/performance.md for the figures): a new
experiment's worlds are measured at their first turn by one message per
``MEASURE_WORLDS_PER_MESSAGE`` worlds, not one each, and a real measure worker measures every
one of them from those messages; a structural change (adding replicates, a cancel) holds the
experiment's structural lock, not its row, so the row stays free for the budget's refusal and
the turns that read it while worlds are being made."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

import psycopg
import pytest
from django.db import connection, transaction

from scenarios_app.services import metric_put
from tests.support.worker import (
    delete_queue,
    experiment_queue,
    measure_queue,
    routed_to,
    worker_process,
)
from tests.worlds_app.test_fair_queues import _design, _messages, _metric, rules_scenario
from worlds_app.models import Experiment, Measurement, Turn, TurnAttempt, World
from worlds_app.services import experiments as experiment_services
from worlds_app.services.dispatch import MEASURE_WORLDS_PER_MESSAGE, experiment_metrics
from worlds_app.services.experiments import (
    experiment_add_metrics,
    experiment_add_replicates,
    experiment_create,
)

pytestmark = pytest.mark.django_db(transaction=True)
__all__ = ["rules_scenario"]  # the fixture, shared with the fair-queues tests


def _wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_a_commit_reads_the_experiments_metrics_as_stored_then_as_added(
    rules_scenario: str,
) -> None:
    delete_queue("chukwa-metrics-read")
    try:
        with routed_to("chukwa-metrics-read"):  # its measure messages go nowhere read
            experiment = experiment_create(data=_design("metrics-read", rules_scenario, 1, 1))
            experiment_services.experiment_cancel(slug="metrics-read")
            stored = Experiment.objects.get(pk=experiment.pk).design["metrics"]
            assert experiment_metrics(experiment.pk) == stored
            assert len(stored) == 1
            added = metric_put(
                content={
                    "version": 1,
                    "label": "second",
                    "kind": "expression",
                    "aggregate": "mean",
                    "expression": "turn",
                }
            )["hash"]
            experiment_add_metrics(slug="metrics-read", metrics=[{"hash": added}])
            assert experiment_metrics(experiment.pk) == [*stored, added]
            assert (
                experiment_metrics(experiment.pk)
                == (Experiment.objects.get(pk=experiment.pk).design["metrics"])
            )
        assert experiment_metrics(experiment.pk + 1000) == []  # no such experiment
    finally:
        delete_queue(measure_queue("chukwa-metrics-read"))


@pytest.mark.integration
def test_a_new_experiments_baselines_go_in_few_messages_and_are_all_measured(
    rules_scenario: str, settings: object
) -> None:
    name = f"scale-{os.getpid()}-{time.monotonic_ns()}"
    replicates = 2 * MEASURE_WORLDS_PER_MESSAGE + 7  # three messages: 50, 50 and 7 worlds
    metric = _metric()
    design = _design("wide", rules_scenario, replicates, 1) | {"metrics": [{"hash": metric}]}
    delete_queue(measure_queue(name))
    try:
        with routed_to(name):
            experiment = experiment_create(data=design)
            experiment_services.experiment_cancel(slug="wide")  # no turn runs: baselines only
            assert _messages(measure_queue(name)) == 3
            env = {"CHUKWA_DB_NAME": str(connection.settings_dict["NAME"])}
            with worker_process(name, env=env, queue=name):
                _wait(
                    lambda: (
                        Measurement.objects.filter(world__experiment=experiment).count()
                        == replicates
                    ),
                    120,
                    "every world's baseline measured",
                )
        worlds = set(World.objects.filter(experiment=experiment).values_list("pk", flat=True))
        measured = Measurement.objects.filter(world__experiment=experiment, metric_id=metric)
        assert set(measured.values_list("world_id", flat=True)) == worlds
        assert set(measured.values_list("turn_number", "value")) == {(0, 0.0)}
    finally:
        for queue in (name, experiment_queue(name), measure_queue(name)):
            delete_queue(queue)


def test_adding_replicates_holds_the_structural_lock_not_the_experiments_row(
    rules_scenario: str,
) -> None:
    experiment_create(data=_design("grown", rules_scenario, 2, 1))
    experiment = Experiment.objects.get(slug="grown")
    inside = threading.Event()
    release = threading.Event()
    failures: list[BaseException] = []
    original = experiment_services._make_worlds

    def slow_make_worlds(*args: object, **kwargs: object) -> None:
        original(*args, **kwargs)  # type: ignore[arg-type]
        inside.set()
        release.wait(60)

    def grow() -> None:
        try:
            experiment_services._make_worlds = slow_make_worlds  # type: ignore[assignment]
            experiment_add_replicates(slug="grown", count=3)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=grow)
    thread.start()
    try:
        assert inside.wait(60), "the change never reached its worlds"
        settings = connection.settings_dict
        dsn = {
            "dbname": settings["NAME"],
            "user": settings["USER"],
            "host": settings["HOST"],
            "port": settings["PORT"],
        }
        with psycopg.connect(**{k: v for k, v in dsn.items() if v}, autocommit=False) as other:
            # the row: free (a budget refusal writes it at once) ...
            row = other.execute(
                "SELECT id FROM worlds_app_experiment WHERE id = %s FOR UPDATE NOWAIT",
                [experiment.pk],
            ).fetchone()
            assert row == (experiment.pk,)
            other.rollback()
            # ... the structural lock: held (a second change, a cancel, waits for it)
            taken = other.execute(
                "SELECT pg_try_advisory_xact_lock(hashtext(%s))",
                [f"experiment-structure:{experiment.pk}"],
            ).fetchone()
            assert taken == (False,)
            other.rollback()
    finally:
        release.set()
        thread.join(60)
        experiment_services._make_worlds = original
    assert failures == []
    assert World.objects.filter(experiment=experiment).count() == 5
    with transaction.atomic():
        assert Experiment.objects.get(pk=experiment.pk).typed_design.replicates == 5


def test_each_new_world_gets_its_turns_queued_as_one_batch_of_its_own(
    rules_scenario: str,
) -> None:
    experiment = experiment_create(data=_design("queued", rules_scenario, 4, 3))
    attempts = list(
        TurnAttempt.objects.filter(world__experiment=experiment).values(
            "world_id", "seq", "batch_id", "batch_index", "batch_size", "status", "requested_by"
        )
    )
    worlds = set(World.objects.filter(experiment=experiment).values_list("pk", flat=True))
    assert len(worlds) == 4 and len(attempts) == 12
    by_world: dict[int, list[dict[str, object]]] = {}
    for row in attempts:
        by_world.setdefault(int(row["world_id"]), []).append(row)  # type: ignore[call-overload]
    assert set(by_world) == worlds
    batches = set()
    for rows in by_world.values():
        rows.sort(key=lambda r: r["seq"])  # type: ignore[arg-type, return-value]
        assert [(r["seq"], r["batch_index"], r["batch_size"]) for r in rows] == [
            (1, 0, 3),
            (2, 1, 3),
            (3, 2, 3),
        ]
        assert {r["batch_id"] for r in rows} == {rows[0]["batch_id"]}
        batches.add(rows[0]["batch_id"])
        assert {(r["status"], r["requested_by"]) for r in rows} == {("queued", "")}
    assert len(batches) == 4  # a batch of its own per world
    assert {w.next_attempt_seq for w in World.objects.filter(experiment=experiment)} == {4}


def test_a_wide_experiments_worlds_hold_their_arms_snapshot_and_first_state_whole(
    rules_scenario: str,
) -> None:
    """The arm's snapshot and first state, sent once for 50 or more worlds, are in every world's
    rows as a narrow experiment (each row its own copy) writes them."""
    wide = experiment_services.SHARED_JSON_ROWS + 5
    experiment_create(data=_design("wide-json", rules_scenario, wide, 1))
    experiment_create(data=_design("narrow-json", rules_scenario, 2, 1))
    narrow = World.objects.filter(experiment__slug="narrow-json").first()
    assert narrow is not None
    first = Turn.objects.get(world=narrow, number=0)
    assert narrow.scenario_snapshot and first.state  # not the placeholder
    worlds = World.objects.filter(experiment__slug="wide-json")
    assert worlds.count() == wide * len(narrow.experiment.typed_design.arm_labels)  # type: ignore[union-attr]
    for world in worlds:
        assert world.scenario_snapshot == narrow.scenario_snapshot
        assert world.scenario_ref == narrow.scenario_ref
        turn = Turn.objects.get(world=world, number=0)
        assert (turn.state, turn.state_hash) == (first.state, first.state_hash)
        assert turn.created_at is not None and turn.attempt_id is None
    # the start is the creation's time, one for every world of the experiment
    starts = Turn.objects.filter(world__experiment__slug="wide-json", number=0)
    assert len(set(starts.values_list("simulation_time", flat=True))) == 1

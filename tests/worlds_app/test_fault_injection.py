"""The bounded fault-injection run (bench/fault_injection.py): real Celery workers killed with
kill -9 mid-generation, mid-tool-call and near commit, a Redis restart, two PostgreSQL restarts
(the second a crash just after a model request went out) and a worker stalled past its lease
while turns run, on a throwaway PostgreSQL + Redis; then every
invariant of tests/support/invariants.py must hold. The long run is the same script with 100+ kills."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]


@pytest.mark.fault
@pytest.mark.integration
def test_killed_workers_and_restarted_services_leave_a_consistent_history(tmp_path: Path) -> None:
    figures_path = tmp_path / "figures.json"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"CHUKWA_DB_NAME", "CHUKWA_TEST_DB_NAME", "CHUKWA_DATA_DIR"}
    }
    result = subprocess.run(
        [
            sys.executable,
            "bench/fault_injection.py",
            "--kills=3",
            "--redis-restarts=1",
            "--pg-restarts=2",
            "--stalls=1",
            "--worlds=1",
            # an experiment too (2 arms by 1 replicate, judged, with a budget): every committed
            # turn measured once, the ledger equal to its calls' rows, no slot or reservation
            # left (bench/fault_experiments.py's invariants, in ``violations``)
            "--experiment-replicates=1",
            "--phases=generation,tool,commit",
            "--seed=7",
            f"--json={figures_path}",
        ],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=420,
        check=False,
    )
    output = result.stdout[-4000:] + result.stderr[-4000:]
    assert result.returncode == 0, output
    figures = json.loads(figures_path.read_text())
    assert figures["violations"] == [], output
    assert figures["settled"] is True
    # a call needing Redis while it restarts waits for it (CHUKWA_REDIS_WAIT_SECONDS)
    assert not [why for why in figures["failures"] if "Redis" in why], output
    experiment = figures["experiment"]
    assert experiment["experiment worlds"] == 2, output
    assert experiment["measurements missing (lost measure messages)"] == 0, output
    assert experiment["judge asked again for a measured turn"] == 0, output
    assert experiment["of them, sent to the model again (not answered from the record)"] == 0, (
        output
    )
    # each kill landed where it was aimed: a stream in flight, a tool call in flight, a reply in
    assert figures["kills_by_moment"] == {"generation": 1, "tool": 1, "commit": 1}, output
    assert (figures["redis_restarts"], figures["pg_restarts"]) == (1, 2)
    # the second PostgreSQL restart is a crash (an immediate stop) just after a model request
    # went out: its rows were committed durably (the violations include every request that
    # reached the model with no invocation row)
    assert figures["pg_restarts_by_kind"] == {"fast": 1, "immediate": 1}, output
    assert figures["requests_sent"] >= 1, output
    # a worker stopped mid-generation past its lease, reaped, woken and killed: nothing it did
    # after waking is left running (the invariants), and the reaper did interrupt it meanwhile
    assert (figures["stalls"], figures["stalls_reaped"]) == (1, 1), output
    # a killed attempt was interrupted by the reaper, and the worlds went on committing turns
    assert figures["attempts"].get("interrupted", 0) >= 1, output
    assert figures["attempts"].get("committed", 0) >= 1, output
    assert figures["turns_committed"] == figures["attempts"]["committed"]
    # turns queued while Redis was down were accepted, their dispatch deferred, and they ran
    assert figures["enqueued_while_broker_down"] >= 1
    assert figures["dispatches_deferred"] >= 1, output

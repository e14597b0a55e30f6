"""The README demo: store the fixtures, run a park world for three turns through a real Celery
worker, on the embedded model (or on CHUKWA_LLM_BASE_URL when it is set), then answer a question
with an experiment (docs/experiments.md) through ``manage.py run_experiment``.

    python -m chukwa_site.demo [--turns 3] [--experiment picnic|park|visitors|none] [--batch]

``--batch`` (with ``--experiment park``) runs the park experiment in batch mode through the
embedded model's Batch API (chukwa_site/demo_batch.py) and prints what the batches did.

The experiment's slug carries the time it started (``picnic-caution-<HHMMSS>``), like the
world's, so running the demo again on the same data makes a new one beside the old; its seed is
fixed, so the new one draws the same dice as the old.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import time
from typing import Any

import django
from django.conf import settings

from chukwa_site import demo_batch, embedded, stack

PICNIC_QUESTION = (
    "Does a cautious forager change how often the crumb is eaten within 5 turns? In picnic_rules "
    "an ant that stands beside the crumb always eats it; in the cautious variant (a fork of it) "
    "it eats it only with probability 0.5 each time it could, and otherwise wanders off to the "
    "jam. 20 paired replicates per arm, on rule policies: no LLM, a few seconds."
)
PARK_QUESTION = (
    "Does making Bob thirsty at turn 1 (an operator's intervention) make him drink from the "
    "fountain within 2 turns? The park scenario on the LLM, 2 paired replicates per arm."
)
BATCH_NOTE = (
    "the walker's model is asked through the provider's Batch API (the embedded model's), "
    "every world parking until its tick's batch ends."
)
PARK_SLOW = (
    "the park experiment runs the LLM: 8 park turns (2 arms by 2 replicates by 2 turns) on the "
    "embedded model are slow on a laptop CPU, several minutes"
)
VISITORS_QUESTION = (
    "Does a shorter queue at the fountain keep very thirsty visitors in the park? "
    "park_visitors_rules draws 50 visitors over age, thirst and patience (a Sobol population); "
    "in its rules a very thirsty visitor who will not queue leaves the park; in the short-queue "
    "variant (a fork of it) that visitor leaves only with probability 0.5. 3 paired replicates "
    "per arm, 2 turns, on rule policies: no LLM, seconds."
)
# The experiments' seed: fixed, not derived from the slug (which changes every run), so every run
# of the demo draws the same dice and prints the same table.
SEED = 29
CAUTION = 0.5  # the cautious forager eats a crumb it stands beside with this probability


def _run(*args: str, env: dict[str, str], stdin: str | None = None) -> None:
    subprocess.run(
        [sys.executable, "manage.py", *args],
        check=True,
        cwd=embedded.PROJECT_DIR,
        env=env,
        input=None if stdin is None else stdin.encode(),
    )


def _picnic_design(slug: str) -> dict[str, Any]:
    """The cautious forager (a fork of picnic_rules whose forager eats the crumb with a
    probability) and the crumb_eaten metric, stored (again: both are content-addressed, so a
    second run stores nothing new), and the experiment comparing the two."""
    from scenarios_app.fixture_files import load_fixture
    from scenarios_app.services import metric_put, scenario_fork

    forager = copy.deepcopy(load_fixture("picnic_rules")["cognition_profiles"]["forager"])
    for rule in forager["inline"]["workflow"]["inline"]["nodes"][0]["rules"]:
        if rule["id"] == "eat_crumb":
            rule["probability"] = CAUTION
    cautious = scenario_fork(
        data={
            "primary_parent": {"name": "picnic_rules"},
            "changes": {"cognition_profile_upserts": {"forager": forager}},
            "name": "picnic_rules_cautious",
            "operator": "demo",
            "note": f"demo: the forager eats the crumb with probability {CAUTION}",
        }
    )["scenario_hash"]
    metric = metric_put(
        content={
            "version": 1,
            "label": "crumb_eaten",
            "kind": "expression",
            "aggregate": "any",
            "expression": "contains(entities.crumb.state, 'eaten')",
        }
    )["hash"]
    return {
        "slug": slug,
        "name": "A cautious forager and the crumb",
        "description": PICNIC_QUESTION,
        "arms": [
            {"label": "control", "scenario_ref": {"name": "picnic_rules"}},
            {"label": "cautious", "scenario_ref": {"hash": cautious}},
        ],
        "replicates": 20,
        "turns": 5,
        "metrics": [{"hash": metric}],
        "seed": SEED,
    }


def _park_design(slug: str, scenario_ref: dict[str, str] | None = None) -> dict[str, Any]:
    """The park (or ``scenario_ref``) with and without a thirsty Bob, and the bob_drank metric
    (stored again)."""
    from scenarios_app.services import metric_put

    metric = metric_put(
        content={
            "version": 1,
            "label": "bob_drank",
            "kind": "expression",
            "aggregate": "any",
            "expression": (
                "length(calls[?source=='use_drinking_fountain' && status=='succeeded']) > `0`"
            ),
        }
    )["hash"]
    thirst = {
        "turn": 1,
        "note": "Bob is parched",
        "patch": {
            "narration": "Bob has been running; his mouth is dry.",
            "effects": [
                {
                    "op": "set_entity_state",
                    "entity_id": "bob",
                    "state": "very thirsty after a run, standing beside the vending machine",
                }
            ],
        },
    }
    return {
        "slug": slug,
        "name": "A thirsty Bob",
        "description": PARK_QUESTION,
        "arms": [
            {"label": "control", "scenario_ref": scenario_ref or {"name": "park"}},
            {
                "label": "thirsty",
                "scenario_ref": scenario_ref or {"name": "park"},
                "interventions": [thirst],
            },
        ],
        "replicates": 2,
        "turns": 2,
        "metrics": [{"hash": metric}],
        "seed": SEED,
    }


def _visitors_design(slug: str) -> dict[str, Any]:
    """The short queue (a fork of park_visitors_rules whose very thirsty visitors give up with
    a probability) and the visitors_left metric (both stored again), and the experiment."""
    from scenarios_app.fixture_files import load_fixture
    from scenarios_app.services import metric_put, scenario_fork

    visitor = copy.deepcopy(load_fixture("park_visitors_rules")["cognition_profiles"]["visitor"])
    for rule in visitor["inline"]["workflow"]["inline"]["nodes"][0]["rules"]:
        if rule["id"] == "give_up":
            rule["probability"] = CAUTION
    short_queue = scenario_fork(
        data={
            "primary_parent": {"name": "park_visitors_rules"},
            "changes": {"cognition_profile_upserts": {"visitor": visitor}},
            "name": "park_visitors_short_queue",
            "operator": "demo",
            "note": f"demo: a very thirsty visitor gives up with probability {CAUTION}",
        }
    )["scenario_hash"]
    metric = metric_put(
        content={
            "version": 1,
            "label": "visitors_left",
            "kind": "expression",
            "aggregate": "last",
            "type": "count",
            "expression": "length(values(entities)[?contains(state, 'leaving')])",
        }
    )["hash"]
    return {
        "slug": slug,
        "name": "A shorter queue at the fountain",
        "description": VISITORS_QUESTION,
        "arms": [
            {"label": "control", "scenario_ref": {"name": "park_visitors_rules"}},
            {"label": "short_queue", "scenario_ref": {"hash": short_queue}},
        ],
        "replicates": 3,
        "turns": 2,
        "metrics": [{"hash": metric}],
        "seed": SEED,
    }


def _experiment(kind: str, env: dict[str, str], batch: bool = False) -> int:
    """Print the question, then run the experiment through ``manage.py run_experiment``, which
    prints the progress, the results table and the experiment's URL; in batch mode (the park
    only), then what the batches did."""
    stamp = time.strftime("%H%M%S")
    flags: list[str] = []
    if kind == "park" and batch:
        scenario = {"hash": demo_batch.park_batch_scenario()}
        question = f"{PARK_QUESTION} In batch mode: {BATCH_NOTE}"
        design = _park_design(f"park-thirst-batch-{stamp}", scenario)
        flags = ["--mode", "batch"]
        print(f"[chukwa] {PARK_SLOW}", flush=True)
    elif kind == "park":
        question, design = PARK_QUESTION, _park_design(f"park-thirst-{stamp}")
        print(f"[chukwa] {PARK_SLOW}", flush=True)
    elif kind == "visitors":
        question, design = VISITORS_QUESTION, _visitors_design(f"visitors-queue-{stamp}")
    else:
        question, design = PICNIC_QUESTION, _picnic_design(f"picnic-caution-{stamp}")
    print(f"\n== experiment {design['slug']} ==\n{question}\n", flush=True)
    started = time.monotonic()
    held = demo_batch.HeldWhilePending(design["slug"])
    if flags:
        held.start()
    try:
        _run(
            "run_experiment",
            "-",
            "--created-by",
            "demo",
            *flags,
            env=env,
            stdin=json.dumps(design),
        )
    except subprocess.CalledProcessError:
        print("\n[chukwa] the experiment did not complete (see above)", flush=True)
        return 1
    finally:
        if flags:
            held.stop()
    print(f"[chukwa] the experiment took {time.monotonic() - started:.0f} s", flush=True)
    if flags:
        print("\n== batch mode ==", flush=True)
        for line in demo_batch.summary(design["slug"], held):
            print(f"[chukwa] {line}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chukwa_site.demo", description=__doc__)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--scenario", default="park")
    parser.add_argument(
        "--experiment",
        choices=("picnic", "park", "visitors", "none"),
        default="picnic",
        help="the experiment after the world: picnic (rule policies, seconds), park (the LLM, "
        "minutes), visitors (50 drawn visitors on rule policies, seconds) or none",
    )
    parser.add_argument(
        "--batch",
        action="store_true",
        help="with --experiment park: run it in batch mode (lockstep ticks through the embedded "
        "model's Batch API) and print the ticks, the requests sent in batches, the worker-seconds "
        "held while batches were pending and the cost online against batch",
    )
    args = parser.parse_args(argv)
    if args.batch and args.experiment != "park":
        parser.error("--batch goes with --experiment park")
    if args.experiment == "park":
        print(f"[chukwa] {PARK_SLOW}", flush=True)

    for line in stack.services().values():
        print(f"[chukwa] {line}", flush=True)
    env = stack._env()
    if args.batch:  # the beat in the demo worker polls the batches this often
        env["CHUKWA_BATCH_POLL_SECONDS"] = os.environ.get(
            "CHUKWA_BATCH_POLL_SECONDS", demo_batch.DEMO_POLL_SECONDS
        )
    _run("migrate", "--noinput", "-v", "0", env=env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chukwa_site.settings")
    django.setup()  # the experiment's scenario and metric are stored from this process
    print("\n== demo operator ==", flush=True)
    _run("create_operator", "demo", env=env)
    print("\n== fixture scenarios, stored through the assembly service ==", flush=True)
    _run("load_demo_scenarios", "--operator", "demo", env=env)

    children: list[stack.Child] = []
    try:
        print("\n== sources and a Celery worker ==", flush=True)
        try:
            for line in stack.start_aux(env, children):
                print(f"[chukwa] {line}", flush=True)
        except stack.StackError as exc:
            print(f"[chukwa] error: {exc}", file=sys.stderr, flush=True)
            return 1
        hostname = f"demo-{os.getpid()}"
        # turns and measurements (experiments measure every turn as it commits)
        queues = [
            settings.CELERY_TASK_DEFAULT_QUEUE,
            settings.CHUKWA_EXPERIMENT_QUEUE,
            settings.CHUKWA_MEASURE_QUEUE,
        ]
        beat: list[str] = []
        if args.batch:  # the batch poll: a periodic task on the control queue, queued by beat
            queues.append(settings.CHUKWA_CONTROL_QUEUE)
            beat = ["--beat", "--schedule", str(embedded.data_dir() / "demo-celerybeat-schedule")]
        log = (embedded.data_dir() / "demo-worker.log").open("ab")
        children.append(
            stack.Child(
                "the demo worker",
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "celery",
                        "-A",
                        "chukwa_site",
                        "worker",
                        "--pool",
                        "solo",
                        "--queues",
                        ",".join(queues),
                        "--hostname",
                        f"{hostname}@%h",
                        "--loglevel",
                        "INFO",
                        *beat,
                    ],
                    cwd=embedded.PROJECT_DIR,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                ),
                log=log.name,
            )
        )
        from chukwa_site.celery import app

        deadline = time.monotonic() + 90
        while not any(
            n.startswith(hostname) for r in (app.control.ping(timeout=0.5) or []) for n in r
        ):
            if time.monotonic() > deadline:
                raise SystemExit(f"the demo worker did not start; see {log.name}")
        print(f"[chukwa] worker {hostname} is up (log: {log.name})", flush=True)

        slug = f"{args.scenario.replace('_', '-')}-{time.strftime('%H%M%S')}"
        print(
            f"\n== world {slug} from {args.scenario}: {args.turns} turns through the worker ==",
            flush=True,
        )
        _run("create_world", slug, "--scenario", args.scenario, env=env)
        try:
            _run("run_turns", slug, str(args.turns), "--timelines", env=env)
        except subprocess.CalledProcessError:
            print(f"\n[chukwa] some turns did not commit (see above; worker log: {log.name})")
            return 1
        print(
            f"\nWorld: {settings.CHUKWA_SITE_URL}/worlds/{slug}/ — start ./bin/stack and sign in "
            "as demo to browse it.",
            flush=True,
        )
        if args.experiment != "none":
            return _experiment(args.experiment, env, args.batch)
    finally:
        stack.stop_children(children)
    return 0


if __name__ == "__main__":
    sys.exit(main())

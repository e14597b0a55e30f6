"""The README demo: store the fixtures, then run a park world for three turns through a real
Celery worker, on the embedded model (or on CHUKWA_LLM_BASE_URL when it is set).

    python -m chukwa_site.demo [--turns 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from chukwa_site import embedded, stack


def _run(*args: str, env: dict[str, str]) -> None:
    subprocess.run(
        [sys.executable, "manage.py", *args], check=True, cwd=embedded.PROJECT_DIR, env=env
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chukwa_site.demo", description=__doc__)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--scenario", default="park")
    args = parser.parse_args(argv)

    for line in stack.services().values():
        print(f"[chukwa] {line}", flush=True)
    env = stack._env()
    _run("migrate", "--noinput", "-v", "0", env=env)
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
                        "--hostname",
                        f"{hostname}@%h",
                        "--loglevel",
                        "INFO",
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
            f"\nWorld: /worlds/{slug}/ — start ./bin/stack and sign in as demo to browse it.",
            flush=True,
        )
    finally:
        stack.stop_children(children)
    return 0


if __name__ == "__main__":
    sys.exit(main())

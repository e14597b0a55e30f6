"""Part 4 of ``bench/experiment_bench.py``: the same work in Concordia, run as a user would run it.

Run by the bench with a Python ≥ 3.12 that has gdm-concordia installed (a venv of its own: the
project runs on 3.11 and never imports this file):

    <python3.12> bench/concordia_column.py --base-url URL [--simulations 40] [--turns 5]

Each simulation is Concordia's generic prefab simulation (two ``basic__Entity`` agents and a
``generic__GameMaster``) on the ``Simultaneous`` engine; the simulations run one after another.
The prefab's game master lets one agent act per step (it asks the model whose turn is next;
its event resolution needs one active player, so the all-agents component does not fit it):
a simulation runs ``--turns`` x 2 steps, the same ten agent actions as Chukwa's five turns of
two agents. The language model is the bench's scripted OpenAI-compatible server (every answer
after its fixed delay), called once per ``sample_text`` and ``sample_choice``. Prints the game
master's log, then one JSON line: the wall time, the model calls, the simulations and steps.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
import urllib.request
import zlib
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np
from concordia.environment.engines import simultaneous
from concordia.language_model import language_model
from concordia.prefabs import entity as entity_prefabs
from concordia.prefabs import game_master as game_master_prefabs
from concordia.prefabs.simulation import generic
from concordia.typing import prefab as prefab_lib
from concordia.utils import helper_functions

AGENTS = ("Ant 0", "Ant 1")
NO_OPTION = re.compile(r"\((\w+)\) No\s*$", re.MULTILINE)


class ScriptedModel(language_model.LanguageModel):
    """Concordia's model interface over an OpenAI-compatible Chat Completions endpoint."""

    def __init__(self, base_url: str) -> None:
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._lock = threading.Lock()
        self.calls = 0

    def _complete(self, prompt: str, max_tokens: int) -> str:
        body = json.dumps(
            {
                "model": "gpt-4o-mini",
                "messages": [{"role": "user", "content": prompt}],
                "max_tokens": max_tokens,
            }
        ).encode()
        # the URL is the bench's own scripted server (http://127.0.0.1:<port>/v1)
        request = urllib.request.Request(  # noqa: S310
            self._url,
            data=body,
            headers={"Content-Type": "application/json", "Authorization": "Bearer bench-key"},
        )
        with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310
            reply = json.load(answer)
        with self._lock:
            self.calls += 1
        return str(reply["choices"][0]["message"]["content"])

    def sample_text(
        self,
        prompt: str,
        *,
        max_tokens: int = language_model.DEFAULT_MAX_TOKENS,
        terminators: Collection[str] = language_model.DEFAULT_TERMINATORS,
        temperature: float = language_model.DEFAULT_TEMPERATURE,
        top_p: float = language_model.DEFAULT_TOP_P,
        top_k: int = language_model.DEFAULT_TOP_K,
        timeout: float = language_model.DEFAULT_TIMEOUT_SECONDS,
        seed: int | None = None,
    ) -> str:
        return self._complete(prompt, max_tokens)

    def sample_choice(
        self, prompt: str, responses: Sequence[str], *, seed: int | None = None
    ) -> tuple[int, str, Mapping[str, Any]]:
        self._complete(prompt, 16)
        # The scripted answer names no option: "No" where it is one (the game master's "is the
        # simulation over?", asked as lettered options "(a) Yes" "(b) No" in a shuffled order),
        # so that every simulation runs all its steps; else the first option.
        index = 0
        found = NO_OPTION.findall(prompt)
        if found and found[-1] in responses:
            index = list(responses).index(found[-1])
        return index, responses[index], {}


def embedder(text: str) -> np.ndarray:
    """A stand-in sentence embedder (no model weights here): a seeded random vector."""
    return np.random.default_rng(zlib.crc32(text.encode())).random(16)


def config() -> prefab_lib.Config:
    prefabs = {
        **helper_functions.get_package_classes(entity_prefabs),
        **helper_functions.get_package_classes(game_master_prefabs),
    }
    instances = [
        prefab_lib.InstanceConfig(
            prefab="basic__Entity",
            role=prefab_lib.Role.ENTITY,
            params={"name": name, "goal": "find food."},
        )
        for name in AGENTS
    ]
    instances.append(
        prefab_lib.InstanceConfig(
            prefab="generic__GameMaster",
            role=prefab_lib.Role.GAME_MASTER,
            params={"name": "director"},
        )
    )
    return prefab_lib.Config(
        prefabs=prefabs,
        instances=instances,
        default_premise="Two ants at the centre of a small white plate under a lamp.",
        default_max_steps=5,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--simulations", type=int, default=40)
    parser.add_argument("--turns", type=int, default=5, help="actions of each agent")
    args = parser.parse_args()
    model = ScriptedModel(args.base_url)
    steps = args.turns * len(AGENTS)  # one agent acts per step
    started = time.perf_counter()
    for _ in range(args.simulations):
        simulation = generic.Simulation(
            config=config(), model=model, embedder=embedder, engine=simultaneous.Simultaneous()
        )
        simulation.play(max_steps=steps)
    wall = time.perf_counter() - started
    print(
        json.dumps(
            {"wall_s": wall, "calls": model.calls, "simulations": args.simulations, "steps": steps}
        )
    )


if __name__ == "__main__":
    main()

"""Seeds (docs/determinism.md): every random draw of a seeded world comes from its seed.

A world's seed is an integer in [0, 2⁵³): I-JSON's safe range, which every JSON client (a
JavaScript one included) reads exactly, so a seed shown or sent back is never rounded. From it, one function derives each number a turn
needs, by hashing the seed with where the number is used, so two worlds with the same seed draw
the same numbers in the same places and a change in one place moves nothing elsewhere:

- :func:`call_seed` — the ``seed`` sent to an LLM source whose ``params`` fix none, from
  (world seed, attempted turn, subject id, node id, generation number), in [0, 2³¹): the range
  every OpenAI-compatible backend accepts (llama.cpp, vLLM and OpenAI take 32-bit seeds);
- :func:`rule_seed` — the rule policy's random draws, from (world seed, attempted turn, subject
  id, node id), a 64-bit integer;
- :func:`agreement_seed` — the resampling of a metric's agreement with an annotation name.

Pure: no Django, no I/O.
"""

from __future__ import annotations

import hashlib
from typing import Any, Protocol

SEED_LIMIT = 2**53  # a world's seed is 0 ≤ seed < 2⁵³ (exact in every JSON client, never negative)
CALL_SEED_LIMIT = 2**31


def _digest(*parts: str) -> bytes:
    # \x1f (unit separator) cannot occur in ids, labels or decimal numbers: no two different
    # part lists give the same material.
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).digest()


def generation_number(tool_loop_round: int | None, generation_attempt: int | None) -> str:
    """Which generation of a node a call is: its tool-loop round and its try in the retry lane
    (``r<round>.g<try>``, 0 where the node has none)."""
    return f"r{tool_loop_round or 0}.g{generation_attempt or 0}"


def call_seed(
    world_seed: int, attempted_turn: int, subject_id: str, node_id: str, generation: str
) -> int:
    """The seed an LLM call of a seeded world sends, in [0, 2³¹)."""
    digest = _digest("llm", str(world_seed), str(attempted_turn), subject_id, node_id, generation)
    return int.from_bytes(digest[:8], "big") % CALL_SEED_LIMIT


def rule_seed(world_seed: int, attempted_turn: int, subject_id: str, node_id: str) -> int:
    """The seed of a rule policy's random draws in a seeded world (64 bits)."""
    digest = _digest("rule", str(world_seed), str(attempted_turn), subject_id, node_id)
    return int.from_bytes(digest[:8], "big")


def experiment_seed(slug: str) -> int:
    """An experiment's seed when its design names none: derived from its slug."""
    return int.from_bytes(_digest("experiment", slug)[:8], "big") % SEED_LIMIT


def replicate_seed(experiment_seed: int, replicate: int) -> int:
    """The seed of replicate ``replicate`` (1…R) of an experiment, the same in every arm: arms
    are paired, so what differs between two worlds of one replicate is the treatment, not the
    dice."""
    return int.from_bytes(_digest("replicate", str(experiment_seed), str(replicate))[:8], "big") % (
        SEED_LIMIT
    )


def agreement_seed(metric_hash: str, annotation: str) -> int:
    """The seed of a metric's agreement with an annotation name (its bootstrap over worlds and
    its Monte Carlo pairings): the same data always gives the same intervals."""
    return int.from_bytes(_digest("agreement", metric_hash, annotation)[:8], "big") % SEED_LIMIT


def seed_problem(value: object) -> str | None:
    """Why ``value`` is not a world seed, or None when it is one."""
    if isinstance(value, bool) or not isinstance(value, int):
        return f"must be an integer, got {type(value).__name__}"
    if not 0 <= value < SEED_LIMIT:
        return (
            f"must be 0 ≤ seed < 2^53 ({SEED_LIMIT}: larger integers are rounded by JSON "
            f"clients), got {value}"
        )
    return None


class CallPlace(Protocol):
    """Where an LLM call is made (a call context has these)."""

    world_seed: int | None
    attempted_turn: int
    subject_id: str
    node_id: str
    tool_loop_round: int | None
    generation_attempt: int | None


def seeded_params(params: dict[str, Any], place: CallPlace) -> dict[str, Any]:
    """An LLM call's sampling parameters with the world's derived seed added, unless the world
    has no seed or the source fixes one (the source's wins)."""
    if place.world_seed is None or "seed" in params:
        return params
    generation = generation_number(place.tool_loop_round, place.generation_attempt)
    seed = call_seed(
        place.world_seed, place.attempted_turn, place.subject_id, place.node_id, generation
    )
    return {**params, "seed": seed}

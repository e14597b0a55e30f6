"""How long an experiment takes: the one model the estimate's ``seconds`` and the live ETA share
(docs/experiments.md, "Time estimate"). Pure: no Django.

A world's turns run one after another (a turn starts from the state the one before committed),
and each turn's model calls are awaited one after another, so one world needs the sum of its
calls' latencies. Worlds run side by side up to the concurrency the limits allow; the model
serves at most that many calls at once. The wall time is then the longer of the longest world
and all the worlds' work shared over that many slots.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class TimeEstimate:
    """The expected wall time in whole seconds, and what it rests on; ``seconds`` None with
    the reason in ``basis`` when nothing is known."""

    seconds: int | None
    basis: str


def wall_seconds(world_seconds: Sequence[float], parallel: int) -> float:
    """The wall time of worlds needing ``world_seconds`` each (their turns in sequence), run
    ``parallel`` at a time: the longest world, or all their work over the slots, the longer."""
    if parallel < 1:
        raise ValueError(f"parallel must be at least 1, not {parallel}")
    if not world_seconds:
        return 0.0
    return max(max(world_seconds), sum(world_seconds) / parallel)


def seconds_text(seconds: float) -> str:
    """A latency as people read it: one decimal under a minute, else minutes and seconds."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    return f"{whole // 60} min {whole % 60:02d} s"


LONG_SECONDS = 600  # past this, the launch form warns before launching


def duration_text(seconds: int) -> str:
    """Whole seconds as people read a duration: ``47 s``, ``14 min 05 s``, ``2 h 03 min``."""
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"

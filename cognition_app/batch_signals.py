"""What the batch tick asks the layers above (docs/costs.md, "Batch mode"), which this layer
does not know: who is still gathering requests for a tick.

:data:`holds`: functions given the owners with pending requests, each answering the owners
whose requests wait for the next tick (the worlds layer: a batch-mode experiment with attempts
still running toward their next request — lockstep: every world's request of a tick joins that
tick's batch).
"""

from __future__ import annotations

from collections.abc import Callable

holds: list[Callable[[set[str]], set[str]]] = []


def held(owners: set[str]) -> set[str]:
    """The owners whose pending requests wait for the next tick."""
    found: set[str] = set()
    for hold in holds:
        found |= hold(owners)
    return found

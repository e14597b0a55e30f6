"""Re-hash stored turn snapshots (the worlds part of ``manage.py fsck``)."""

from __future__ import annotations

from collections.abc import Iterator

from chukwa_core.errors import ChukwaError
from chukwa_core.hashing import json_hash
from scenarios_app.integrity import CHUNK, Mismatch
from worlds_app.models import Turn


def turn_verify() -> Iterator[tuple[str, Mismatch | None]]:
    """("turn", mismatch or None) for every turn: its state must hash to its state_hash."""
    rows = Turn.objects.order_by("pk").values_list(
        "pk", "world__slug", "number", "state", "state_hash"
    )
    for _pk, slug, number, state, state_hash in rows.iterator(chunk_size=CHUNK):
        try:
            actual = json_hash(state)
        except ChukwaError as exc:
            actual = f"unhashable: {exc.message}"
        yield (
            "turn",
            (None if actual == state_hash else Mismatch("turn", f"{slug}#{number}", actual)),
        )

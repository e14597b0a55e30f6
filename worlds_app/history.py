"""Whose turn rows a world's history is made of: a branch's turns before its branch point are its
parent's (and its parent's parent's, for a branch of a branch)."""

from __future__ import annotations

from worlds_app.models import World

# (world id, first turn it holds), newest first
Owners = list[tuple[int, int]]


def history_owners(world: World) -> Owners:
    """The world's own rows from its first turn, and for a branch its parent's before that (and
    the parent's parent's, for a branch of a branch). A deleted parent ends the chain: those
    turns are gone. One query per parent."""
    owners: Owners = []
    current: World | None = world
    while current is not None:
        start = current.branched_from_turn or 0
        owners.append((current.pk, start))
        if current.branched_from_turn is None:
            break
        current = current.branch_parent
    return owners


def owner_of(owners: Owners, number: int) -> int | None:
    """The world whose row holds turn ``number`` of the history, if any does."""
    return next((world_id for world_id, start in owners if number >= start), None)


def first_turn(owners: Owners) -> int:
    """The first turn of a history: the oldest owner's, 0 unless a parent was deleted."""
    return owners[-1][1]

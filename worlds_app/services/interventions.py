"""Interventions (docs/worlds.md, "Interventions"): an operator's WorldPatch that joins a future
turn of a world as its first patch, applied by the kernel before any subject thinks.

An intervention is pending until the turn that applies it commits: the commit marks it consumed
in its own transaction (``turn_commit``), so a failed attempt leaves it pending for the next try
of that turn. Its shape is checked here, at the request; its targets (entity ids, environment
labels) only against the world of the turn it joins, when that turn runs."""

from __future__ import annotations

from typing import Any, TypedDict

from django.db import IntegrityError, transaction
from django.db.models import F

from chukwa_core.errors import ConflictError, NotFoundError
from worlds_app.models import AttemptStatus, Intervention, TurnAttempt, World
from worlds_app.selectors import require_slug
from worlds_app.services.world_inputs import intervention_fields


class InterventionInput(TypedDict, total=False):
    patch: dict[str, Any]
    note: str
    turn: int


def _world_locked(slug: str) -> World:
    require_slug(slug)
    world = World.objects.select_for_update().filter(slug=slug).first()
    if world is None:
        raise NotFoundError("world_not_found", f"slug: no world {slug!r}", {"field": "slug"})
    return world


def _started_turn(world: World) -> int | None:
    """The turn an attempt of the world is producing right now, if one runs."""
    return (
        TurnAttempt.objects.filter(world=world, status=AttemptStatus.RUNNING)
        .values_list("attempted_turn", flat=True)
        .first()
    )


def intervention_create(*, slug: str, data: InterventionInput, created_by: str) -> Intervention:
    """Add an intervention to turn ``turn`` (default: the next turn that has not started)."""
    found = intervention_fields(data)
    note, turn = found.note, found.turn
    with transaction.atomic(durable=True):
        world = _world_locked(slug)  # enqueues and claims lock it too: no turn starts meanwhile
        started = _started_turn(world)
        next_free = world.current_turn + 1
        if started is not None and started >= next_free:
            next_free = started + 1
        if turn is None:
            turn = next_free
        elif turn <= world.current_turn:
            raise ConflictError(
                "turn_past",
                f"turn: world {slug!r} is at turn {world.current_turn}; an intervention joins "
                f"a later turn (the next is {next_free})",
                {"field": "turn", "current_turn": world.current_turn},
            )
        elif turn == started:
            raise ConflictError(
                "turn_started",
                f"turn: turn {turn} of world {slug!r} is running; an intervention joins a turn "
                f"before it starts (the next is {next_free})",
                {"field": "turn", "current_turn": world.current_turn},
            )
        held = Intervention.objects.filter(world=world, turn=turn).first()
        if held is not None:
            raise ConflictError(
                "turn_taken",
                f"turn: intervention {held.pk} already holds turn {turn} of world {slug!r}",
                {"field": "turn", "intervention": held.pk},
            )
        try:
            with transaction.atomic():
                made = Intervention.objects.create(
                    world=world,
                    turn=turn,
                    patch=found.patch,
                    note=note,
                    created_by=created_by,
                )
        except IntegrityError:  # the unique constraint decides a race the lock cannot see
            raise ConflictError(
                "turn_taken",
                f"turn: an intervention already holds turn {turn} of world {slug!r}",
                {"field": "turn"},
            ) from None
        World.objects.filter(pk=world.pk).update(
            pending_interventions=F("pending_interventions") + 1
        )
        return made


def intervention_delete(*, slug: str, intervention_id: int) -> None:
    """Delete a pending intervention; a consumed one is the provenance of its turn (409)."""
    with transaction.atomic(durable=True):
        world = _world_locked(slug)
        found = Intervention.objects.filter(world=world, pk=intervention_id).first()
        if found is None:
            raise NotFoundError(
                "intervention_not_found",
                f"id: world {slug!r} has no intervention {intervention_id}",
                {"field": "id"},
            )
        if found.consumed:
            raise ConflictError(
                "intervention_consumed",
                f"id: intervention {intervention_id} was applied by turn {found.turn}; it is "
                "part of that turn's history and cannot be deleted",
                {"field": "id", "turn": found.turn},
            )
        if _started_turn(world) == found.turn:
            raise ConflictError(
                "turn_started",
                f"id: turn {found.turn}, which intervention {intervention_id} joins, is running",
                {"field": "id", "turn": found.turn},
            )
        found.delete()
        World.objects.filter(pk=world.pk).update(
            pending_interventions=F("pending_interventions") - 1
        )


def pending_for(*, world_id: int, turn: int) -> Intervention | None:
    """The intervention a turn attempt applies, if one holds that turn and is not consumed."""
    return Intervention.objects.filter(world_id=world_id, turn=turn, consumed_by=None).first()

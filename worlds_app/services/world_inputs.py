"""Rules of world input shared by every path that makes or changes worlds: a world's creation, an
operator's intervention, and an experiment's design (its arms' interventions, its branch). Each
rule lives here once; the services call it with the field path their request uses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chukwa_core.component_validation import check_keys, require_object
from chukwa_core.errors import invalid
from chukwa_core.patching import PatchRejected, check_patch_shape
from scenarios_app.services._store import reject_nul

MAX_NOTE_CHARS = 2000
INTERVENTION_REQUIRED = ("patch",)
INTERVENTION_OPTIONAL = ("note", "turn")


@dataclass(frozen=True)
class InterventionFields:
    patch: dict[str, Any]
    note: str
    turn: int | None


def whole_number(value: Any, field: str, low: int, high: int | None, code: str) -> int:
    """An integer in [low, high] (high None: no upper bound); booleans are not numbers."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < low
        or (high is not None and value > high)
    ):
        bounds = f"{low}…{high}" if high is not None else f"≥ {low}"
        raise invalid(code, field, f"must be an integer {bounds}, got {value!r}")
    return value


def no_start_time_on_branch(start_time: Any) -> None:
    """A branch starts at its parent's simulation time: it takes no start_time."""
    if start_time is not None:
        raise invalid(
            "invalid_start_time",
            "start_time",
            "a branch starts at its parent's simulation time; leave start_time out",
        )


def intervention_fields(
    value: Any,
    where: str = "",
    *,
    turn_required: bool = False,
    turns: range | None = None,
) -> InterventionFields:
    """An intervention's ``{"patch", "note"?, "turn"?}``: the patch's shape checked by the kernel
    (its targets are checked when the turn runs), a note ≤ 2,000 characters, a turn ≥ 1 (within
    ``turns`` when given). Errors name ``<where>.<field>``."""
    prefix = f"{where}." if where else ""
    body = require_object(
        value, where or "body", "invalid_interventions" if where else "invalid_input"
    )
    required = ("turn", *INTERVENTION_REQUIRED) if turn_required else INTERVENTION_REQUIRED
    optional = tuple(name for name in INTERVENTION_OPTIONAL if name not in required)
    check_keys(body, where, required=required, optional=optional, code="invalid_input")
    turn = body.get("turn")
    if turn is not None:
        if turns is not None:
            turn = whole_number(turn, f"{prefix}turn", turns.start, turns.stop - 1, "invalid_turn")
        else:
            turn = whole_number(turn, f"{prefix}turn", 1, None, "invalid_turn")
    try:
        check_patch_shape(body["patch"])
    except PatchRejected as exc:
        raise invalid("invalid_patch", f"{prefix}patch", exc.message, pointer=exc.pointer) from None
    note = short_text(body.get("note"), f"{prefix}note", MAX_NOTE_CHARS)
    return InterventionFields(body["patch"], note, turn)


def short_text(value: Any, field: str, limit: int) -> str:
    """An optional free text (absent or null: empty), at most ``limit`` characters."""
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > limit:
        raise invalid("invalid_input", field, f"must be a string ≤ {limit} chars")
    reject_nul(value, field)
    return value

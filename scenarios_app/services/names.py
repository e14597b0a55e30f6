"""Scenario names: pointers to scenarios, each move locked, optionally a
compare-and-set, always recorded in the history."""

from __future__ import annotations

from typing import Any, TypedDict

from django.db import connection, transaction

from chukwa_core.component_validation import require_label, type_name
from chukwa_core.errors import ConflictError, NotFoundError, invalid
from chukwa_core.ids import is_hash
from scenarios_app.models import Scenario, ScenarioName, ScenarioNameHistory
from scenarios_app.services._store import reject_nul


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


class NameResult(TypedDict):
    name: str
    hash: str | None
    previous_hash: str | None


def _lock_name(name: str) -> None:
    # Serialize writers of one name, including the first set, when no row exists to lock yet.
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ["scenario_name:" + name])


def _check_cas(name: str, current: str | None, expected: Any) -> None:
    if expected is UNSET:
        return
    if expected is not None and not is_hash(expected):
        raise invalid(
            "invalid_hash", "expected_current_hash", f"{expected!r} is not a lowercase sha256 hex"
        )
    if expected != current:
        raise ConflictError(
            "cas_failed",
            f"expected_current_hash: name {name!r} points to {current or 'nothing'}, "
            f"not {expected or 'nothing'}",
            {
                "field": "expected_current_hash",
                "name": name,
                "expected": expected,
                "current": current,
            },
        )


def name_set_within(
    *, name: str, scenario_hash: str, expected_current_hash: Any, note: str, operator: str
) -> NameResult:
    """Point ``name`` at a stored scenario inside the caller's transaction (the arguments already
    checked): ``scenario_name_set``, or an assembly or fork that names its result."""
    _lock_name(name)
    current = ScenarioName.objects.filter(pk=name).values_list("scenario_id", flat=True).first()
    _check_cas(name, current, expected_current_hash)
    if current != scenario_hash:
        ScenarioName.objects.update_or_create(name=name, defaults={"scenario_id": scenario_hash})
        ScenarioNameHistory.objects.create(
            name=name, old_hash=current, new_scenario_id=scenario_hash, note=note, operator=operator
        )
    return {"name": name, "hash": scenario_hash, "previous_hash": current}


def _validate_name_args(name: Any, note: Any, operator: Any) -> None:
    require_label(name, "name", "invalid_name")
    for key, value in (("note", note), ("operator", operator)):
        if not isinstance(value, str):
            raise invalid("invalid_input", key, f"must be a string, got {type_name(value)}")
        reject_nul(value, key)


def scenario_name_set(
    *,
    name: str,
    scenario_hash: str,
    expected_current_hash: Any = UNSET,
    note: str = "",
    operator: str = "",
) -> NameResult:
    """Point ``name`` at a scenario. ``expected_current_hash`` (a hash, or None for "unset")
    makes it a compare-and-set; a mismatch is ``409 cas_failed``."""
    _validate_name_args(name, note, operator)
    if not is_hash(scenario_hash):
        raise invalid("invalid_hash", "hash", f"{scenario_hash!r} is not a lowercase sha256 hex")
    with transaction.atomic(durable=True):
        if not Scenario.objects.filter(pk=scenario_hash).exists():
            raise NotFoundError(
                "scenario_not_found",
                f"hash: no stored scenario has hash {scenario_hash}",
                {"field": "hash", "hash": scenario_hash},
            )
        return name_set_within(
            name=name,
            scenario_hash=scenario_hash,
            expected_current_hash=expected_current_hash,
            note=note,
            operator=operator,
        )


def scenario_name_unset(
    *, name: str, expected_current_hash: Any = UNSET, note: str = "", operator: str = ""
) -> NameResult:
    """Remove the pointer, leaving a tombstone in the history."""
    _validate_name_args(name, note, operator)
    with transaction.atomic(durable=True):
        _lock_name(name)
        current = ScenarioName.objects.filter(pk=name).values_list("scenario_id", flat=True).first()
        if current is None and expected_current_hash is UNSET:
            raise NotFoundError(
                "name_not_found",
                f"name: no scenario is named {name!r}",
                {"field": "name", "name": name},
            )
        _check_cas(name, current, expected_current_hash)
        if current is None:
            raise NotFoundError(
                "name_not_found",
                f"name: no scenario is named {name!r}",
                {"field": "name", "name": name},
            )
        ScenarioName.objects.filter(pk=name).delete()
        ScenarioNameHistory.objects.create(
            name=name, old_hash=current, new_scenario=None, note=note, operator=operator
        )
    return {"name": name, "hash": None, "previous_hash": current}

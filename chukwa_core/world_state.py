"""The in-memory world state a turn attempt works on. Pure: no Django."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from chukwa_core.hashing import json_hash


@dataclass
class WorldState:
    """Environments (label → text, label order) and entities (scenario order, by id).

    No WorldPatch op moves an entity, adds or removes one, or changes its kind, so which
    entities share an environment never changes (the index by environment is built once, on
    first use), and neither does whether a patch is valid for the world."""

    environments: dict[str, str]
    entities: dict[str, dict[str, Any]] = field(default_factory=dict)
    _by_environment: dict[str, list[dict[str, Any]]] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    # The patches ``patching.validate_patch`` accepted for this world, by id (each held, so its
    # id stays its own): a patch the judge of an LLM node accepted is not validated again when
    # it is applied (``patching``).
    accepted_patches: dict[int, Any] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @classmethod
    def from_snapshot(cls, state: dict[str, Any]) -> WorldState:
        return cls(
            environments=dict(state["environments"]),
            entities={e["id"]: copy_entity(e) for e in state["entities"]},
        )

    @classmethod
    def from_scenario(cls, scenario: dict[str, Any]) -> WorldState:
        return cls(
            environments=dict(sorted(scenario["environments"].items())),
            entities={e["id"]: copy_entity(e) for e in scenario["entities"]},
        )

    def to_snapshot(self, *, share: bool = False) -> dict[str, Any]:
        """The state as stored in a turn. ``share``: the entity dicts themselves, not copies,
        for a caller that is done with this working world (the commit)."""
        entities = self.entities.values()
        return {
            "environments": dict(self.environments),
            "entities": list(entities) if share else [copy_entity(e) for e in entities],
        }

    def snapshot_hash(self) -> str:
        return json_hash(self.to_snapshot(share=True))

    def copy(self) -> WorldState:
        return WorldState(
            environments=dict(self.environments),
            entities={k: copy_entity(v) for k, v in self.entities.items()},
        )

    def agents(self) -> list[dict[str, Any]]:
        """Agents in id order: the order subjects run in."""
        return sorted((e for e in self.entities.values() if is_agent(e)), key=lambda e: e["id"])

    def in_environment(self, label: str) -> list[dict[str, Any]]:
        """The entities in an environment, in scenario order (from the index)."""
        if self._by_environment is None:
            index: dict[str, list[dict[str, Any]]] = {}
            for entity in self.entities.values():
                index.setdefault(entity["environment"], []).append(entity)
            self._by_environment = index
        return self._by_environment.get(label, [])

    def co_located(self, subject_id: str) -> list[dict[str, Any]]:
        subject = self.entities[subject_id]
        return [e for e in self.in_environment(subject["environment"]) if e["id"] != subject_id]


def copy_entity(entity: dict[str, Any]) -> dict[str, Any]:
    """A copy of an entity that a WorldPatch can change without touching the original: its own
    dict, ``kind`` and ``kind.agent`` (what ``apply_patch`` writes: ``state`` and
    ``kind.agent.memory``); every other value is a string or shared unchanged. A deep copy of
    every entity was a large share of a big world's turn."""
    copied = dict(entity)
    kind = copied.get("kind")
    if isinstance(kind, dict):
        copied["kind"] = {
            name: dict(value) if isinstance(value, dict) else copy.deepcopy(value)
            for name, value in kind.items()
        }
    return copied


def is_agent(entity: dict[str, Any]) -> bool:
    return isinstance(entity.get("kind"), dict) and "agent" in entity["kind"]


def memory_of(entity: dict[str, Any]) -> str:
    return entity["kind"]["agent"]["memory"] if is_agent(entity) else ""

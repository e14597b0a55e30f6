"""The in-memory world state a turn attempt works on. Pure: no Django."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from chukwa_core.hashing import json_hash


@dataclass
class WorldState:
    """Environments (label → text, label order) and entities (scenario order, by id)."""

    environments: dict[str, str]
    entities: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def from_snapshot(cls, state: dict[str, Any]) -> WorldState:
        return cls(
            environments=dict(state["environments"]),
            entities={e["id"]: copy.deepcopy(e) for e in state["entities"]},
        )

    @classmethod
    def from_scenario(cls, scenario: dict[str, Any]) -> WorldState:
        return cls(
            environments=dict(sorted(scenario["environments"].items())),
            entities={e["id"]: copy.deepcopy(e) for e in scenario["entities"]},
        )

    def to_snapshot(self) -> dict[str, Any]:
        return {
            "environments": dict(self.environments),
            "entities": [copy.deepcopy(e) for e in self.entities.values()],
        }

    def snapshot_hash(self) -> str:
        return json_hash(self.to_snapshot())

    def copy(self) -> WorldState:
        return WorldState(
            environments=dict(self.environments),
            entities={k: copy.deepcopy(v) for k, v in self.entities.items()},
        )

    def agents(self) -> list[dict[str, Any]]:
        """Agents in id order: the order subjects run in (SPEC §6)."""
        return sorted((e for e in self.entities.values() if is_agent(e)), key=lambda e: e["id"])

    def co_located(self, subject_id: str) -> list[dict[str, Any]]:
        subject = self.entities[subject_id]
        return [
            e
            for e in self.entities.values()
            if e["environment"] == subject["environment"] and e["id"] != subject_id
        ]


def is_agent(entity: dict[str, Any]) -> bool:
    return isinstance(entity.get("kind"), dict) and "agent" in entity["kind"]


def memory_of(entity: dict[str, Any]) -> str:
    return entity["kind"]["agent"]["memory"] if is_agent(entity) else ""

"""The fixture scenarios shipped as data files. Tests and the demo read them;
production never loads them implicitly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIXTURE_DIR = Path(__file__).resolve().parent / "scenario_fixtures"


def fixture_names() -> list[str]:
    return sorted(p.stem for p in FIXTURE_DIR.glob("*.json"))


def load_fixture(name: str) -> dict[str, Any]:
    """The assembly input stored in ``scenario_fixtures/<name>.json`` (an API request body)."""
    path = FIXTURE_DIR / f"{name}.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"no fixture scenario {name!r}; available: {', '.join(fixture_names())}"
        )
    return json.loads(path.read_text(encoding="utf-8"))

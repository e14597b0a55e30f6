"""The official MCP Inspector CLI, pinned, with the Node it needs, installed from npm by the
tests themselves (nothing installed by hand counts).

The Inspector 2.x needs Node >= 22.19; the npm package ``node`` provides it, so the only thing
the machine must have is ``npm`` (any version) and the registry. The install is kept in the
user's cache folder, keyed by the pins, so later runs reuse it. When npm is missing or the
registry cannot be reached, :func:`inspector` skips the calling test and says why (the portable
schema check in ``tests/support/schema_portability.py`` runs regardless).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

INSPECTOR_VERSION = "2.12.0"
NODE_VERSION = "22.23.3"


@dataclass(frozen=True)
class Inspector:
    node: Path
    cli: Path
    home: Path  # HOME for its runs: its catalog file lands here, not in the user's home

    def run(
        self, *args: str, timeout: float = 180, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        environ = {
            "PATH": f"{self.node.parent}:{os.environ.get('PATH', '')}",
            "HOME": str(self.home),
            "MCP_CATALOG_PATH": str(self.home / "mcp.json"),
            **(env or {}),
        }
        return subprocess.run(
            [str(self.node), str(self.cli), "--cli", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=environ,
            stdin=subprocess.DEVNULL,
        )


def _cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "chukwa" / f"mcp-inspector-{INSPECTOR_VERSION}-node-{NODE_VERSION}"


def _skip(reason: str) -> None:
    # Printed as well as reported, so that a plain run's log says why the check did not run.
    print(f"[chukwa] MCP Inspector test skipped: {reason}", file=sys.stderr)
    pytest.skip(reason)


def inspector() -> Inspector:
    """The pinned Inspector, installed on first use (skips the test when it cannot be)."""
    folder = _cache_dir()
    node = folder / "node_modules" / "node" / "bin" / "node"
    package = folder / "node_modules" / "@modelcontextprotocol" / "inspector"
    if not (node.exists() and (package / "package.json").exists()):
        npm = shutil.which("npm")
        if npm is None:
            _skip("npm is not installed (the Inspector and its Node come from the npm registry)")
        staging = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        (staging / "package.json").write_text(json.dumps({"private": True}))
        done = subprocess.run(
            [
                str(npm),
                "install",
                "--no-audit",
                "--no-fund",
                "--save-exact",
                "--engine-strict=false",
                f"node@{NODE_VERSION}",
                f"@modelcontextprotocol/inspector@{INSPECTOR_VERSION}",
            ],
            cwd=staging,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            unreachable = any(
                word in done.stderr
                for word in ("ENOTFOUND", "ECONNREFUSED", "ETIMEDOUT", "EAI_AGAIN", "network")
            )
            if unreachable:
                _skip(f"the npm registry is unreachable: {tail}")
            raise AssertionError(f"npm could not install the Inspector: {done.stderr[-2000:]}")
        shutil.rmtree(folder, ignore_errors=True)
        staging.rename(folder)
    manifest = json.loads((package / "package.json").read_text())
    assert manifest["version"] == INSPECTOR_VERSION
    bins = manifest.get("bin", {})
    entry = bins.get("mcp-inspector") if isinstance(bins, dict) else bins
    assert isinstance(entry, str), f"the Inspector names no CLI entry point: {bins!r}"
    home = folder / "home"
    home.mkdir(exist_ok=True)
    return Inspector(node=node, cli=package / entry, home=home)

"""The house (STYLE.md, docs/architecture.md): one straight line of dependencies and no import
cycles, counting imports inside functions. Reads the source; imports nothing it checks."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]
# Lowest first: a package may import itself and the packages before it, never one after it.
# The development servers (devservices) come first: they import no other package of Chukwa;
# which packages may import them is a rule of its own (below).
LAYERS = [
    "devservices",
    "chukwa_core",
    "scenarios_app",
    "cognition_app",
    "worlds_app",
    "surfaces",
    "chukwa_site",
]
DOMAIN = ["chukwa_core", "scenarios_app", "cognition_app", "worlds_app", "surfaces"]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PROJECT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for layer in LAYERS:
        for path in sorted((PROJECT / layer).rglob("*.py")):
            found[_module_name(path)] = path
    return found


def _imports(name: str, path: Path, known: set[str]) -> Iterator[tuple[str, int]]:
    """Project modules imported anywhere in the file (functions included), with line numbers."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        for target in targets:
            # the longest known module the target names (``from a import b`` may name a module)
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target, node.lineno


def _graph() -> dict[str, dict[str, int]]:
    modules = _modules()
    known = set(modules)
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        edges: dict[str, int] = {}
        for target, line in _imports(name, path, known):
            edges.setdefault(target, line)
        graph[name] = edges
    return graph


def test_each_layer_imports_only_the_layers_below_it() -> None:
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    upward = [
        f"{name} (line {line}) imports {target}"
        for name, edges in _graph().items()
        for target, line in edges.items()
        if rank[target.split(".")[0]] > rank[name.split(".")[0]]
    ]
    assert upward == [], "\n".join(upward)


def test_the_core_imports_no_django() -> None:
    modules = _modules()
    offenders = []
    for name, path in modules.items():
        if not name.startswith("chukwa_core"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            offenders += [
                f"{name} imports {n}"
                for n in names
                if n.split(".")[0] in {"django", "rest_framework", "celery", "drf_spectacular"}
            ]
    assert offenders == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_package_import_cycles() -> None:
    """Between the top-level packages (apps), which the layer order above also implies; within
    them, module cycles are caught below."""
    packages: dict[str, set[str]] = {}
    for name, edges in _graph().items():
        source = name.split(".")[0]
        packages.setdefault(source, set())
        packages[source].update(t.split(".")[0] for t in edges if t.split(".")[0] != source)
    assert _cycles(packages) == []


def test_no_module_import_cycles() -> None:
    graph = {name: set(edges) for name, edges in _graph().items()}
    assert _cycles(graph) == []


def test_the_checker_sees_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


MAX_MODULE_LINES = 600  # STYLE.md: past ~600 lines a module becomes a package split by entity


def test_every_module_stays_within_the_size_rule() -> None:
    too_long = {}
    for name, path in _modules().items():
        if ".migrations." in f".{name}.":
            continue
        lines = sum(1 for line in path.read_text().splitlines() if line.strip())
        if lines > MAX_MODULE_LINES:
            too_long[name] = lines
    assert too_long == {}


def test_the_repository_stands_alone() -> None:
    """A user's clone has no specification beside it: no file cites its sections or points at
    files outside the repository (the docs say what a user needs, in their own words)."""
    root = Path(__file__).resolve().parents[2]
    section = "SPEC " + "\u00a7"
    outside = "../" + "shared"
    skip = {".git", ".venv", "var", "node_modules", "staticfiles", "test-artifacts", ".mypy_cache"}
    suffixes = {".py", ".md", ".html", ".js", ".css", ".json", ".txt", ".toml", ".yml", ".cfg"}
    found = []
    for path in root.rglob("*"):
        if any(part in skip for part in path.relative_to(root).parts):
            continue
        if path.is_file() and (path.suffix in suffixes or path.parent.name in ("bin", ".ci")):
            text = path.read_text(encoding="utf-8", errors="replace")
            if section in text or outside in text:
                found.append(str(path.relative_to(root)))
    assert found == []


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node but those under ``if TYPE_CHECKING:`` (imports for annotations only)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name):
            if node.test.id == "TYPE_CHECKING":
                continue
        yield node
        yield from _runtime_nodes(node)


def test_pages_read_through_selectors_and_call_services() -> None:
    """No module under surfaces/pages imports a models module or queries the ORM itself: what a
    page shows comes from a selector, what it changes goes through a service."""
    found = []
    for path in sorted((PROJECT / "surfaces" / "pages").rglob("*.py")):
        for node in _runtime_nodes(ast.parse(path.read_text(), str(path))):
            modules: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module]
            elif isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            for module in modules:
                if module.endswith(".models") or module.startswith("django.db.models"):
                    found.append(f"{path.relative_to(PROJECT)}:{node.lineno} imports {module}")
            if isinstance(node, ast.Attribute) and node.attr == "objects":
                found.append(f"{path.relative_to(PROJECT)}:{node.lineno} queries .objects")
    assert found == []


def test_development_servers_live_outside_the_domain_apps() -> None:
    """The toy sources, the toy MCP server and the embedded model are development services that
    Chukwa reaches over HTTP like any other source: they live in devservices, which only the
    project package (the stack and the demo) imports."""
    graph = _graph()
    importers = sorted(
        f"{name} imports {target}"
        for name, edges in graph.items()
        for target in edges
        if target.split(".")[0] == "devservices" and name.split(".")[0] in DOMAIN
    )
    assert importers == []
    assert {"devservices.toys", "devservices.toy_mcp", "devservices.embedded_llm"} <= set(graph)
    for package in DOMAIN:
        held = [p.name for p in (PROJECT / package).rglob("*") if p.stem in ("toys", "toy_mcp")]
        held += [p.name for p in (PROJECT / package).rglob("embedded_llm")]
        assert held == [], package


TRACE_MODELS = ("SourceInvocation", "LlmCall", "LlmChunk")
ORM_WRITES = ("update", "create", "bulk_create", "update_or_create", "delete", "save")


def _trace_writes(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """``<TraceModel>.objects…<write>(…)`` chains and ``<instance>.save()`` of a trace model."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in ORM_WRITES:
            continue
        chain = ast.unparse(node.func.value)
        if any(chain.startswith(f"{model}.objects") for model in TRACE_MODELS):
            yield node.lineno, f"{chain}.{node.func.attr}"


def test_sources_record_their_calls_through_the_recording_port() -> None:
    """A source does transport and judging; the rows of its call are the recording package's to
    write. No module under cognition_app/sources imports the row writer (``cognition_app.rows``)
    or a module inside ``cognition_app.recording`` (only the package's public names), nor writes
    a trace row through the ORM."""
    graph = _graph()
    found = []
    for name, edges in graph.items():
        if not name.startswith("cognition_app.sources"):
            continue
        for target, line in edges.items():
            if target == "cognition_app.rows" or target.startswith("cognition_app.recording."):
                found.append(f"{name}:{line} imports {target}")
    for path in sorted((PROJECT / "cognition_app" / "sources").rglob("*.py")):
        for line, write in _trace_writes(ast.parse(path.read_text(), str(path))):
            found.append(f"{path.relative_to(PROJECT)}:{line} writes {write}")
    assert found == []
    # the check sees what it forbids
    planted = ast.parse("SourceInvocation.objects.filter(pk=1).update(status='x')")
    assert list(_trace_writes(planted)) == [(1, "SourceInvocation.objects.filter(pk=1).update")]


def test_the_attempts_recorder_is_the_one_door_to_its_finishing_writes() -> None:
    """Inside worlds_app, only the attempt's recorder reaches the trace writer and closes the
    rows an attempt left open: the commit and the failure path talk to it."""
    graph = _graph()
    users = sorted(
        name
        for name, edges in graph.items()
        if name.startswith("worlds_app")
        for target in edges
        if target in ("cognition_app.recording.write_behind",)
    )
    assert users == []
    texts = {
        name: path.read_text()
        for name, path in _modules().items()
        if name.startswith("worlds_app.services")
    }
    holders = sorted(n for n, t in texts.items() if "TraceWriter" in t or "finish_running" in t)
    assert holders == ["worlds_app.services.attempt_recorder"]

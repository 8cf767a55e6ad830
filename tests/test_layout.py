"""The package layout the README describes: binlog/ and clientproto/ import nothing from Django or the app, and no
module-level import cycle runs between the top-level packages or between the modules of one package."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("binlog", "clientproto", "relay", "relayproject", "devtools")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _top_level_imports(path: Path) -> set[str]:
    """Modules imported at module level (not inside functions, not under ``if TYPE_CHECKING``)."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
                visit(node.body + node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body + node.orelse + node.finalbody)

    visit(ast.parse(path.read_text()).body)
    return found


def _modules() -> dict[str, Path]:
    return {
        _module_name(path): path
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts
    }


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for imported in _top_level_imports(path):
            # "from relay.store import rowcodec" names a module; "from relay.store import StoreError" the package.
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        graph[name] = targets
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


@pytest.mark.parametrize("package", ["binlog", "clientproto"])
def test_the_library_packages_import_neither_django_nor_the_app(package: str) -> None:
    for path in (ROOT / package).rglob("*.py"):
        for imported in _top_level_imports(path):
            top = imported.split(".")[0]
            assert top not in ("django", "relay", "relayproject", "devtools"), f"{path.relative_to(ROOT)}: {imported}"


def test_no_import_cycle_between_the_top_level_packages() -> None:
    packages: dict[str, set[str]] = {}
    for module, targets in _graph().items():
        packages.setdefault(module.split(".")[0], set()).update(
            target.split(".")[0] for target in targets if target.split(".")[0] != module.split(".")[0]
        )
    assert _cycle(packages) is None, _cycle(packages)


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
    graph = _graph()
    assert "relay.store.rowcodec" in graph["relay.worker.ingest"]  # "from relay.store import rowcodec"
    assert "clientproto.records" in graph["clientproto.payloads"]  # a relative import


def test_no_module_level_import_cycle_between_modules() -> None:
    graph = _graph()
    # A package's __init__ that re-exports its modules (relay.store, relay.server) is the package's face: an edge
    # from a module of the package back to its own __init__ is only a longer spelling of a sibling import.
    for module, targets in graph.items():
        graph[module] = {t for t in targets if not module.startswith(f"{t}.")}
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])

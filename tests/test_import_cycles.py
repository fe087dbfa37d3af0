"""No import cycles in the package or among the bench scripts.

Why: a cycle makes the import order decide which names exist when a module body runs, so it is papered
over with late imports inside functions, and a reader can no longer read the modules bottom-up. When a
script is part of the cycle it is worse: ``python bench/exchange.py`` runs as ``__main__`` and a sibling's
``from exchange import BenchError`` loads a second copy with a second ``BenchError`` class, which the
script's ``except`` clauses never catch. So every import counts here, including ones inside functions and
under ``if TYPE_CHECKING:``: they are cycles for the reader even where they do not fail at run time.

The graph is built from the source with ``ast``, never by importing anything, so it covers code that
needs root, hivemind or a GPU as well. An edge goes to the module an import names: ``from pkg import name``
is an edge to ``pkg.name`` when that is a module and to ``pkg`` otherwise; the parent packages that Python
initialises on the way are not edges, so a package ``__init__`` re-exporting its submodules is not a
cycle with them unless a submodule imports the package itself.
"""

from __future__ import annotations

import ast
import tomllib
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = "distro_node"
BENCH = REPO / "bench"


@dataclass(frozen=True)
class Edge:
    """One import statement: where it is, so the failure message points at the line to change."""

    target: str
    path: Path
    line: int


Graph = Mapping[str, Mapping[str, Edge]]


def package_dirs(repo: Path) -> dict[str, Path]:
    """Package name to folder, as pyproject.toml maps them (``distro_node.compression`` -> compression/).

    Read from pyproject rather than written down here, so a subpackage added there is covered without
    touching this test.
    """
    with (repo / "pyproject.toml").open("rb") as f:
        mapping: dict[str, str] = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    return {name: repo / folder for name, folder in mapping.items()}


def package_modules(dirs: Mapping[str, Path]) -> dict[str, Path]:
    """Every .py file under the mapped folders, by its importable name.

    A folder below a mapped one that has no entry of its own (a subpackage someone has just added)
    takes its name from the nearest mapped ancestor, which is how the editable install resolves it.
    """
    modules: dict[str, Path] = {}
    # Deepest folder first, so node/peer/x.py is named through distro_node.node.peer, not distro_node.node.
    roots = sorted(dirs.items(), key=lambda item: len(item[1].parts), reverse=True)
    seen: set[Path] = set()
    for name, folder in roots:
        for path in sorted(folder.rglob("*.py")):
            if ".venv" in path.parts or path in seen:
                continue
            seen.add(path)
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            modules[".".join([name, *parts])] = path
    return modules


def bench_modules(folder: Path) -> dict[str, Path]:
    """Bench scripts run as ``python bench/x.py``, so bench/ is ``sys.path[0]`` and they import each
    other as top-level modules (``from _common import ...``)."""
    return {path.stem: path for path in sorted(folder.glob("*.py"))}


def _resolve_relative(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute name a ``from .x import`` names, as importlib would compute it."""
    parts = module.split(".") if is_package else module.split(".")[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    return ".".join([*parts, name] if name else parts)


def _known(name: str, modules: Mapping[str, Path]) -> str | None:
    """``name`` or its longest prefix that is one of ``modules``; None for anything else (third party)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def imports_of(module: str, path: Path, modules: Mapping[str, Path]) -> Iterable[Edge]:
    """Every import in the file, wherever it is (module level, functions, TYPE_CHECKING blocks)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _known(alias.name, modules)
                if target is not None:
                    yield Edge(target, path, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = (
                _resolve_relative(module, is_package, node.level, node.module)
                if node.level
                else node.module or ""
            )
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                target = submodule if submodule in modules else _known(base, modules)
                if target is not None:
                    yield Edge(target, path, node.lineno)


def import_graph(modules: Mapping[str, Path]) -> dict[str, dict[str, Edge]]:
    """module -> {imported module: first import of it}; a module naming itself is not an edge."""
    graph: dict[str, dict[str, Edge]] = {}
    for module, path in modules.items():
        edges: dict[str, Edge] = {}
        for edge in imports_of(module, path, modules):
            if edge.target != module:
                edges.setdefault(edge.target, edge)
        graph[module] = edges
    return graph


def strongly_connected(graph: Graph) -> list[list[str]]:
    """Tarjan's components with more than one module: each one holds at least one cycle.

    Iterative, so a long import chain cannot hit the recursion limit.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterable[str]]] = []
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work.append((root, iter(sorted(graph[root]))))
        while work:
            node, children = work[-1]
            child = next(iter(children), None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def shortest_cycle(graph: Graph, component: list[str], start: str) -> list[Edge]:
    """One shortest cycle through ``start``, as the import statements that form it."""
    members = set(component)
    came_from: dict[str, tuple[str, Edge]] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for target, edge in sorted(graph[node].items()):
            if target not in members:
                continue
            if target == start:
                chain = [edge]
                while node != start:
                    node, back = came_from[node]
                    chain.append(back)
                return chain[::-1]
            if target not in came_from:
                came_from[target] = (node, edge)
                queue.append(target)
    raise AssertionError(f"{start} is on no cycle in {component}")


def describe(graph: Graph, cycles: list[list[str]], repo: Path) -> str:
    """Each component, then cycles through it until every member is on one: the imports to rethink."""
    lines = []
    for component in cycles:
        lines.append(f"cycle among {', '.join(component)}:")
        shown: set[str] = set()
        for start in component:
            if start in shown:
                continue
            chain = shortest_cycle(graph, component, start)
            shown.update(edge.target for edge in chain)
            for edge in chain:
                lines.append(f"    {edge.path.relative_to(repo)}:{edge.line} imports {edge.target}")
            lines.append("    --")
    return "\n".join(lines)


def _cycles_in(modules: dict[str, Path]) -> tuple[dict[str, dict[str, Edge]], list[list[str]]]:
    graph = import_graph(modules)
    return graph, strongly_connected(graph)


def test_package_has_no_import_cycles() -> None:
    modules = package_modules(package_dirs(REPO))
    assert f"{PACKAGE}.compression.wire" in modules, "package layout not found: is pyproject.toml mapped?"
    graph, cycles = _cycles_in(modules)
    assert not cycles, f"{len(cycles)} import cycle(s) in {PACKAGE}:\n{describe(graph, cycles, REPO)}"


def test_bench_scripts_have_no_import_cycles() -> None:
    modules = bench_modules(BENCH)
    assert "_common" in modules
    graph, cycles = _cycles_in(modules)
    assert not cycles, f"{len(cycles)} import cycle(s) in bench/:\n{describe(graph, cycles, REPO)}"


# The rules above decide what counts as a cycle; these pin them on a throwaway package.


def _write(root: Path, files: Mapping[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        pytest.param(
            {"a.py": "def f():\n    from .b import x\n", "b.py": "from . import a\n"},
            [["pkg.a", "pkg.b"]],
            id="late-import-in-function",
        ),
        pytest.param(
            {
                "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n",
                "b.py": "import pkg.a\n",
            },
            [["pkg.a", "pkg.b"]],
            id="type-checking-block",
        ),
        pytest.param(
            {"sub/__init__.py": "from .x import X\n", "sub/x.py": "from ..sub import y\n", "sub/y.py": ""},
            [],
            id="from-package-import-submodule-is-an-edge-to-the-submodule",
        ),
        pytest.param(
            {"sub/__init__.py": "from .x import X\n", "sub/x.py": "from pkg.sub import Y\n"},
            [["pkg.sub", "pkg.sub.x"]],
            id="submodule-importing-its-reexporting-package",
        ),
        pytest.param(
            {"sub/__init__.py": "from .x import X\n", "sub/x.py": "import pkg.sub.y\n", "sub/y.py": ""},
            [],
            id="parent-packages-initialised-on-the-way-are-not-edges",
        ),
        pytest.param(
            {"a.py": "from .b import f\n", "b.py": "from .c import g\n", "c.py": "from . import a\n"},
            [["pkg.a", "pkg.b", "pkg.c"]],
            id="three-module-cycle",
        ),
    ],
)
def test_cycle_rules(tmp_path: Path, files: dict[str, str], expected: list[list[str]]) -> None:
    _write(tmp_path / "src", {"__init__.py": "", **files})
    modules = package_modules({"pkg": tmp_path / "src"})
    graph, cycles = _cycles_in(modules)
    assert cycles == expected, describe(graph, cycles, tmp_path)


def test_failure_message_names_the_import_lines(tmp_path: Path) -> None:
    _write(tmp_path, {"exchange.py": "import os\n\ndef main():\n    from _netns import run\n",
                      "_netns.py": "from exchange import BenchError\n"})
    graph, cycles = _cycles_in(bench_modules(tmp_path))
    assert cycles == [["_netns", "exchange"]]
    text = describe(graph, cycles, tmp_path)
    assert "_netns.py:1 imports exchange" in text
    assert "exchange.py:4 imports _netns" in text

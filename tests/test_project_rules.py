"""Structural rules of the project that a refactor could silently break."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _imports(folder: str) -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for path in (ROOT / folder).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                found.update((str(path.relative_to(ROOT)), alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add((str(path.relative_to(ROOT)), node.module))
    return found


def test_dependency_direction() -> None:
    """optimizer/ and compression/ never reach into the network or the daemon; protocol/ never into torch."""
    rules = {
        "compression": ("distro_node.protocol", "distro_node.node", "distro_node.optimizer"),
        "optimizer": ("distro_node.protocol", "distro_node.node"),
        "protocol": ("torch", "distro_node.node", "distro_node.optimizer"),
    }
    bad = [
        (path, module)
        for folder, forbidden in rules.items()
        for path, module in _imports(folder)
        if any(module == f or module.startswith(f + ".") for f in forbidden)
    ]
    assert bad == []


def test_test_modules_have_unique_names() -> None:
    """Test folders have no __init__.py, so two test files with one basename cannot both be collected."""
    names = Counter(p.name for p in (ROOT / "tests").rglob("*.py") if p.name != "conftest.py")
    assert [n for n, c in names.items() if c > 1] == []


def test_no_top_level_import_named_like_a_folder() -> None:
    """`compression` is a standard-library package from Python 3.14: only `distro_node.*` names exist."""
    for folder in ("optimizer", "compression", "protocol", "node"):
        for path, module in _imports(folder):
            assert module.split(".")[0] != folder, f"{path} imports {module!r}; use distro_node.{module}"

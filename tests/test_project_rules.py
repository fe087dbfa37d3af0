"""Structural rules of the project that a refactor could silently break."""

from __future__ import annotations

import ast
import sys
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


def _module_file(module: str) -> Path | None:
    """The file of a ``distro_node.protocol`` module in this checkout (None for anything else)."""
    parts = module.split(".")
    if parts[:2] != ["distro_node", "protocol"]:
        return None
    base = ROOT.joinpath("protocol", *parts[2:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _resolved_imports(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports, relative imports resolved against its package."""
    package = ["distro_node", "protocol", *path.relative_to(ROOT / "protocol").parts[:-1]]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package[: len(package) - node.level + 1] if node.level else []
            base = ".".join([*parts, *([node.module] if node.module else [])])
            found.add(base)
            # `from . import admission` imports a submodule, not just a name of the package.
            found.update(m for a in node.names if _module_file(m := f"{base}.{a.name}") is not None)
    return found


def test_consensus_is_pure() -> None:
    """protocol/consensus/ (the round machine) imports only the standard library and pure protocol modules.

    It is the code the multi-replica simulator proves and the daemon trusts to decide; no clock, socket,
    trio, libp2p or torch may sneak in, not even through a protocol module it imports (checked transitively).
    """
    allowed_std = set(sys.stdlib_module_names) | {"__future__"}
    todo = sorted((ROOT / "protocol" / "consensus").rglob("*.py"))
    seen: set[Path] = set()
    bad: list[tuple[str, str]] = []
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for module in _resolved_imports(path):
            if module.split(".")[0] in allowed_std:
                continue
            target = _module_file(module)
            if target is None:
                bad.append((str(path.relative_to(ROOT)), module))
            else:
                todo.append(target)
    assert bad == []
    assert any(p.parent.name == "consensus" for p in seen) and (ROOT / "protocol" / "messages.py") in seen


def test_the_package_never_imports_transformers() -> None:
    """Hugging Face import and export (node/hf/) use safetensors and json only: transformers is a test
    dependency and an optional extra, so the daemon must run without it."""
    bad = [
        (path, module)
        for folder in ("optimizer", "compression", "protocol", "node", "distro_node")
        for path, module in _imports(folder)
        if module.split(".")[0] == "transformers"
    ]
    assert bad == []

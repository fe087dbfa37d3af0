"""Every field of the node config is read by the daemon: a setting an operator can write (validated,
documented by `init`) that nothing reads is a promise the code does not keep. Four such fields once existed
(``log_level``, ``faults``, ``network.announce_interval_seconds``, ``network.max_peers``).

Heuristic but strict enough: each leaf field's name must be read as an attribute (``cfg.network.max_peers``)
somewhere in node/ outside the dataclass definitions. The strategy settings are left to the optimizer's own
tests: they are read by optimizer/ by construction (``build_strategy``)."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

from distro_node.node.config.fields import is_section
from distro_node.node.config.schema import NodeConfig, Section

NODE = Path(__file__).resolve().parents[2] / "node"


def _leaves(cls: type[Section], prefix: str = "") -> list[str]:
    out: list[str] = []
    instance = cls()
    for f in fields(cls):
        value = getattr(instance, f.name)
        if f.name == "strategy_settings":
            continue
        if is_section(type(value)):
            out += _leaves(type(value), f"{prefix}{f.name}.")
        else:
            out.append(f"{prefix}{f.name}")
    return out


def _attributes_read() -> set[str]:
    names: set[str] = set()
    for path in NODE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                names.add(node.attr)
    return names


def test_every_config_field_is_read() -> None:
    read = _attributes_read()
    assert len(_leaves(NodeConfig)) > 30  # the walk reaches the nested sections
    unread = [dotted for dotted in _leaves(NodeConfig) if dotted.rsplit(".", 1)[-1] not in read]
    assert unread == []

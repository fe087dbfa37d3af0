"""Write a config as commented TOML: what ``distro-node init`` puts on disk for the operator to edit.

Generated from the dataclasses (values and each field's ``doc``), so the file can never drift from what the
loader accepts; a test loads the rendered defaults back and compares.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, get_type_hints

from distro_node.node.config.fields import is_section
from distro_node.node.config.schema import NodeConfig, RunConfig, Section
from distro_node.node.config.sources import ENV_CONFIG_PATH, ENV_PREFIX

_HEADER = f"""\
# distro-node configuration.
#
# Precedence, lowest first: this file < environment variables < command-line flags.
# Environment: {ENV_PREFIX}<FIELD PATH>, upper case, levels joined by "__", e.g.
#   {ENV_PREFIX}METRICS__PORT=9100   {ENV_PREFIX}RUN__STRATEGY_SETTINGS__TOPK=32   {ENV_PREFIX}LOG_LEVEL=debug
# (lists are comma-separated there). {ENV_CONFIG_PATH} names this file.
# Unknown keys and out-of-range values are errors that name the field.
"""


def _string(text: str) -> str:
    """A TOML basic string. Written by hand because ``json.dumps`` escapes astral characters as surrogate
    pairs, which TOML forbids."""
    out = []
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_value(value: Any) -> str:
    """One value in TOML syntax (bool, int, float, str, path, or a list of those)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        return text if any(c in text for c in ".eEn") else text + ".0"
    if isinstance(value, str | Path):
        return _string(str(value))
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def _plain_table(lines: list[str], name: str, data: dict[str, Any], comment: str) -> None:
    """A table without per-field docs (the strategy settings, documented in optimizer/config.py)."""
    lines += ["", f"# {comment}", f"[{name}]"]
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    lines += [f"{k} = {toml_value(v)}" for k, v in data.items() if not isinstance(v, dict) and v is not None]
    for key, sub in tables.items():
        _plain_table(lines, f"{name}.{key}", sub, f"{key} of the strategy settings")


def _section(lines: list[str], name: str, section: Section, doc: str) -> None:
    if name:
        lines += ["", f"# {doc}", f"[{name}]"]
    hints = get_type_hints(type(section))
    nested: list[tuple[str, Any]] = []
    for f in fields(section):
        value = getattr(section, f.name)
        if is_section(hints[f.name]):
            nested.append((f.name, f))
            continue
        if isinstance(section, RunConfig) and f.name == "strategy_settings":
            continue
        if f.metadata.get("doc"):
            lines.append(f"# {f.metadata['doc']}")
        if value is None:
            lines.append(f"# {f.name} = {toml_value(f.metadata.get('example', ''))}")
        else:
            lines.append(f"{f.name} = {toml_value(value)}")
    for key, f in nested:
        _section(lines, f"{name}.{key}" if name else key, getattr(section, key), f.metadata.get("doc", key))
    if isinstance(section, RunConfig):
        _plain_table(
            lines,
            f"{name}.strategy_settings",
            asdict(section.strategy_config),
            f"settings of strategy {section.strategy!r} (see optimizer/config.py); unknown keys are errors",
        )


def render_toml(config: NodeConfig | None = None) -> str:
    """``config`` (default: the defaults) as commented TOML that :func:`load_config` reads back equal."""
    lines = [_HEADER]
    _section(lines, "", config if config is not None else NodeConfig(), "")
    return "\n".join(lines) + "\n"

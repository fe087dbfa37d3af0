"""Read the three config sources into one tree that remembers where every value came from.

Sources, lowest precedence first: the TOML file, ``DISTRO_NODE_*`` environment variables, command-line flags.
Each leaf keeps its source (``file <path>``, ``env <NAME>``, ``flag <key>``) so a validation error reports
which layer to fix, and whether it is still text to be parsed by the field's type (environment and flag
strings) or an already typed TOML value.

Environment naming: ``DISTRO_NODE_`` + the dotted field path upper-cased, with ``__`` (two underscores)
between levels and single underscores kept inside names, e.g. ``DISTRO_NODE_METRICS__PORT=9100``,
``DISTRO_NODE_RUN__STRATEGY_SETTINGS__SCHEDULE__KIND=cosine``, ``DISTRO_NODE_LOG_LEVEL=debug``.
``DISTRO_NODE_CONFIG`` is reserved: the path of the config file.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distro_node.node.config.errors import ConfigFieldError, ConfigFileError

ENV_PREFIX = "DISTRO_NODE_"
ENV_CONFIG_PATH = ENV_PREFIX + "CONFIG"
ENV_SEPARATOR = "__"
_ENV_PART = re.compile(r"[a-z][a-z0-9_]*")
_FLAG_KEY = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*")
_TOML_LINE = re.compile(r"line (\d+)")
# A config file is a few kilobytes; refusing huge ones keeps a wrong path (a dataset) from eating memory.
MAX_CONFIG_BYTES = 1 << 20


@dataclass(frozen=True)
class Leaf:
    """One value with its provenance; ``text`` means it is a string still to be parsed by the field type."""

    value: Any
    source: str
    text: bool


Tree = dict[str, Any]  # str -> Tree | Leaf


def env_name(dotted: str) -> str:
    """The environment variable that sets ``dotted`` (``metrics.port`` -> ``DISTRO_NODE_METRICS__PORT``)."""
    return ENV_PREFIX + ENV_SEPARATOR.join(part.upper() for part in dotted.split("."))


def _insert(tree: Tree, path: list[str], leaf: Leaf) -> None:
    node = tree
    for depth, part in enumerate(path[:-1]):
        child = node.setdefault(part, {})
        if isinstance(child, Leaf):
            where = ".".join(path[: depth + 1])
            raise ConfigFieldError(where, "is set as a value and also used as a table", leaf.source)
        node = child
    if isinstance(node.get(path[-1]), dict):
        raise ConfigFieldError(".".join(path), "is a table: set its fields one by one", leaf.source)
    node[path[-1]] = leaf


def _from_mapping(data: Mapping[str, Any], source: str) -> Tree:
    tree: Tree = {}
    for key, value in data.items():
        tree[key] = _from_mapping(value, source) if isinstance(value, dict) else Leaf(value, source, False)
    return tree


def read_toml(path: str | Path) -> Tree:
    """Parse the config file; unreadable files and syntax errors raise :class:`ConfigFileError` with the path
    (and the line number the parser reported)."""
    path = Path(path)
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigFileError(path, f"cannot read config file: {exc.strerror or exc}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigFileError(path, f"larger than {MAX_CONFIG_BYTES} bytes; not a config file")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigFileError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        match = _TOML_LINE.search(str(exc))
        line = int(match.group(1)) if match else None
        raise ConfigFileError(path, f"invalid TOML: {exc}", line) from None
    return _from_mapping(data, f"file {path}")


def read_env(env: Mapping[str, str]) -> Tree:
    """Every ``DISTRO_NODE_*`` variable except the reserved ``DISTRO_NODE_CONFIG``; a malformed name is an
    error (a typo would otherwise be silently ignored)."""
    tree: Tree = {}
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX) or name == ENV_CONFIG_PATH:
            continue
        parts = name[len(ENV_PREFIX) :].lower().split(ENV_SEPARATOR)
        source = f"env {name}"
        if not all(_ENV_PART.fullmatch(part) for part in parts):
            raise ConfigFieldError(
                ".".join(parts), f"malformed variable name; use {ENV_PREFIX}<SECTION>__<FIELD>", source
            )
        _insert(tree, parts, Leaf(env[name], source, True))
    return tree


def read_flags(flags: Mapping[str, Any]) -> Tree:
    """Flags as the CLI hands them over: dotted field -> value. Strings are parsed by the field's type, other
    values are taken as typed; None means "flag not given" and is skipped."""
    tree: Tree = {}
    for key in sorted(flags):
        value = flags[key]
        source = f"flag {key}"
        if not isinstance(key, str) or not _FLAG_KEY.fullmatch(key):
            raise ConfigFieldError(str(key), "malformed setting name; use dotted lower-case names", source)
        if value is None:
            continue
        _insert(tree, key.split("."), Leaf(value, source, isinstance(value, str)))
    return tree


def merge(base: Tree, over: Tree) -> Tree:
    """``over`` wins leaf by leaf; tables merge recursively (a table replaces a leaf and vice versa, which the
    builder then reports as a type error naming the later source)."""
    out: Tree = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def sources(tree: Tree, prefix: str = "") -> dict[str, str]:
    """Dotted field -> source description, for attaching provenance to errors raised by validation."""
    out: dict[str, str] = {}
    for key, value in tree.items():
        dotted = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            out.update(sources(value, dotted))
        else:
            out[dotted] = value.source
    return out


def first_source(node: Tree | Leaf) -> str | None:
    """Any source inside ``node`` (errors about a whole table name one of the places that set it)."""
    if isinstance(node, Leaf):
        return node.source
    for value in node.values():
        found = first_source(value)
        if found:
            return found
    return None

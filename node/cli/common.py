"""Pieces the operator commands (`init`, `doctor`, `status`) share: the typed usage error and where the config
file is looked for.

Why a typed usage error: ``cli.main`` turns any ``ValueError`` into ``error: <message>`` and exit code 2, and
config errors already read ``<field>: <detail>``. Flag mistakes that the config loader never sees (a negative
``--uplink-mbit``, a ``file://`` URL) use the same shape, so every bad input reads the same way.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from distro_node.node.config.load import ENV_CONFIG_PATH, NodeConfig

# What `distro-node init` writes by default, and what the other commands read when no path is given, so
# ``init`` then ``doctor`` then ``join`` in one directory needs no flags.
DEFAULT_CONFIG_NAME = "distro-node.toml"


class UsageError(ValueError):
    """A command-line value is out of its contract; ``field`` is the flag (``--memory-gb``) or argument."""

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"{field}: {detail}")
        self.field = field
        self.detail = detail


def positive(field: str, value: float | None) -> float | None:
    """``value`` unchanged when it is None (not given) or a finite number > 0; UsageError otherwise."""
    if value is not None and not (value > 0 and value != float("inf")):
        raise UsageError(field, f"must be a finite number > 0, got {value}")
    return value


def config_path(explicit: Path | None, env: Mapping[str, str] | None = None) -> Path | None:
    """The config file to read: ``--config``, else ``$DISTRO_NODE_CONFIG``, else ``./distro-node.toml`` when
    it exists, else None (built-in defaults). An explicit path that does not exist is left for the loader to
    report, naming the path."""
    env = os.environ if env is None else env
    if explicit is not None:
        return explicit
    if env.get(ENV_CONFIG_PATH):
        return Path(env[ENV_CONFIG_PATH])
    local = Path(DEFAULT_CONFIG_NAME)
    return local if local.is_file() else None


@cache
def _defaults() -> NodeConfig:
    """Built once per process: constructing it validates every section (presets, strategy settings)."""
    return NodeConfig()


def config_default(dotted: str) -> Any:
    """The built-in default of config field ``dotted`` (``run.rounds.warmup_rounds``), read from the typed
    config itself so flag help can never disagree with it."""
    value: Any = _defaults()
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value) or "none"
    if isinstance(value, float):
        return f"{value:g}"
    return "none" if value is None else str(value)


def config_help(text: str, dotted: str) -> str:
    """Help of a flag that sets config field ``dotted``: the text, the field's default, and the field's name
    (so an operator knows which file key or DISTRO_NODE_* variable sets the same thing)."""
    return f"{text} (default {_shown(config_default(dotted))}) [{dotted}]"

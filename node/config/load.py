"""Load the node config: TOML file < ``DISTRO_NODE_*`` environment < command-line flags.

Public API::

    config = load_config("node.toml", env=os.environ, flags={"metrics.port": "9100"})
    text = render_toml()            # the commented default file `distro-node init` writes

Unknown keys at any level and bad values are :class:`ConfigFieldError` naming the dotted field and the source
that set it; an unreadable file or a TOML syntax error is :class:`ConfigFileError` (with the line number).
Both derive from :class:`ConfigLoadError`. The environment naming is documented in ``config_sources``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

from distro_node.node.config.errors import ConfigFieldError, ConfigFileError, ConfigLoadError
from distro_node.node.config.fields import is_section, parse_text
from distro_node.node.config.render import render_toml
from distro_node.node.config.schema import (
    CheckpointConfig,
    DataConfig,
    MetricsConfig,
    NetworkConfig,
    NodeConfig,
    RoundsConfig,
    RunConfig,
    Section,
)
from distro_node.node.config.sources import (
    ENV_CONFIG_PATH,
    ENV_PREFIX,
    Leaf,
    Tree,
    env_name,
    first_source,
    merge,
    read_env,
    read_flags,
    read_toml,
    sources,
)
from distro_node.optimizer.config import ScheduleConfig
from distro_node.optimizer.registry import STRATEGIES

__all__ = [
    "ENV_CONFIG_PATH",
    "ENV_PREFIX",
    "CheckpointConfig",
    "ConfigFieldError",
    "ConfigFileError",
    "ConfigLoadError",
    "DataConfig",
    "MetricsConfig",
    "NetworkConfig",
    "NodeConfig",
    "RoundsConfig",
    "RunConfig",
    "env_name",
    "load_config",
    "render_toml",
]


S = TypeVar("S", bound=Section)


def _value(dotted: str, node: Tree | Leaf, hint: Any) -> Any:
    if isinstance(node, dict):
        raise ConfigFieldError(dotted, "is a single setting, not a table", first_source(node))
    return parse_text(dotted, node.value, hint, node.source) if node.text else node.value


def _strategy_settings(dotted: str, node: Tree | Leaf, strategy: Any) -> Any:
    """The ``[run.strategy_settings]`` table as a plain mapping for ``make_config``, with environment and flag
    strings parsed by the chosen strategy's field types. Unknown keys are kept so the optimizer's own
    validation reports them (named, then re-mapped to this file's layout by ``RunConfig``)."""
    if isinstance(node, Leaf):
        return node.value  # not a table: make_config reports the type error
    entry = STRATEGIES.get(strategy) if isinstance(strategy, str) else None
    hints = get_type_hints(entry[1]) if entry else {}

    def convert(sub: Tree, sub_hints: dict[str, Any], prefix: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in sub.items():
            hint = sub_hints.get(key)
            if isinstance(value, dict):
                nested = get_type_hints(ScheduleConfig) if hint is ScheduleConfig else {}
                out[key] = convert(value, nested, f"{prefix}.{key}")
            elif value.text and hint is not None and hint is not ScheduleConfig:
                out[key] = parse_text(f"{prefix}.{key}", value.value, hint, value.source)
            else:
                out[key] = value.value
        return out

    return convert(node, hints, dotted)


def _build(cls: type[S], tree: Tree, origin: dict[str, str]) -> S:
    hints = get_type_hints(cls)
    known = [f.name for f in fields(cls)]
    kwargs: dict[str, Any] = {}
    deferred: Tree | Leaf | None = None
    for key, node in tree.items():
        dotted = cls.dotted(key)
        if key not in known:
            what = "table" if isinstance(node, dict) else "setting"
            raise ConfigFieldError(dotted, f"unknown {what} (known: {', '.join(known)})", first_source(node))
        hint = hints[key]
        if is_section(hint):
            if not isinstance(node, dict):
                raise ConfigFieldError(dotted, "must be a table of settings", node.source)
            kwargs[key] = _build(hint, node, origin)
        elif cls is RunConfig and key == "strategy_settings":
            deferred = node  # parsed by the types of the strategy, which may be set by a later key
        else:
            kwargs[key] = _value(dotted, node, hint)
    if deferred is not None:
        strategy = kwargs.get("strategy", RunConfig.strategy)
        kwargs["strategy_settings"] = _strategy_settings(cls.dotted("strategy_settings"), deferred, strategy)
    try:
        return cls(**kwargs)
    except ConfigFieldError as exc:
        if exc.source is not None:
            raise
        raise ConfigFieldError(exc.field, exc.detail, origin.get(exc.field)) from None


def load_config(
    path: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
) -> NodeConfig:
    """Merge the sources and validate the result.

    ``path`` None falls back to ``$DISTRO_NODE_CONFIG``, then to no file (defaults). ``env`` defaults to
    ``os.environ``. ``flags`` maps dotted fields to values (strings are parsed like environment values;
    None means "not given").
    """
    env = os.environ if env is None else env
    if path is None and env.get(ENV_CONFIG_PATH):
        path = env[ENV_CONFIG_PATH]
    tree: Tree = read_toml(path) if path is not None else {}
    tree = merge(tree, read_env(env))
    tree = merge(tree, read_flags(flags or {}))
    return _build(NodeConfig, tree, sources(tree))

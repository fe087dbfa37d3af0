"""Typed errors of the node config, so the CLI can print one line an operator can act on.

Every error names the full dotted field (``metrics.port``) and, when known, where the bad value came from
(the config file, the environment variable or the command-line flag): with three layered sources, "port out of
range" alone would leave the operator guessing which layer to fix.
"""

from __future__ import annotations

from pathlib import Path

from distro_node.optimizer.errors import ConfigError


class ConfigLoadError(ValueError):
    """Base of everything that stops a node config from loading; the CLI catches this one."""


class ConfigFieldError(ConfigLoadError, ConfigError):
    """A setting is unknown, of the wrong type or out of range.

    ``field`` is the full dotted name (``run.strategy_settings.topk``), ``source`` describes where the value
    came from (``file /etc/node.toml``, ``env DISTRO_NODE_METRICS__PORT``, ``flag metrics.port``) or is None
    for a default or a value set in code. It is also an :class:`optimizer.errors.ConfigError`, so code that
    already handles strategy config errors handles these too.
    """

    def __init__(self, field: str, detail: str, source: str | None = None) -> None:
        text = f"{field}: {detail}" if field else detail
        if source:
            text = f"{text} (from {source})"
        ValueError.__init__(self, text)
        self.field = field
        self.detail = detail
        self.source = source


class ConfigFileError(ConfigLoadError):
    """The config file cannot be read or is not valid TOML; ``line`` is 1-based when the parser gave one."""

    def __init__(self, path: Path, detail: str, line: int | None = None) -> None:
        super().__init__(f"{path}: {detail}")
        self.path = path
        self.detail = detail
        self.line = line

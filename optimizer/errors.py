"""Typed errors of the optimizer package.

Every error names what was wrong so a misconfigured node fails at start-up with a message an operator can act
on, instead of training silently with a different algorithm than its peers.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A strategy or schedule setting is invalid; ``field`` is the dotted name of the offending setting."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class StateError(ValueError):
    """A state dict does not match this strategy (other model, other settings, or corrupted)."""


class StepOrderError(RuntimeError):
    """The caller broke the documented call order (e.g. ``prepare`` between ``pre_forward`` and
    ``post_backward``), which would silently desynchronize replicas if tolerated."""

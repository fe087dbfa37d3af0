"""Old home of the round state machine, kept so the daemon's imports work while node/ is restructured."""

# compat: removed once node/ uses consensus (the whole module)

from __future__ import annotations

from .consensus.context import COUNTERS
from .consensus.machine import RoundInputError, RoundMachine

__all__ = ["COUNTERS", "RoundInputError", "RoundMachine"]

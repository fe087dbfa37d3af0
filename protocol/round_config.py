"""Old home of the round settings, kept so the daemon's imports work while node/ is restructured."""

# compat: removed once node/ uses consensus (the whole module)

from __future__ import annotations

from .consensus.config import RoundConfig, RoundConfigError

__all__ = ["RoundConfig", "RoundConfigError"]

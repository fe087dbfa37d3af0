"""Old home of the leader order, kept so the daemon's imports work while node/ is restructured."""

# compat: removed once node/ uses consensus (the whole module)

from __future__ import annotations

from .consensus.leader_rank import leader_order, leader_score

__all__ = ["leader_order", "leader_score"]

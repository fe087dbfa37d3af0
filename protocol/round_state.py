"""Old home of the per-step round state, kept so the daemon's imports work while node/ is restructured."""

# compat: removed once node/ uses consensus (the whole module)

from __future__ import annotations

from .consensus.round_state import (
    EPOCH_GROWTH_CAP,
    Ballot,
    PayloadKey,
    RoundState,
    build_list,
    designated_leader,
    epoch1_start,
    epoch_at,
    epoch_length,
    epoch_since,
    epoch_start,
    strict_majority,
)

__all__ = [
    "EPOCH_GROWTH_CAP",
    "Ballot",
    "PayloadKey",
    "RoundState",
    "build_list",
    "designated_leader",
    "epoch1_start",
    "epoch_at",
    "epoch_length",
    "epoch_since",
    "epoch_start",
    "strict_majority",
]

"""Old home of the round machine's actions, kept so the daemon's imports work while node/ is restructured."""

# compat: removed once node/ uses consensus (the whole module)

from __future__ import annotations

from .consensus.actions import (
    CONFLICT_KINDS,
    MEMBERSHIP_CHANGES,
    PENALTY_REASONS,
    RESYNC_REASONS,
    Action,
    ApplyInclusionList,
    FetchPayload,
    ListConflict,
    MembershipChanged,
    PeerMissed,
    Penalize,
    PublishInclusionList,
    PublishStatus,
    PublishVote,
    Reannounce,
    ResyncNeeded,
    RoundStalled,
)

__all__ = [
    "CONFLICT_KINDS",
    "MEMBERSHIP_CHANGES",
    "PENALTY_REASONS",
    "RESYNC_REASONS",
    "Action",
    "ApplyInclusionList",
    "FetchPayload",
    "ListConflict",
    "MembershipChanged",
    "PeerMissed",
    "Penalize",
    "PublishInclusionList",
    "PublishStatus",
    "PublishVote",
    "Reannounce",
    "ResyncNeeded",
    "RoundStalled",
]

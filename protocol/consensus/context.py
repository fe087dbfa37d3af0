"""What every rule reads about the replica applying it: who we are, the time, whom we hear, what we count.

One frozen value per input, built after the clock moved, so no rule can act on a time other than the
input's and none can change who we are halfway through a call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ..liveness import LivenessView
from ..membership import Roster, RosterRules
from ..message_fields import Signer
from .config import RoundConfig

# Fixed counter names, so they can become metric labels.
COUNTERS: tuple[str, ...] = (
    "wrong_run",
    "stale_step",
    "future_step",
    "duplicate_announcement",
    "equivocation",
    "announcement_cap",
    "oversize_payload",
    "untracked_peer",
    "invalid_list",
    "list_cap",
    "duplicate_list",
    "list_equivocation",
    "vote_equivocation",
    "list_conflict",
    "conflicting_claim",
    "stale_goodbye",
    "below_quorum_list",
    "vote_cap",
    "unexpected_payload_event",
    "lists_published",
    "votes_cast",
    "rounds_decided",
    "rounds_applied",
    "rounds_stalled",
    "resyncs_requested",
    "banned_in_list",
    "evidence_held",
    "evidence_cap",
)


class Counters:
    """Counts of what the machine ignored, refused or did; an unknown name is a bug and raises KeyError."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self.view: Mapping[str, int] = MappingProxyType(self._counts)

    def count(self, name: str) -> None:
        self._counts[name] += 1


@dataclass(frozen=True)
class Local:
    """This replica at the instant of one input."""

    config: RoundConfig
    rules: RosterRules
    self_id: str
    now: float
    leaving: bool  # we said goodbye: we neither vote nor lead any more
    liveness: LivenessView
    counters: Counters
    sign: Signer  # signs a vote statement with our key (pure for the machine: a deterministic function)

    def is_voter(self, roster: Roster) -> bool:
        return roster.is_eligible(self.self_id) and not self.leaving

    def is_alive(self, peer: str) -> bool:
        return self.liveness.is_alive(peer, self.now, self.config.liveness_timeout)

    def left(self) -> frozenset[str]:
        """Peers whose (self-signed) goodbye we saw: they vote no more, so quorums stop counting them."""
        return self.liveness.left_peers()

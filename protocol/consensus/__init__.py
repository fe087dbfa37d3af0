"""Consensus: decides, step after step, which payloads every honest replica aggregates.

Pure and deterministic: no clock, no randomness, no I/O, no network library. The driver passes ``now`` (any
monotonic clock, in seconds) into every call and carries out the returned actions (:mod:`.actions`), so
every rule is unit-testable and the multi-replica simulator in tests/protocol can replay honest and
Byzantine swarms from a seed. That simulator is the proof of the rules below; it found the split brain that
made agreement vote-based.

Per step: collect signed announcements and payloads until the expected peers are in or a deadline passes;
agree on the inclusion list with Byzantine quorums and leader rotation; apply exactly the decided list.
Where each rule lives, and why it is as it is:

* :mod:`.machine`: the entry points. Every peer message goes through ``on_message``; local inputs
  (our announcement, payload results, bans, lost connections, time, a restored state) have one method each.
* :mod:`.admission`: what a peer's message may change (run id, our own echoes, liveness, the step window,
  per-step caps, equivocation).
* :mod:`.epochs`: the round clock, leader rotation, skipping absent leaders, stalls.
* :mod:`.agreement`: proposals, signed prevotes and precommits, locks and pols, the Byzantine quorums that
  decide a list (Tendermint-shaped, one instance per step).
* :mod:`.laggards`: certificates for peers still deciding a step we decided; conflicting claims.
* :mod:`.progress`: fetching payloads, applying decided lists in order, the weights check, resyncs.
* :mod:`.bans`: what a ban from the driver's score keeper changes, and why only from its step on.
* :mod:`.window`, :mod:`.round_state`, :mod:`.context`: the state those rules read, and its bounds.
* :mod:`.leader_rank`, :mod:`.config`: the leader order and the tunables.
"""

from __future__ import annotations

from .actions import (
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
    Publish,
    ResyncNeeded,
    RoundStalled,
)
from .config import RoundConfig, RoundConfigError
from .context import COUNTERS
from .leader_rank import leader_order
from .machine import RoundInputError, RoundMachine

__all__ = [
    "CONFLICT_KINDS",
    "COUNTERS",
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
    "Publish",
    "ResyncNeeded",
    "RoundConfig",
    "RoundConfigError",
    "RoundInputError",
    "RoundMachine",
    "RoundStalled",
    "leader_order",
]

"""Effects the round state machine asks its driver (the transport and the node) to carry out.

The machine never does I/O: every call returns a list of these, in the order they should be performed.
Reasons are small fixed vocabularies so they can be used as metric labels.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..messages import Announcement, Certificate, InclusionList, Status, Vote

PENALTY_REASONS: tuple[str, ...] = (
    "equivocation",  # two different signed payloads for the same step (announcements or list entries)
    "list_equivocation",  # a leader signed two different lists for the same epoch of a step
    "vote_equivocation",  # a voter signed two different votes for the same epoch of a step
    "invalid_list",  # a list that breaks the roster rules (unknown leader, ineligible peer, ...)
    "invalid_payload",  # the announced payload failed validation
    "oversize",  # announced a payload above the configured cap
    "forged_list",  # a leader's list named hashes their authors did not sign (refused at the gossip door)
)
RESYNC_REASONS: tuple[str, ...] = (
    "weights_diverged",  # our weights hash differs from the majority of the included peers
    "behind",  # a majority of the roster is ahead of us
    "unapplicable",  # the decided list names a payload we cannot get or that is invalid
)
MEMBERSHIP_CHANGES: tuple[str, ...] = ("warming", "activated", "dropped_missed", "left")
CONFLICT_KINDS: tuple[str, ...] = (
    "certificate",  # a quorum's signed precommits for another list: more than f peers lied
)


@dataclass(frozen=True)
class FetchPayload:
    """Pull these exact bytes from any of ``sources`` (in preference order) or any other holder, verify
    the hash, validate, then report with ``on_payload_validated`` / ``on_payload_invalid`` /
    ``on_payload_failed``.
    """

    step: int
    peer_id: str
    payload_hash: bytes
    payload_size: int | None
    sources: tuple[str, ...]


Published = Announcement | InclusionList | Vote | Status | Certificate


@dataclass(frozen=True)
class Publish:
    """Gossip ``message``: our proposal, our signed vote, our status for a new epoch, a certificate for a
    laggard (the machine
    already holds and counted them), or our announcement again because the round stalled and the first copy
    may have been lost. One action for every message we send, because the driver does the same with each.
    """

    message: Published


@dataclass(frozen=True)
class ApplyInclusionList:
    """Aggregate exactly these payloads (all fetched and validated) for ``step``; emitted in step order.

    ``majority_weights_hash`` is the weights hash a strict majority of the included peers announced (None if
    there is no strict majority): the hash a joiner or a resyncing peer must match.
    """

    step: int
    inclusion_list: InclusionList
    majority_weights_hash: bytes | None


@dataclass(frozen=True)
class PeerMissed:
    """An eligible roster peer is not in the decided list for ``step`` (feeds peer scores)."""

    step: int
    peer_id: str


@dataclass(frozen=True)
class MembershipChanged:
    """The replicated roster changed when ``step`` was decided.

    ``change`` is in :data:`MEMBERSHIP_CHANGES`.
    """

    step: int
    peer_id: str
    change: str


@dataclass(frozen=True)
class Penalize:
    """Evidence of a faulty or malicious peer; ``reason`` is in :data:`PENALTY_REASONS`."""

    peer_id: str
    step: int
    reason: str


@dataclass(frozen=True)
class ResyncNeeded:
    """Our state cannot be trusted or cannot progress: fetch weights (matching ``weights_hash`` when known)
    and a :class:`~distro_node.protocol.membership.SyncState` from peers, then call ``restore``.
    """

    step: int
    reason: str
    weights_hash: bytes | None


@dataclass(frozen=True)
class ListConflict:
    """Proof that a different list than ours was decided for ``step``: a certificate for it.

    Agreement makes this impossible while at most f of n >= 3f + 1 peers lie, so it says the run's trust
    assumption broke (or a bug): reported loudly, never answered with a resync, since neither side's word
    is better than the other's. ``kind`` is in :data:`CONFLICT_KINDS`.
    """

    step: int
    decided_digest: bytes
    other_digest: bytes
    evidence_from: str
    kind: str


@dataclass(frozen=True)
class RoundStalled:
    """Every leader had an epoch of ``step`` without a decision (typically no quorum: a partition).

    ``summary`` is what this replica knew of the round then (:meth:`RoundState.summary`): an operator
    reading the fault sees whether announcements, proposals, votes or statuses were missing.
    """

    step: int
    summary: str = field(default="", compare=False)


Action = (
    FetchPayload
    | Publish
    | ApplyInclusionList
    | PeerMissed
    | MembershipChanged
    | Penalize
    | ResyncNeeded
    | ListConflict
    | RoundStalled
)

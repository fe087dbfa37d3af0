"""Per-step bookkeeping of the round state machine, and the pure rules that read it.

Nothing here knows about time sources, the network or other steps: :mod:`.machine` drives it. Keeping the
epoch arithmetic and the list-building rule as pure functions makes them easy to test and to reason about.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from ..ballots import PREVOTE
from ..evidence import Equivocation
from ..inclusion_list import Endorsements
from ..membership import Roster
from ..messages import Announcement, InclusionList
from .inclusion_bound import select_included

PayloadKey = tuple[str, bytes]  # (peer_id, payload_hash)
Ballot = tuple[int, bytes]  # (epoch, list digest)
SignedBallot = tuple[int, bytes, bytes]  # (epoch, list digest, the voter's signature)


@dataclass
class RoundState:
    """Everything one replica knows about one step.

    Agreement state (:mod:`.agreement`): ``promised`` is the highest epoch we entered (we never vote below
    it); ``prevoted``/``precommitted`` the last epochs we cast each vote in; ``lock`` the ballot we last
    precommitted, ``valid`` the newest ballot we saw a quorum of prevotes for, with those prevotes
    (``valid_pol``); ``prevotes``/``precommits`` every peer's latest signed vote of each phase; ``statuses``
    every peer's latest status epoch; ``certificate`` the precommits that decided the step.
    """

    step: int
    first_seen: float | None = None
    frontier_since: float | None = None
    own: Announcement | None = None
    announcements: dict[str, Announcement] = field(default_factory=dict)
    equivocators: set[str] = field(default_factory=set)
    validated: set[PayloadKey] = field(default_factory=set)
    invalid: set[PayloadKey] = field(default_factory=set)
    fetch_requested_at: dict[PayloadKey, float] = field(default_factory=dict)
    # Agreement.
    contents: dict[bytes, InclusionList] = field(default_factory=dict)  # list digest -> first copy seen
    proposals: dict[tuple[int, str], bytes] = field(default_factory=dict)  # (epoch, leader) -> digest
    checked: set[tuple[int, str]] = field(default_factory=set)  # proposals already checked vs the roster
    below_quorum: set[bytes] = field(default_factory=set)  # list digests we refused for too few payloads
    forged: set[tuple[int, str]] = field(default_factory=set)  # (epoch, leader) whose list forged entries
    denied: set[str] = field(default_factory=set)  # authors that said they lack their own signed payload
    justifications: dict[tuple[int, str], tuple[int, Endorsements]] = field(default_factory=dict)  # pols
    promised: int = -1
    prevoted: int = -1
    precommitted: int = -1
    lock: Ballot | None = None
    valid: Ballot | None = None
    valid_pol: Endorsements = ()
    prevotes: dict[str, SignedBallot] = field(default_factory=dict)
    precommits: dict[str, SignedBallot] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    certificate: Endorsements = ()
    proposed_epoch: int = -1
    # Set when we jumped to a later epoch that peers already reached; our epoch clock restarts there.
    epoch_base: int = 0
    epoch_base_time: float | None = None
    answered_epoch: int = -1  # last epoch we answered a laggard's status in (decided steps)
    answered_at: float | None = None
    # Outcome.
    decided: InclusionList | None = None
    decided_digest: bytes | None = None
    decided_epoch: int | None = None
    decided_at: float | None = None
    conflict_reported: bool = False
    stalled: bool = False
    last_reannounce: float | None = None
    applied: bool = False
    unapplicable_reported: bool = False

    def see(self, now: float) -> None:
        if self.first_seen is None:
            self.first_seen = now

    @property
    def anchor(self) -> float | None:
        """When this round's clock started: first sign of the step, but never before the step became ours.

        Starting no earlier than "became the undecided step" keeps a round that was announced while its
        predecessor was still open from burning its epochs before anyone could act in them.
        """
        if self.first_seen is None or self.frontier_since is None:
            return None
        return max(self.first_seen, self.frontier_since)

    def epoch(self, now: float, collect_timeout: float, leader_timeout: float) -> int | None:
        """Our current epoch of this step (None before the round started here)."""
        if self.epoch_base_time is not None:
            return epoch_since(self.epoch_base, self.epoch_base_time, now, leader_timeout)
        anchor = self.anchor
        if anchor is None:
            return None
        return epoch_at(anchor, now, collect_timeout, leader_timeout)

    def next_epoch_at(self, epoch: int, collect_timeout: float, leader_timeout: float) -> float | None:
        """When epoch ``epoch + 1`` starts on our clock (None before the round started here)."""
        if self.epoch_base_time is not None:
            return epoch_start(self.epoch_base, self.epoch_base_time, epoch + 1, leader_timeout)
        anchor = self.anchor
        if anchor is None:
            return None
        first = epoch1_start(anchor, collect_timeout, leader_timeout)
        return first if epoch < 1 else epoch_start(1, first, epoch + 1, leader_timeout)

    def catch_up(self, epoch: int, now: float, collect_timeout: float, leader_timeout: float) -> None:
        """Jump to a later epoch a peer reached, restarting our epoch clock now.

        Without this, replicas whose rounds started at different times (a partition, a late decision of
        the previous step) sit in different epochs forever and no leader ever hears a majority of statuses
        for its own epoch. Restarting the clock on the jump lines everybody up within one gossip delay.
        """
        current = self.epoch(now, collect_timeout, leader_timeout)
        if current is not None and epoch <= current:
            return
        self.epoch_base = epoch
        self.epoch_base_time = now

    def summary(self, epoch: int) -> str:
        """One line on how far this round got here; peers and digests shortened to their last characters."""
        def peer(p: str) -> str:
            return p[-6:]

        proposals = ",".join(
            f"e{e}:{peer(leader)}:{d.hex()[:8]}" for (e, leader), d in sorted(self.proposals.items())
        )
        announced = sorted(peer(p) for p in self.announcements)
        votes = Counter(f"e{e}:{d.hex()[:8]}" for e, d, _sig in self.precommits.values())
        statuses = Counter(self.statuses.values())
        return (
            f"epoch {epoch} (promised {self.promised}); announced {announced}; "
            f"validated {len(self.validated)}, invalid {len(self.invalid)}; proposals [{proposals}]; "
            f"precommits {dict(votes)}; lock {self.lock[0] if self.lock else None}; "
            f"statuses by epoch {dict(sorted(statuses.items()))}; lists known {len(self.contents)}"
        )

    def payload_known(self, key: PayloadKey) -> bool:
        ann = self.announcements.get(key[0])
        return (ann is not None and ann.payload_hash == key[1]) or key in self.fetch_requested_at

    def votes_of(self, phase: int) -> dict[str, SignedBallot]:
        return self.prevotes if phase == PREVOTE else self.precommits

    def note_vote(self, phase: int, peer: str, vote: SignedBallot) -> bool:
        """Keep each peer's latest vote of a phase only: a later epoch supersedes, which bounds memory per
        peer (a quorum still forms, since honest peers vote in increasing epochs).

        Returns False if the peer already cast a different vote of this phase in the same epoch: it signed
        both, so that is equivocation.
        """
        votes = self.votes_of(phase)
        old = votes.get(peer)
        if old is None or vote[0] > old[0]:
            votes[peer] = vote
        return old is None or old[0] != vote[0] or old[1] == vote[1]

    def tally(self, phase: int, voters: Collection[str]) -> Counter[Ballot]:
        """How many of ``voters`` cast each ballot of ``phase`` (their latest vote only)."""
        return Counter((e, d) for p, (e, d, _sig) in self.votes_of(phase).items() if p in voters)

    def endorsements(self, phase: int, ballot: Ballot, voters: Collection[str]) -> Endorsements:
        """The signed votes of ``voters`` for exactly ``ballot``, in the canonical (sorted) form."""
        return tuple(sorted(
            (p, sig) for p, (e, d, sig) in self.votes_of(phase).items() if p in voters and (e, d) == ballot
        ))


# Epoch k >= 1 lasts min(k, EPOCH_GROWTH_CAP) leader timeouts.
EPOCH_GROWTH_CAP = 4


def epoch_length(epoch: int, leader_timeout: float) -> float:
    """Why epochs grow: with a fixed length, a swarm whose gossip delay has grown past one leader timeout (an
    overloaded peer, a congested uplink) never lets a leader hear a majority of statuses within its epoch,
    and every later epoch fails the same way. Longer epochs let the step decide once delays settle at any
    level below the cap; the cap bounds how long one silent leader can hold a step. Every replica derives
    the same length from the epoch number alone.
    """
    return leader_timeout * min(max(epoch, 1), EPOCH_GROWTH_CAP)


def epoch_start(base_epoch: int, base_time: float, epoch: int, leader_timeout: float) -> float:
    """When ``epoch`` starts on a clock where ``base_epoch`` started at ``base_time``."""
    t, k = base_time, base_epoch
    while k < min(epoch, EPOCH_GROWTH_CAP):  # at most EPOCH_GROWTH_CAP iterations
        t += epoch_length(k, leader_timeout)
        k += 1
    return t + max(0, epoch - k) * epoch_length(EPOCH_GROWTH_CAP, leader_timeout)


def epoch_since(base_epoch: int, base_time: float, now: float, leader_timeout: float) -> int:
    """The epoch at ``now`` on a clock where ``base_epoch`` started at ``base_time``."""
    t, k = base_time, base_epoch
    while k < EPOCH_GROWTH_CAP and now >= t + epoch_length(k, leader_timeout):
        t += epoch_length(k, leader_timeout)
        k += 1
    if k < EPOCH_GROWTH_CAP:
        return k
    return k + max(0, math.floor((now - t) / epoch_length(EPOCH_GROWTH_CAP, leader_timeout)))


def epoch1_start(anchor: float, collect_timeout: float, leader_timeout: float) -> float:
    """Epoch 0 (the best-ranked leader's) ends one leader timeout after the collect deadline."""
    return anchor + collect_timeout + leader_timeout


def epoch_at(anchor: float, now: float, collect_timeout: float, leader_timeout: float) -> int:
    """Epoch 0 lasts from the round's start until one leader timeout after the collect deadline; epoch k >= 1
    then lasts ``epoch_length(k)``. Time only drives liveness here, never safety.
    """
    first = epoch1_start(anchor, collect_timeout, leader_timeout)
    if now < first:
        return 0
    return epoch_since(1, first, now, leader_timeout)


def designated_leader(order: tuple[str, ...], epoch: int) -> str:
    """Leaders take epochs in rank order, cycling, so a stalled step keeps trying every leader in turn."""
    return order[epoch % len(order)]


def strict_majority(values: Iterable[bytes], total: int) -> bytes | None:
    """The value held by more than half of ``total`` voters, if any."""
    counts = Counter(values)
    if not counts:
        return None
    value, count = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
    return value if 2 * count > total else None


def roster_waiting(roster: Roster) -> dict[str, int]:
    """Each roster peer's rounds since it was last included: the priority :mod:`.inclusion_bound` reads."""
    return {p: e.waiting for p, e in roster.peers.items()}


def build_list(
    rnd: RoundState,
    roster: Roster,
    run_id: bytes,
    epoch: int,
    leader: str,
    left: Collection[str],
    max_joiners: int,
    max_peers: int,
    evidence: tuple[Equivocation, ...] = (),
    max_included: int = 0,
) -> InclusionList | None:
    """The list this replica would propose as leader, or None if it cannot reach a quorum of payloads.

    Included: active roster peers with a validated payload, no equivocation, and (when a strict majority of
    them agree) the majority weights hash, because a gradient taken on diverged weights is not the same
    update. Warming: other announcers on the majority weights whose payload we validated (what an identity
    costs: a host that serves what it signs), within the roster's newcomer room. Departed: roster
    peers whose goodbye we saw and that are not included. Evidence: the equivocation proofs we hold.
    Each entry carries its author's signature, copied from the announcement. Under a bound on inclusion,
    the included are the top ``max_included`` candidates by the replicated priority (:mod:`.inclusion_bound`).
    """
    candidates: dict[str, Announcement] = {}
    for peer in roster.eligible():
        ann = rnd.announcements.get(peer)
        if ann is None or peer in rnd.equivocators:
            continue
        key = (peer, ann.payload_hash)
        if key in rnd.invalid or key not in rnd.validated:
            continue
        candidates[peer] = ann
    majority = strict_majority((a.weights_hash for a in candidates.values()), len(candidates))
    if majority is not None:
        candidates = {p: a for p, a in candidates.items() if a.weights_hash == majority}
    included = select_included(run_id, rnd.step, roster_waiting(roster), candidates, max_included)
    departed = tuple(sorted(p for p in roster.peers if p in left and p not in included))
    if len(included) < roster.quorum_size(departed, max_included):
        return None
    warming: list[str] = []
    newcomers = 0
    room = roster.newcomer_room(max_joiners)
    for peer in sorted(rnd.announcements):
        ann = rnd.announcements[peer]
        if roster.is_eligible(peer) or peer in rnd.equivocators or peer in left or peer in departed:
            continue
        if majority is not None and ann.weights_hash != majority:
            continue
        if (peer, ann.payload_hash) not in rnd.validated:
            continue
        if peer not in roster:
            if newcomers >= room or len(roster) + newcomers >= max_peers:
                continue
            newcomers += 1
        warming.append(peer)
    return InclusionList(
        run_id=run_id,
        step=rnd.step,
        epoch=epoch,
        leader=leader,
        entries=tuple((p, candidates[p].payload_hash) for p in included),
        warming=tuple(warming),
        departed=departed,
        signatures=tuple(candidates[p].signature for p in included),
        evidence=evidence,
    )

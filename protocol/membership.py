"""Who takes part in a round: the replicated roster and the local liveness view.

Two views, on purpose:

* :class:`Roster` is *replicated* state. It changes only when a step's inclusion list is decided, by a pure
  function of the old roster and that list (:meth:`Roster.advance`). Honest replicas decide identical lists,
  so they hold identical rosters, and therefore rank leaders and count quorums identically. A roster built
  from each replica's own heartbeats would differ between replicas exactly when it matters (churn, lossy
  links) and two replicas could then disagree on who leads.
* :class:`~.liveness.LivenessView` (protocol/liveness.py) is *local*: heartbeats, goodbyes, last-seen
  times, reported progress. It only decides things where replicas may safely differ: whom to wait for before
  a deadline, and whether we fell behind.

Roster rules: the genesis peers start active. A newcomer enters when a leader lists it under ``warming`` (it
announced for that step) and becomes active after ``warmup_rounds`` such rounds; only active ("eligible")
peers may lead or be included. An active peer absent from ``max_missed_rounds`` consecutive decided lists is
dropped (crash); a peer the leader lists under ``departed`` (it said goodbye) is dropped at once. With a
bound on inclusion (``max_included``), only the peers whose turn it was (``due``, decided by
protocol/consensus/inclusion_bound.py) count a miss; every active peer left out waits one more round, and
that ``waiting`` count is what orders the next step's turns.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from .messages import MAX_LIST_PEERS, MAX_STEP, InclusionList, MessageError, check_peer_id


class MembershipError(ValueError):
    """A roster snapshot or a roster operation is invalid; ``reason`` is a short metric-safe label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class PeerStatus(StrEnum):
    ACTIVE = "active"
    WARMING = "warming"



def faults_tolerated(active: int) -> int:
    """f for ``active`` peers: the most Byzantine ones agreement survives (active >= 3f + 1)."""
    return max(0, (active - 1) // 3)


def vote_quorum(voters: int, faults: int) -> int:
    """ceil((voters + faults + 1) / 2): two such quorums share faults + 1 voters, so an honest one."""
    return (voters + faults) // 2 + 1

@dataclass(frozen=True)
class RosterEntry:
    status: PeerStatus
    # Rounds spent warming up (for WARMING peers); consecutive decided rounds missed (both statuses).
    warm_rounds: int = 0
    misses: int = 0
    # Decided rounds since an ACTIVE peer was last included: its priority under a bound on inclusion.
    waiting: int = 0


@dataclass(frozen=True)
class RosterRules:
    """The subset of the round config that roster transitions depend on: all replicas must share it."""

    warmup_rounds: int
    max_missed_rounds: int
    max_peers: int
    max_joiners_per_round: int
    max_included: int = 0  # the most payloads a list may include; 0: no bound


class Roster:
    """Immutable mapping peer id -> :class:`RosterEntry`; see the module docstring for the rules."""

    __slots__ = ("_eligible", "_peers")

    def __init__(self, peers: Mapping[str, RosterEntry]) -> None:
        self._peers: Mapping[str, RosterEntry] = MappingProxyType(dict(sorted(peers.items())))
        self._eligible = tuple(p for p, e in self._peers.items() if e.status is PeerStatus.ACTIVE)

    @classmethod
    def genesis(cls, peers: Collection[str]) -> Roster:
        """The founding peers of a run, all active (nobody can vouch for them, and nobody needs to)."""
        if not peers:
            raise MembershipError("empty", "a roster needs at least one peer")
        for p in peers:
            check_peer_id("peer_id", p)
        return cls({p: RosterEntry(PeerStatus.ACTIVE) for p in peers})

    @property
    def peers(self) -> Mapping[str, RosterEntry]:
        return self._peers

    def __contains__(self, peer_id: object) -> bool:
        return peer_id in self._peers

    def __len__(self) -> int:
        return len(self._peers)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Roster) and dict(self._peers) == dict(other._peers)

    def __hash__(self) -> int:
        return hash(tuple(self._peers.items()))

    def __repr__(self) -> str:
        return f"Roster({dict(self._peers)!r})"

    def eligible(self) -> tuple[str, ...]:
        """Active peers, sorted: the only ones that may lead or be included."""
        return self._eligible

    def is_eligible(self, peer_id: str) -> bool:
        entry = self._peers.get(peer_id)
        return entry is not None and entry.status is PeerStatus.ACTIVE

    def check_list(self, lst: InclusionList, rules: RosterRules) -> str | None:
        """Why ``lst`` breaks the roster rules for the step this roster governs, or None if it does not.

        Purely a function of the roster and the list, so every honest replica gives the same verdict.
        """
        if not self.is_eligible(lst.leader):
            return "leader is not an active roster peer"
        if 0 < rules.max_included < len(lst.entries):
            return f"{len(lst.entries)} entries exceed the bound of {rules.max_included}"
        for peer in lst.peers:
            if not self.is_eligible(peer):
                return f"included peer {peer!r} is not an active roster peer"
        newcomers = 0
        for peer in lst.warming:
            if self.is_eligible(peer):
                return f"warming peer {peer!r} is already active"
            if peer not in self._peers:
                newcomers += 1
        room = self.newcomer_room(rules.max_joiners_per_round)
        if newcomers > room:
            return f"{newcomers} newcomers exceed the room for {room} (per-round cap and warming share)"
        if len(self._peers) + newcomers > rules.max_peers:
            return f"roster would exceed {rules.max_peers} peers"
        for peer in lst.departed:
            if peer not in self._peers:
                return f"departed peer {peer!r} is not in the roster"
        return None

    def newcomer_room(self, per_round: int) -> int:
        """How many new peers a list may name as warming: at most ``per_round``, and no more than keeps the
        warming peers at a third of the active ones (at least one at a time).

        Why a share: identities are free in an open run, and a warming peer becomes a voter after its
        warm-up; with a fixed per-round cap alone, a crowd could outnumber the active peers within one
        warm-up. With the share, the roster grows by at most a third per warm-up period, each newcomer having
        served validated payloads every round of it.
        """
        warming = sum(1 for e in self._peers.values() if e.status is PeerStatus.WARMING)
        share = max(1, len(self._eligible) // 3)
        return max(0, min(per_round, share - warming))

    def quorum_size(self, departed: Collection[str] = (), max_included: int = 0) -> int:
        """Smallest strict majority of the active peers, not counting ``departed`` ones: how many payloads a
        list must include (:meth:`has_quorum`). Under a bound K below that, K: a list can hold no more, and
        the vote quorum alone already keeps a minority side from deciding (see :meth:`has_quorum`)."""
        voters = sum(1 for p in self._eligible if p not in departed)
        majority = voters // 2 + 1
        return min(majority, max_included) if max_included > 0 else majority

    def faults_tolerated(self) -> int:
        """f, the most Byzantine peers among the n active ones that agreement survives: n >= 3f + 1."""
        return faults_tolerated(len(self._eligible))

    def vote_quorum(self, departed: Collection[str] = ()) -> int:
        """How many signed votes decide: ceil((n' + f + 1) / 2), n' the active peers not ``departed``.

        Any two such quorums share at least f + 1 voters, so at least one honest one, and an honest voter
        never backs two lists (protocol/consensus/agreement.py): 2f + 1 of n = 3f + 1, a strict majority
        when f = 0. f comes from the whole active roster, so the quorums of two replicas of which only one
        saw a goodbye still share f + 1 voters; a peer that said goodbye leaves the count only where its
        (self-signed) goodbye was seen, and the roster at the next step.
        """
        voters = sum(1 for p in self._eligible if p not in departed)
        return vote_quorum(voters, self.faults_tolerated())

    def has_quorum(self, lst: InclusionList, known_left: Collection[str], max_included: int = 0) -> bool:
        """Partition rule: a list must include a strict majority of the active roster.

        Two sides of a partition cannot both hold a strict majority, so at most one side makes progress and
        the other applies nothing (threats.md N5). Peers the list calls departed leave the count only if we
        saw their goodbye ourselves: a leader cannot shrink the quorum by claiming departures, and a goodbye
        is signed by the peer that leaves.

        With a bound K below the majority, K entries suffice: the payload count then no longer tells the
        sides apart, but a decision still needs a vote quorum (more than half of the active roster), which
        a minority side cannot gather, so it still decides nothing.
        """
        departed = set(lst.departed) & set(known_left)
        return len(lst.entries) >= self.quorum_size(departed, max_included)

    def advance(
        self, lst: InclusionList, rules: RosterRules, due: Collection[str] | None = None
    ) -> tuple[Roster, tuple[tuple[str, str], ...], tuple[str, ...]]:
        """Roster for the next step after ``lst`` was decided.

        Returns ``(roster, changes, missed)``: ``changes`` are ``(peer_id, change)`` with change in
        ``round_actions.MEMBERSHIP_CHANGES``; ``missed`` are the active peers not included this step that
        were ``due`` (None: every peer is due, as without a bound on inclusion). An active peer left out
        while not due keeps its miss count and only waits one round more. Call only with a list that passed
        :meth:`check_list`.
        """
        included = set(lst.peers)
        warming = set(lst.warming)
        departed = set(lst.departed)
        new: dict[str, RosterEntry] = {}
        changes: list[tuple[str, str]] = []
        missed: list[str] = []
        for peer, entry in self._peers.items():
            if peer in departed:
                changes.append((peer, "left"))
                continue
            if peer in included:
                new[peer] = RosterEntry(PeerStatus.ACTIVE)
                continue
            if peer in warming:
                rounds = entry.warm_rounds + 1
                if rounds >= rules.warmup_rounds:
                    new[peer] = RosterEntry(PeerStatus.ACTIVE)
                    changes.append((peer, "activated"))
                else:
                    new[peer] = RosterEntry(PeerStatus.WARMING, warm_rounds=rounds)
                continue
            active = entry.status is PeerStatus.ACTIVE
            waiting = entry.waiting + 1 if active else 0
            if active and due is not None and peer not in due:
                new[peer] = RosterEntry(entry.status, misses=entry.misses, waiting=waiting)
                continue
            misses = entry.misses + 1
            if active:
                missed.append(peer)
            if misses >= rules.max_missed_rounds:
                changes.append((peer, "dropped_missed"))
            else:
                new[peer] = RosterEntry(entry.status, warm_rounds=entry.warm_rounds, misses=misses,
                                        waiting=waiting)
        for peer in sorted(warming - self._peers.keys()):
            if rules.warmup_rounds <= 1:
                new[peer] = RosterEntry(PeerStatus.ACTIVE)
                changes.append((peer, "activated"))
            else:
                new[peer] = RosterEntry(PeerStatus.WARMING, warm_rounds=1)
                changes.append((peer, "warming"))
        return Roster(new), tuple(changes), tuple(missed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "peers": [
                [p, e.status.value, e.warm_rounds, e.misses, e.waiting] for p, e in self._peers.items()
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Roster:
        """Strict inverse of :meth:`to_dict`, for rosters received from a state-sync donor."""
        if not isinstance(data, Mapping) or set(data.keys()) != {"peers"}:
            raise MembershipError("schema", "roster must be a mapping with exactly the key 'peers'")
        rows = data["peers"]
        if not isinstance(rows, list | tuple) or not 1 <= len(rows) <= MAX_LIST_PEERS:
            raise MembershipError("schema", f"roster peers must be a list of 1..{MAX_LIST_PEERS} rows")
        peers: dict[str, RosterEntry] = {}
        for i, row in enumerate(rows):
            if not isinstance(row, list | tuple) or len(row) != 5:
                raise MembershipError("schema", f"roster row {i} must be [peer_id, status, warm, misses, "
                                                f"waiting]")
            peer, status, warm, misses, waiting = row
            try:
                check_peer_id(f"roster[{i}]", peer)
            except MessageError as exc:
                raise MembershipError("schema", str(exc)) from exc
            if status not in (PeerStatus.ACTIVE.value, PeerStatus.WARMING.value):
                raise MembershipError("schema", f"roster row {i} has unknown status")
            for name, value in (("warm_rounds", warm), ("misses", misses), ("waiting", waiting)):
                if type(value) is not int or not 0 <= value <= 1_000_000:
                    raise MembershipError("schema", f"roster row {i} has a bad {name}")
            if peer in peers:
                raise MembershipError("schema", f"roster lists {peer!r} twice")
            peers[peer] = RosterEntry(PeerStatus(status), warm_rounds=warm, misses=misses, waiting=waiting)
        roster = cls(peers)
        if not roster.eligible():
            raise MembershipError("schema", "roster has no active peer")
        return roster


@dataclass(frozen=True)
class SyncState:
    """What a joiner or a resyncing peer adopts from a donor, next to the weights: the next undecided step
    and the roster that governs it. Check it against several donors (like the weights hash) before use.
    """

    next_step: int
    roster: Roster

    def to_dict(self) -> dict[str, Any]:
        return {"next_step": self.next_step, "roster": self.roster.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SyncState:
        if not isinstance(data, Mapping) or set(data.keys()) != {"next_step", "roster"}:
            raise MembershipError("schema", "sync state must have exactly 'next_step' and 'roster'")
        step = data["next_step"]
        if type(step) is not int or not 0 <= step <= MAX_STEP:
            raise MembershipError("schema", "next_step must be a non-negative int")
        return cls(next_step=step, roster=Roster.from_dict(data["roster"]))

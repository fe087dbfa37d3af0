"""Which snapshot a joiner or a resyncing peer may adopt: one that f + 1 peers of a roster it trusts describe
byte for byte alike.

Why f + 1 and not "the largest group": donors are strangers. A group of descriptions is only as good as the
peers in it, and ids cost nothing, so counting agreeing donors lets whoever runs the most identities choose
our weights. Counted against a roster we already trust, f + 1 agreeing donors include at least one honest
peer (the roster tolerates f liars), and an honest peer at a step boundary describes exactly the swarm's
state there: replicas are bit-identical, so its weights part, weights hash and round state are the same bytes
as every other honest peer's at that step.

Whose roster is trusted:

* a resyncing peer: its own round machine's roster (it was decided by its own rounds);
* a joiner of a permissioned run: the roster its donors' chains of attestations certify, checked link by
  link from the founder the manifest names (protocol/attestation.py, node/peer/trust_chain.py), so neither
  its bootstrap peer nor any other single donor chooses it. Such a roster vouches only for descriptions from
  its own step up to ``max_skip`` steps later (the chain's horizon);
* a joiner of an open run: the roster its bootstrap peer describes, the peer the user named beside the run
  id. An open run's manifest names no identity, so nothing else vouches for the peer the user chose: a lying
  bootstrap can still mislead such a joiner; a lying *other* donor, or any number of made-up identities,
  cannot, because they are not in that roster.

What is compared is :class:`SnapshotKey`: the step, the weights hash, a digest of the round state and the
weights part's description (size, chunk size, every chunk hash). So the bytes are attested too: a chunk that
does not match the attested description proves that the donor who served it lied (``node/peer/state_sync.py``
then stops trusting that donor), and the chunks can come from any donor in the group.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from distro_node.protocol.attestation import state_digest
from distro_node.protocol.membership import Roster
from distro_node.protocol.sync import PartInfo, SnapshotMeta
from libp2p.peer.id import ID


@dataclass(frozen=True)
class SnapshotKey:
    """What honest donors cut at the same boundary describe identically (the optimizer part is each peer's
    own and is not compared)."""

    step: int
    weights_hash: bytes
    state_digest: bytes
    weights_part: PartInfo

    @classmethod
    def of(cls, meta: SnapshotMeta) -> SnapshotKey:
        return cls(meta.step, meta.weights_hash, state_digest(meta.state), meta.parts["weights"])


@dataclass(frozen=True)
class TrustAnchor:
    """The roster whose peers' word counts, where it came from (said in errors and logs), and the steps it may
    vouch for (all, or from a chain link's step to ``last_step``)."""

    roster: Roster
    source: str
    first_step: int = 0
    last_step: int | None = None

    def covers(self, step: int) -> bool:
        return self.first_step <= step and (self.last_step is None or step <= self.last_step)

    @property
    def needed(self) -> int:
        """f + 1 of the anchor's active peers: at least one of them is honest."""
        return self.roster.faults_tolerated() + 1

    def attesters(self, donors: Iterable[ID]) -> list[str]:
        return sorted(str(d) for d in donors if self.roster.is_eligible(str(d)))


@dataclass(frozen=True)
class Attested:
    """A snapshot description enough trusted donors agree on."""

    meta: SnapshotMeta  # one of the agreeing descriptions (a trusted donor's, for the optimizer part)
    donors: tuple[ID, ...]  # every donor that described it, trusted ones first: where the bytes come from
    attesters: tuple[str, ...]


def choose_snapshot(
    metas: Sequence[tuple[ID, SnapshotMeta]], anchor: TrustAnchor
) -> tuple[Attested | None, str]:
    """The description attested by the most of the anchor's active peers (the later step on a tie), if they
    are at least f + 1; otherwise None and why, naming the best group's count."""
    groups: dict[SnapshotKey, list[tuple[ID, SnapshotMeta]]] = {}
    for donor, meta in metas:
        if "weights" in meta.parts and anchor.covers(meta.step):
            groups.setdefault(SnapshotKey.of(meta), []).append((donor, meta))
    if not groups:
        return None, f"no donor described a snapshot at a step {anchor.source} vouches for"
    scored = [(anchor.attesters(d for d, _ in members), key, members) for key, members in groups.items()]
    attesters, key, members = max(scored, key=lambda s: (len(s[0]), s[1].step))
    if len(attesters) < anchor.needed:
        return None, (f"the best snapshot (step {key.step}) was described by {len(attesters)} active "
                      f"peer(s) of {anchor.source}, {anchor.needed} needed")
    trusted = set(attesters)
    ordered = sorted(members, key=lambda dm: str(dm[0]) not in trusted)
    return Attested(ordered[0][1], tuple(d for d, _ in ordered), tuple(attesters)), ""


class UntrustedDonors:
    """Donors that served bytes contradicting what f + 1 trusted peers attested: never asked again by this
    process. Local, not a swarm ban: only we saw the bytes, and bans must come from what every replica shares
    (node/peer/bans.py). Bounded; the oldest entry goes first."""

    def __init__(self, cap: int = 1024, on_add: Callable[[str], None] | None = None) -> None:
        self._cap = cap
        self._on_add = on_add
        self._peers: dict[str, None] = {}

    def add(self, peer: str) -> None:
        if peer not in self._peers and self._on_add is not None:
            self._on_add(peer)
        self._peers.pop(peer, None)
        self._peers[peer] = None
        while len(self._peers) > self._cap:
            del self._peers[next(iter(self._peers))]

    def __contains__(self, peer: object) -> bool:
        return peer in self._peers

    def __len__(self) -> int:
        return len(self._peers)


__all__ = ["Attested", "SnapshotKey", "TrustAnchor", "UntrustedDonors", "choose_snapshot", "state_digest"]

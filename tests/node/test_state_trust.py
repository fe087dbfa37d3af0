"""Which snapshot a joiner or resyncing peer adopts (node/peer/state_trust.py): one that f + 1 active peers of
the roster it trusts describe byte for byte alike, however many others describe something else."""

from __future__ import annotations

import hashlib

import pytest
from distro_node.node.peer.state_trust import SnapshotKey, TrustAnchor, UntrustedDonors, choose_snapshot
from distro_node.protocol.membership import PeerStatus, Roster, RosterEntry, SyncState
from distro_node.protocol.sync import Snapshot, SnapshotMeta
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID


def ids(n: int) -> list[ID]:
    return [ID.from_pubkey(create_new_key_pair().public_key) for _ in range(n)]


HONEST = ids(4)  # a roster of 4 active peers tolerates f = 1 liar
SYBILS = ids(6)
ROSTER = Roster.genesis([str(p) for p in HONEST])
ANCHOR = TrustAnchor(ROSTER, "our own roster")


def meta(step: int = 7, weights: bytes = b"w" * 4000, roster: Roster = ROSTER,
         optim: bytes = b"o") -> SnapshotMeta:
    snap = Snapshot.build(step, hashlib.sha256(weights).digest(), SyncState(step, roster),
                          {"weights": weights, "optim": optim}, chunk_size=1000)
    return snap.meta


def test_f_plus_one_trusted_donors_attest_and_the_optimizer_part_is_not_compared() -> None:
    honest = meta()
    answers = [(HONEST[0], honest), (HONEST[1], meta(optim=b"other momentum"))]
    chosen, why = choose_snapshot(answers, ANCHOR)
    assert chosen is not None, why
    assert chosen.meta.step == 7 and set(chosen.attesters) == {str(HONEST[0]), str(HONEST[1])}
    assert ANCHOR.needed == 2
    one, why = choose_snapshot(answers[:1], ANCHOR)
    assert one is None and "1 active peer(s) of our own roster, 2 needed" in why


def test_any_number_of_strangers_and_one_roster_liar_cannot_outvote_two_honest_peers() -> None:
    forged_roster = Roster.genesis([str(p) for p in [HONEST[3], *SYBILS]])
    lie = meta(weights=b"z" * 4000, roster=forged_roster)
    answers = [(s, lie) for s in SYBILS] + [(HONEST[3], lie)]
    chosen, why = choose_snapshot(answers, ANCHOR)
    assert chosen is None and "1 active peer(s)" in why  # six strangers count for nothing
    answers += [(HONEST[0], meta()), (HONEST[1], meta())]
    chosen, _ = choose_snapshot(answers, ANCHOR)
    assert chosen is not None and chosen.meta.weights_hash == meta().weights_hash
    assert chosen.donors[:2] == (HONEST[0], HONEST[1])  # trusted donors first (the optimizer part's source)


def test_the_same_weights_with_another_roster_or_other_chunk_hashes_is_another_snapshot() -> None:
    other_roster = Roster({**ROSTER.peers, str(HONEST[2]): RosterEntry(PeerStatus.ACTIVE, misses=1)})
    assert SnapshotKey.of(meta()) != SnapshotKey.of(meta(roster=other_roster))
    rechunked = Snapshot.build(7, meta().weights_hash, SyncState(7, ROSTER), {"weights": b"w" * 4000},
                               chunk_size=500).meta
    assert SnapshotKey.of(meta()) != SnapshotKey.of(rechunked)
    answers = [(HONEST[0], meta()), (HONEST[1], meta(roster=other_roster))]
    assert choose_snapshot(answers, ANCHOR)[0] is None


def test_a_warming_peer_does_not_attest() -> None:
    roster = Roster({**ROSTER.peers, str(SYBILS[0]): RosterEntry(PeerStatus.WARMING, warm_rounds=1)})
    anchor = TrustAnchor(roster, "our own roster")
    answers = [(HONEST[0], meta(roster=roster)), (SYBILS[0], meta(roster=roster))]
    assert choose_snapshot(answers, anchor)[0] is None


@pytest.mark.parametrize("cap", [1, 3])
def test_untrusted_donors_are_bounded(cap: int) -> None:
    untrusted = UntrustedDonors(cap)
    for p in SYBILS:
        untrusted.add(str(p))
    assert len(untrusted) == cap and str(SYBILS[-1]) in untrusted and str(SYBILS[0]) not in untrusted

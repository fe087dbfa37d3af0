"""The pure parts of the test-only adversary's newer kinds (node/testbed/adversary_more.py): what a
``conflicting-claim`` publishes and how ``px-rewrite`` rewrites a reply. The kinds themselves run against
real daemons in tests/bench/test_bench_byzantine.py."""

from __future__ import annotations

import hashlib

from distro_node.node.testbed.adversary_more import BOGUS_PORT, _bogus, _claim
from distro_node.protocol.consensus.leader_rank import leader_order
from distro_node.protocol.identity import peer_id_of
from distro_node.protocol.messages import InclusionList
from libp2p.crypto.ed25519 import create_new_key_pair
from multiaddr import Multiaddr

RUN = hashlib.sha256(b"adversary kinds").digest()
PEERS = ("a", "b", "c", "d")


def decided(step: int, epoch: int) -> InclusionList:
    entries = tuple((p, hashlib.sha256(p.encode()).digest()) for p in PEERS)
    order = leader_order(RUN, step, PEERS)
    sigs = tuple(bytes([i]) * 64 for i in range(len(PEERS)))
    return InclusionList(RUN, step, epoch, order[epoch % 4], entries, signatures=sigs)


def test_a_claim_is_the_decided_list_less_one_entry_in_a_later_epoch_the_attacker_leads() -> None:
    lst = decided(5, 1)
    order = leader_order(RUN, 5, PEERS)
    me = order[1]  # it led the deciding epoch: the claim must be for a later one
    claim = _claim(lst, order, me)
    assert claim is not None and claim.leader == me and claim.epoch == 5 and claim.pol == ()
    assert claim.digest() != lst.digest() and len(claim.entries) == 3
    assert any(p == me for p, _ in claim.entries)  # it keeps its own entry
    signed = dict(zip(lst.entries, lst.signatures, strict=True))
    assert all(signed[e] == s for e, s in zip(claim.entries, claim.signatures, strict=True))  # still valid
    assert _claim(lst, order, "stranger") is None


def test_px_rewrite_turns_third_parties_to_a_closed_port_and_keeps_its_own_word() -> None:
    me, other = peer_id_of(create_new_key_pair()), peer_id_of(create_new_key_pair())
    own = Multiaddr(f"/ip4/127.0.0.1/tcp/4001/p2p/{me}")
    third = Multiaddr(f"/ip4/127.0.0.1/tcp/4002/p2p/{other}")
    assert _bogus(own, me) == own
    assert _bogus(third, me) == Multiaddr(f"/ip4/127.0.0.1/tcp/{BOGUS_PORT}/p2p/{other}")
    bare = Multiaddr("/ip4/127.0.0.1/tcp/4003")
    assert _bogus(bare, me) == bare

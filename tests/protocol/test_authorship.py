"""Payload authorship: signatures over (run, step, author, hash), checked at the gossip door; equivocation
proofs kept by the round machine, carried by lists, and turned into the same ban on every replica."""

from __future__ import annotations

import hashlib

import pytest
from distro_node.node.peer.bans import PeerBans
from distro_node.protocol.authorship import authorship_valid, sign_authorship
from distro_node.protocol.codec import CodecError, decode_signed, encode_message
from distro_node.protocol.consensus import Penalize, Publish
from distro_node.protocol.consensus.leader_rank import leader_order
from distro_node.protocol.evidence import Equivocation
from distro_node.protocol.identity import peer_id_of
from distro_node.protocol.messages import Announcement, InclusionList, Message, MessageError
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.keys import KeyPair
from protocol_swarm_sim import GENESIS_WEIGHTS, RUN_ID, SIG
from test_rounds import feed_all, machine, payload_hash, votes_from

OTHER_RUN = hashlib.sha256(b"another run").digest()


class Author:
    def __init__(self) -> None:
        self.keys: KeyPair = create_new_key_pair()
        self.id = str(peer_id_of(self.keys))

    def sign(self, step: int, payload_hash: bytes, run: bytes = RUN_ID) -> bytes:
        return sign_authorship(self.keys.private_key, run, step, self.id, payload_hash)

    def announce(self, step: int, payload_hash: bytes) -> Announcement:
        return Announcement(RUN_ID, step, self.id, payload_hash, 1000, GENESIS_WEIGHTS,
                            self.sign(step, payload_hash))


def h(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


def gossip(message: Message, signer: str) -> Message:
    """What a peer's validator makes of ``message`` published by ``signer``."""
    return decode_signed(encode_message(message), signer, RUN_ID)


def test_a_signature_names_exactly_one_run_step_author_and_hash() -> None:
    a, b = Author(), Author()
    sig = a.sign(3, h("x"))
    assert authorship_valid(RUN_ID, 3, a.id, h("x"), sig)
    assert not authorship_valid(OTHER_RUN, 3, a.id, h("x"), sig)
    assert not authorship_valid(RUN_ID, 4, a.id, h("x"), sig)
    assert not authorship_valid(RUN_ID, 3, a.id, h("y"), sig)
    assert not authorship_valid(RUN_ID, 3, b.id, h("x"), sig)
    assert not authorship_valid(RUN_ID, 3, a.id, h("x"), sig[:-1] + bytes([sig[-1] ^ 1]))
    for stranger in ("peerA", "", "1" * 60, "Qm" + "z" * 44):  # not a key, not base58, a hash-only id
        assert not authorship_valid(RUN_ID, 3, stranger, h("x"), sig)
    assert not authorship_valid(RUN_ID, 3, a.id, h("x"), sig[:32])


def test_the_gossip_door_refuses_an_announcement_its_author_did_not_sign() -> None:
    a, b = Author(), Author()
    good = a.announce(2, h("a2"))
    assert gossip(good, a.id) == good
    wrong = Announcement(RUN_ID, 2, a.id, h("a2"), 1000, GENESIS_WEIGHTS, b.sign(2, h("a2")))
    with pytest.raises(CodecError) as err:
        gossip(wrong, a.id)
    assert err.value.reason == "signature"
    replayed = Announcement(RUN_ID, 3, a.id, h("a2"), 1000, GENESIS_WEIGHTS, good.signature)  # other step
    with pytest.raises(CodecError) as err:
        gossip(replayed, a.id)
    assert err.value.reason == "signature"


def test_a_leader_cannot_put_a_hash_of_its_choosing_in_an_honest_entry() -> None:
    leader, honest = Author(), Author()
    authors = sorted([leader, honest], key=lambda x: x.id)
    genuine = tuple((x.id, h(x.id)) for x in authors)
    sigs = tuple(x.sign(5, h(x.id)) for x in authors)
    ok = InclusionList(RUN_ID, 5, 0, leader.id, genuine, signatures=sigs)
    assert gossip(ok, leader.id) == ok
    # The leader swaps the honest peer's hash for bytes of its own, signing the swap itself.
    forged_entries = tuple((p, h("negated") if p == honest.id else d) for p, d in genuine)
    forged_sigs = tuple(leader.sign(5, d) if p == honest.id else s
                        for (p, d), s in zip(forged_entries, sigs, strict=True))
    forged = InclusionList(RUN_ID, 5, 0, leader.id, forged_entries, signatures=forged_sigs)
    with pytest.raises(CodecError) as err:
        gossip(forged, leader.id)
    assert err.value.reason == "signature" and honest.id[-8:] in str(err.value)


def test_equivocation_proofs_are_checked_and_canonical() -> None:
    cheat, leader = Author(), Author()
    one, two = (h("p1"), cheat.sign(7, h("p1"))), (h("p2"), cheat.sign(7, h("p2")))
    proof = Equivocation.of(cheat.id, 7, two, one)
    assert proof == Equivocation.of(cheat.id, 7, one, two) and proof.first[0] < proof.second[0]
    with pytest.raises(MessageError):
        Equivocation.of(cheat.id, 7, one, one)  # the same payload twice proves nothing
    lst = InclusionList(RUN_ID, 8, 0, leader.id, (), evidence=(proof,))
    assert gossip(lst, leader.id) == lst
    # Only the author's own signatures prove anything: a leader cannot frame an honest peer.
    framed = Equivocation.of(cheat.id, 7, one, (h("p3"), leader.sign(7, h("p3"))))
    with pytest.raises(CodecError) as err:
        gossip(InclusionList(RUN_ID, 8, 0, leader.id, (), evidence=(framed,)), leader.id)
    assert err.value.reason == "signature"
    other_step = Equivocation(cheat.id, 6, proof.first, proof.second)  # signed for step 7, claimed for 6
    with pytest.raises(CodecError):
        gossip(InclusionList(RUN_ID, 8, 0, leader.id, (), evidence=(other_step,)), leader.id)
    assert lst.digest() != InclusionList(RUN_ID, 8, 0, leader.id, ()).digest()  # the ban is decided content


def test_a_list_entry_contradicting_an_announcement_is_kept_as_evidence_for_the_next_list() -> None:
    peers = ("a", "b", "c", "d")
    # A step whose leader differs from the next step's, so that we (the next step's) are not the first's.
    leaders = [leader_order(RUN_ID, step, peers)[0] for step in range(21)]
    k = next(k for k in range(20) if leaders[k] != leaders[k + 1])
    first, me = leaders[k], leaders[k + 1]
    cheat = next(p for p in peers if p not in (me, first))
    m = machine(me, step=k)
    feed_all(m, k, 0.0)
    # Step k's leader got another payload of `cheat`'s, also signed by it (the gossip door checked that).
    entries = tuple(sorted((p, payload_hash(p, k, 1 if p == cheat else 0)) for p in peers))
    lst = InclusionList(RUN_ID, k, 0, first, entries, signatures=(SIG,) * 4)
    out = m.on_message(lst, 0.1)
    assert Penalize(cheat, k, "equivocation") in out and m.counters["evidence_held"] == 1
    votes_from(m, lst, [p for p in peers if p != me], 0.2)
    assert m.next_step == k + 1  # decided as proposed: the proof was not in it, so it waits for our list
    out = feed_all(m, k + 1, 0.3)
    ours = [a.message for a in out if isinstance(a, Publish) and isinstance(a.message, InclusionList)]
    assert len(ours) == 1 and [e.peer for e in ours[0].evidence] == [cheat]
    proof = ours[0].evidence[0]
    assert {proof.first[0], proof.second[0]} == {payload_hash(cheat, k, 0), payload_hash(cheat, k, 1)}
    votes_from(m, ours[0], [p for p in peers if p != me], 0.4)
    assert m.next_step == k + 2 and m.decided_list(k + 1) == ours[0]


def test_every_replica_bans_an_equivocator_named_by_an_applied_list() -> None:
    replicas = [PeerBans() for _ in range(3)]
    results = [r.observe(4, {}, {}, [], ["cheat"]) for r in replicas]
    assert all([(b.peer, b.step, b.reason) for b in res.bans] == [("cheat", 4, "equivocation")]
               for res in results)
    assert all(r.is_banned("cheat") for r in replicas)
    assert all(r.observe(5, {}, {}, [], ["cheat"]).bans == () for r in replicas)  # once only

"""Chains of state attestations (protocol/attestation.py): a later roster is trusted only when f + 1 active
peers of an already-trusted roster signed its state, starting from the founder the manifest names; every way
a link can fail is a typed ChainError with its own reason."""

from __future__ import annotations

import hashlib

import msgpack
import pytest
from distro_node.protocol.attestation import (
    MAX_CHAIN_LINKS,
    ChainError,
    Link,
    TrustedRoster,
    attest,
    decode_chain,
    encode_chain,
    verify_chain,
    verify_link,
)
from distro_node.protocol.membership import Roster, SyncState
from distro_node.protocol.message_fields import Signer
from distro_node.protocol.signatures import signer_for
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID

RUN = hashlib.sha256(b"attestation chain").digest()
OTHER_RUN = hashlib.sha256(b"another run").digest()
SKIP = 1000


def keys(n: int) -> dict[str, Signer]:
    pairs = [create_new_key_pair() for _ in range(n)]
    return {str(ID.from_pubkey(k.public_key)): signer_for(k.private_key) for k in pairs}


FOUNDER = keys(1)
PEERS = keys(7)
NAMES = sorted(PEERS)
ROOT = TrustedRoster.root(next(iter(FOUNDER)))
EVERYONE = {**FOUNDER, **PEERS}


def link(step: int, members: list[str], signers: list[str], run_id: bytes = RUN) -> Link:
    state = SyncState(step, Roster.genesis(members))
    return Link(state, {p: attest(EVERYONE[p], run_id, state)[1] for p in signers})


def trusted(members: list[str], step: int = 10) -> TrustedRoster:
    return TrustedRoster(Roster.genesis(members), step, "a roster under test")


def test_the_founder_alone_certifies_any_step_and_f_plus_one_of_a_trusted_roster_the_next() -> None:
    founder = next(iter(FOUNDER))
    first = link(10, [founder, *NAMES[:3]], [founder])  # f = 0 at the root: the founder's signature suffices
    second = link(500, NAMES[:4], NAMES[1:3])  # f = 1 of the 4 active peers first certified: 2 of them
    tail = verify_chain(ROOT, [first, second], RUN, SKIP)
    assert tail.roster == second.state.roster and tail.step == 500
    assert verify_chain(ROOT, [], RUN, SKIP) == ROOT  # nothing certified yet: only the founder's word counts
    far = link(10**9, [founder], [founder])
    assert verify_chain(ROOT, [far], RUN, SKIP).step == 10**9  # the root has no horizon


def test_forged_signatures_are_refused() -> None:
    good = link(20, NAMES[:4], NAMES[:2])
    forged = Link(good.state, {NAMES[0]: good.signatures[NAMES[0]], NAMES[1]: bytes(64)})
    with pytest.raises(ChainError) as err:
        verify_link(trusted(NAMES[:4]), forged, RUN, SKIP)
    assert err.value.reason == "signature"
    other_state = link(20, NAMES[:5], NAMES[:2])  # signatures made for a different roster
    swapped = Link(good.state, dict(other_state.signatures))
    with pytest.raises(ChainError) as err:
        verify_link(trusted(NAMES[:4]), swapped, RUN, SKIP)
    assert err.value.reason == "signature"


def test_too_few_signers_are_refused() -> None:
    with pytest.raises(ChainError) as err:
        verify_link(trusted(NAMES[:4]), link(20, NAMES[:4], NAMES[:1]), RUN, SKIP)  # 1 of the 2 needed
    assert err.value.reason == "too_few"


def test_signers_outside_the_trusted_roster_do_not_count() -> None:
    """The liar's favourite: a link signed by peers of the roster it certifies, not of the trusted one."""
    liar = NAMES[0]
    sybils = NAMES[4:7]
    lie = link(20, [liar, *sybils], [liar, *sybils])
    with pytest.raises(ChainError) as err:
        verify_link(trusted(NAMES[:4]), lie, RUN, SKIP)
    assert err.value.reason == "outsider"
    warming = Roster.genesis(NAMES[:4]).to_dict()  # a warming peer of the trusted roster is no voucher either
    warming["peers"].append([NAMES[5], "warming", 1, 0, 0])
    anchor = TrustedRoster(Roster.from_dict(warming), 10, "with a warming peer")
    with pytest.raises(ChainError) as err:
        verify_link(anchor, link(20, NAMES[:4], [NAMES[0], NAMES[5]]), RUN, SKIP)
    assert err.value.reason == "outsider"


def test_a_link_must_follow_the_trusted_step_within_the_horizon() -> None:
    anchor = trusted(NAMES[:4], step=100)
    with pytest.raises(ChainError) as err:
        verify_link(anchor, link(100 + SKIP + 1, NAMES[:4], NAMES[:4]), RUN, SKIP)
    assert err.value.reason == "skip"
    assert verify_link(anchor, link(100 + SKIP, NAMES[:4], NAMES[:2]), RUN, SKIP).step == 100 + SKIP
    for step in (100, 99):
        with pytest.raises(ChainError) as err:
            verify_link(anchor, link(step, NAMES[:4], NAMES[:4]), RUN, SKIP)
        assert err.value.reason == "order"


def test_wrong_run_id_is_refused_in_the_bytes_and_in_the_signatures() -> None:
    chain = [link(20, NAMES[:4], NAMES[:4], run_id=OTHER_RUN)]
    with pytest.raises(ChainError) as err:
        decode_chain(encode_chain(OTHER_RUN, chain), RUN)
    assert err.value.reason == "run"
    relabelled = decode_chain(encode_chain(RUN, chain), RUN)  # signed for the other run: no valid signature
    with pytest.raises(ChainError) as err:
        verify_chain(trusted(NAMES[:4], step=0), relabelled, RUN, SKIP)
    assert err.value.reason == "signature"


def test_chain_bytes_round_trip_and_malformed_bytes_are_typed_errors() -> None:
    chain = (link(5, NAMES[:4], NAMES[:3]), link(9, NAMES[:5], NAMES[1:4]))
    assert decode_chain(encode_chain(RUN, chain), RUN) == chain
    good_link = chain[0].to_dict()
    bad_docs: list[object] = [
        {"run_id": RUN},
        {"run_id": RUN[:8], "links": []},
        {"run_id": RUN, "links": [{"state": good_link["state"]}]},
        {"run_id": RUN, "links": [{**good_link, "sigs": [[NAMES[0], b"short"]]}]},
        {"run_id": RUN, "links": [{**good_link, "sigs": [[NAMES[0], bytes(64)], [NAMES[0], bytes(64)]]}]},
        {"run_id": RUN, "links": [{**good_link, "sigs": [["not a peer id", bytes(64)]]}]},
        {"run_id": RUN, "links": [{**good_link, "state": {"next_step": -1, "roster": {"peers": []}}}]},
        [RUN, []],
    ]
    for doc in bad_docs:
        with pytest.raises(ChainError) as err:
            decode_chain(msgpack.packb(doc, use_bin_type=True), RUN)
        assert err.value.reason == "malformed", doc
    for raw in (b"\xc1", b"\xd4\x01\x00", b"\x92" * 10, b"\xdd\xff\xff\xff\xff"):  # bad, ext, short, huge
        with pytest.raises(ChainError) as err:
            decode_chain(raw, RUN)
        assert err.value.reason == "malformed"
    too_many = msgpack.packb({"run_id": RUN, "links": [good_link] * (MAX_CHAIN_LINKS + 1)}, use_bin_type=True)
    with pytest.raises(ChainError) as err:
        decode_chain(too_many, RUN)
    assert err.value.reason == "too_long"
    with pytest.raises(ChainError) as err:
        verify_chain(ROOT, [chain[0]] * (MAX_CHAIN_LINKS + 1), RUN, SKIP)
    assert err.value.reason == "too_long"

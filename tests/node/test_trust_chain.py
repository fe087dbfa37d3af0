"""What a peer keeps of the attestation chain (node/peer/trust_chain.py): it signs at active-set changes and
every few steps, keeps only the signatures that sign its own state, and keeps the chain minimal (a link that
verifies from an earlier roster drops the ones in between) and bounded."""

from __future__ import annotations

import hashlib

from distro_node.node.peer.trust_chain import ChainKeeper
from distro_node.protocol.attestation import Link, TrustedRoster, attest, verify_chain
from distro_node.protocol.membership import Roster, SyncState
from distro_node.protocol.message_fields import Signer
from distro_node.protocol.signatures import signer_for
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID

RUN = hashlib.sha256(b"trust chain keeper").digest()
EVERY = 50
SKIP = 200


def keys(n: int) -> dict[str, Signer]:
    pairs = [create_new_key_pair() for _ in range(n)]
    return {str(ID.from_pubkey(k.public_key)): signer_for(k.private_key) for k in pairs}


SIGNERS = keys(8)
FOUNDER, ME, *OTHERS = sorted(SIGNERS)


def keeper(me: str = ME) -> ChainKeeper:
    return ChainKeeper(run_id=RUN, self_id=me, root=TrustedRoster.root(FOUNDER), sign=SIGNERS[me],
                       attest_every=EVERY, max_skip=SKIP)


def state(step: int, members: list[str]) -> SyncState:
    return SyncState(step, Roster.genesis(members))


def sign_in(k: ChainKeeper, s: SyncState, signers: list[str]) -> None:
    for peer in signers:
        digest, sig = attest(SIGNERS[peer], RUN, s)
        assert k.add_signature(s.next_step, peer, digest, sig)


def test_attests_when_the_active_peers_change_and_every_few_steps_only() -> None:
    k = keeper()
    members = [FOUNDER, ME, *OTHERS[:2]]
    k.at_boundary(state(7, members))  # first boundary seen: attested
    k.at_boundary(state(8, members))  # nothing changed
    k.at_boundary(state(9, [*members, OTHERS[2]]))  # a peer became active
    k.at_boundary(state(EVERY, [*members, OTHERS[2]]))  # periodic
    assert [s for s in (7, 8, 9, EVERY) if k.own(s) is not None] == [7, 9, EVERY]


def test_the_founders_signature_collapses_the_chain_and_f_plus_one_extend_it_after_it_left() -> None:
    k = keeper()
    four = [FOUNDER, ME, *OTHERS[:2]]
    s10 = state(10, four)
    k.at_boundary(s10)
    assert k.chain() == ()  # our signature alone certifies nothing
    sign_in(k, s10, [FOUNDER])
    assert [x.step for x in k.chain()] == [10]
    s50 = state(50, four)
    k.at_boundary(s50)
    sign_in(k, s50, [FOUNDER])
    assert [x.step for x in k.chain()] == [50]  # verifies from the root: the step-10 link is not needed
    without = [ME, *OTHERS[:3]]  # the founder left, another peer is active
    s70 = state(70, without)
    k.at_boundary(s70)
    sign_in(k, s70, [OTHERS[0]])  # ours and one more: 2 of the 4 active at step 50 (f = 1)
    assert [x.step for x in k.chain()] == [50, 70]
    s100 = state(100, without)
    k.at_boundary(s100)
    sign_in(k, s100, [OTHERS[0]])  # verifies from step 50's roster too: the step-70 link goes
    assert [x.step for x in k.chain()] == [50, 100]
    assert verify_chain(TrustedRoster.root(FOUNDER), k.chain(), RUN, SKIP).step == 100
    s80 = state(80, without)
    k._own[80] = Link(s80, {ME: attest(SIGNERS[ME], RUN, s80)[1]})
    sign_in(k, s80, [OTHERS[0], OTHERS[1]])  # a late link for an older step never cuts a newer one
    assert [x.step for x in k.chain()] == [50, 100]


def test_only_signatures_over_our_own_state_are_kept() -> None:
    k = keeper()
    s = state(10, [FOUNDER, ME, *OTHERS[:2]])
    k.at_boundary(s)
    liar_state = state(10, [OTHERS[0], *OTHERS[4:6]])
    digest, sig = attest(SIGNERS[OTHERS[0]], RUN, liar_state)
    assert not k.add_signature(10, OTHERS[0], digest, sig)  # another state
    good_digest, _ = attest(SIGNERS[OTHERS[0]], RUN, s)
    assert not k.add_signature(10, OTHERS[0], good_digest, sig)  # our digest, signature over another
    assert not k.add_signature(11, OTHERS[0], good_digest, sig)  # a step we did not attest
    assert k.refused_signatures == 2 and k.chain() == ()


def test_a_newcomer_adopts_only_a_verified_chain_that_reaches_further() -> None:
    donor = keeper(OTHERS[0])
    s = state(10, [FOUNDER, ME, *OTHERS[:2]])
    donor.at_boundary(s)
    sign_in(donor, s, [FOUNDER])
    newcomer = keeper()
    forged = donor.chain()[0].with_signatures({FOUNDER: bytes(64)})
    assert not newcomer.adopt([forged]) and newcomer.chain() == ()
    assert newcomer.adopt(donor.chain()) and newcomer.chain() == donor.chain()
    assert not newcomer.adopt(donor.chain())  # not further than ours

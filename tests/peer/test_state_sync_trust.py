"""State sync between real hosts on loopback (node/peer/state_sync.py): a joiner adopts only what f + 1 peers
of the roster it trusts describe alike, whatever a liar and any number of Sybil donors say, and a donor that
serves bytes contradicting the attested description is never asked again (threats: poisoned state, a
newcomer handed the attacker's weights). A newcomer whose bootstrap peer is the liar is safe only with a
chain of attestations from the founder (a permissioned run, node/peer/trust_chain.py)."""

from __future__ import annotations

import hashlib
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

import pytest
import trio
from distro_node.node.peer.state_sync import SyncContext, sync_from_swarm
from distro_node.node.peer.state_trust import UntrustedDonors
from distro_node.node.peer.trust_chain import ChainKeeper
from distro_node.protocol.attestation import Link, TrustedRoster, attest
from distro_node.protocol.chain_rpc import ChainServer
from distro_node.protocol.host import P2PHost
from distro_node.protocol.membership import Roster, SyncState
from distro_node.protocol.rpc import RpcStatus
from distro_node.protocol.signatures import signer_for
from distro_node.protocol.sync import Snapshot, StateServer
from distro_node.protocol.testing import WAIT, connect_all_to, start_hosts
from libp2p.peer.id import ID

pytestmark = pytest.mark.network

RUN = hashlib.sha256(b"state sync trust").digest()
HONEST_WEIGHTS = b"honest weights " * 300  # several 1000-byte chunks, so every donor serves one
POISON = bytes(len(HONEST_WEIGHTS))


class WrongBytesServer(StateServer):
    """Describes the honest snapshot (so it is counted as an attester) but serves flipped chunk bytes."""

    async def _handle(self, remote: ID, body: bytes) -> tuple[RpcStatus, bytes]:
        status, reply = await super()._handle(remote, body)
        if status is RpcStatus.OK and b"chunk" in body:
            reply = bytes(b ^ 0xFF for b in reply)
        return status, reply


@dataclass
class Trainer:
    weights_hash: bytes = hashlib.sha256(b"a newcomer's own init").digest()
    loaded: bytes | None = None

    def load(self, weights: bytes, optim: bytes | None, max_bytes: int) -> bytes:
        self.loaded = weights
        self.weights_hash = hashlib.sha256(weights).digest()
        return self.weights_hash


class NoHeights:
    def highest_step(self, peer: str) -> int | None:
        return None


@dataclass(frozen=True)
class Limits:
    behind_steps: int = 8


@dataclass
class Machine:
    """What a resyncing peer's sync reads of its round machine."""

    roster: Roster
    liveness: NoHeights = field(default_factory=NoHeights)
    config: Limits = field(default_factory=Limits)


def snapshot(weights: bytes, roster: Roster) -> Snapshot:
    return Snapshot.build(9, hashlib.sha256(weights).digest(), SyncState(9, roster),
                          {"weights": weights, "optim": b"momentum"}, chunk_size=1000)


def serve(host: P2PHost, snap: Snapshot, server: type[StateServer] = StateServer) -> None:
    async def provide(remote: ID, genesis: bool) -> Snapshot:
        return snap

    server(host, RUN, provide).install()


@pytest.mark.parametrize("joiner", [True, False], ids=["newcomer", "resync"])
def test_a_liar_and_four_sybils_cannot_choose_the_state(joiner: bool) -> None:
    async def body() -> None:
        async with AsyncExitStack() as stack:
            me, bootstrap, honest, liar, wrong, *sybils = await stack.enter_async_context(start_hosts(9))
            roster = Roster.genesis([str(h.peer_id) for h in (bootstrap, honest, liar, wrong)])  # f = 1
            lie_roster = Roster.genesis([str(h.peer_id) for h in (liar, *sybils)])
            for host in (bootstrap, honest):
                serve(host, snapshot(HONEST_WEIGHTS, roster))
            serve(wrong, snapshot(HONEST_WEIGHTS, roster), WrongBytesServer)
            for host in (liar, *sybils):
                serve(host, snapshot(POISON, lie_roster))
            with trio.fail_after(WAIT):
                await connect_all_to([me, bootstrap, honest, liar, wrong, *sybils], me)
            trainer = Trainer()
            untrusted: list[str] = []
            ctx = SyncContext(host=me, run_id=RUN, max_state_bytes=1 << 20,
                              bootstrap=bootstrap.peer_id if joiner else None, trainer=trainer,
                              round_view=lambda: None if joiner else Machine(roster),  # type: ignore[arg-type,return-value]
                              untrusted=UntrustedDonors(on_add=untrusted.append))
            with trio.fail_after(4 * WAIT):
                state, how = await sync_from_swarm(ctx, genesis=False)
            assert trainer.loaded == HONEST_WEIGHTS and state == SyncState(9, roster), how
            assert ("the bootstrap peer's roster" if joiner else "our own roster") in how
            assert str(liar.peer_id) not in untrusted  # its lie was never attested, so never fetched
            assert set(untrusted) <= {str(wrong.peer_id)}
            if joiner:  # the same swarm, joined through the liar (sharing its 9 hosts saves ~10 s)
                await bootstrap_liar_syncs(me, bootstrap, [bootstrap, honest, wrong], liar, sybils, roster,
                                           lie_roster)

    trio.run(body)


def test_wrong_chunk_bytes_name_their_donor_and_the_rest_come_from_others() -> None:
    """The round-robin over three trusted donors asks the wrong-bytes one for a chunk: it is dropped, the
    chunk comes from another donor, and the weights are still the attested ones."""
    async def body() -> None:
        async with start_hosts(4) as (me, bootstrap, honest, wrong):
            roster = Roster.genesis([str(h.peer_id) for h in (bootstrap, honest, wrong)])  # f = 0: one donor
            for host in (bootstrap, honest):
                serve(host, snapshot(HONEST_WEIGHTS, roster))
            serve(wrong, snapshot(HONEST_WEIGHTS, roster), WrongBytesServer)
            with trio.fail_after(WAIT):
                await connect_all_to([me, bootstrap, honest, wrong], me)
            untrusted: list[str] = []
            trainer = Trainer()
            ctx = SyncContext(host=me, run_id=RUN, max_state_bytes=1 << 20, bootstrap=None, trainer=trainer,
                              round_view=lambda: Machine(roster),  # type: ignore[arg-type,return-value]
                              untrusted=UntrustedDonors(on_add=untrusted.append))
            for _ in range(5):  # which donors answer first varies; within five syncs it is asked for a chunk
                with trio.fail_after(4 * WAIT):
                    await sync_from_swarm(ctx, genesis=False)
                assert trainer.loaded == HONEST_WEIGHTS
                if untrusted:
                    break
            assert untrusted == [str(wrong.peer_id)]

    trio.run(body)


async def bootstrap_liar_syncs(me: P2PHost, founder: P2PHost, honest: list[P2PHost], liar: P2PHost,
                               sybils: list[P2PHost], roster: Roster, lie_roster: Roster) -> None:
    """Now the bootstrap peer itself is the liar, its four Sybils describing its lie alike. In a permissioned
    run the honest donors' chain, checked from the founder the manifest names, certifies the real roster, so
    the lie has no attester that counts; the liar's own chain, signed by itself and its Sybils, verifies
    nothing. Without a chain (an open run, whose manifest names no root; the old rule) the bootstrap's word is
    all a newcomer has, and the same swarm hands it the lie: what docs/architecture.md says an open run
    cannot prevent."""
    names = {h: str(h.peer_id) for h in (founder, liar, *honest, *sybils)}
    certified = SyncState(5, roster)
    honest_chain = (Link(certified, {names[founder]: sign(founder, certified)}),)
    lie_state = SyncState(5, lie_roster)
    lie_chain = (Link(lie_state, {names[h]: sign(h, lie_state) for h in (liar, *sybils)}),)
    for host in honest:
        serve_chain(host, honest_chain)
    for host in (liar, *sybils):
        serve_chain(host, lie_chain)
    keeper = ChainKeeper(run_id=RUN, self_id=str(me.peer_id), root=TrustedRoster.root(names[founder]),
                         sign=signer_for(me.key_pair.private_key), attest_every=10, max_skip=100)
    for chain in (keeper, None):
        trainer = Trainer()
        ctx = SyncContext(host=me, run_id=RUN, max_state_bytes=1 << 20, bootstrap=liar.peer_id,
                          trainer=trainer, round_view=lambda: None, chain=chain)
        with trio.fail_after(4 * WAIT):
            state, how = await sync_from_swarm(ctx, genesis=True)
        if chain is None:
            assert trainer.loaded == POISON and "the bootstrap peer's roster" in how
            continue
        assert trainer.loaded == HONEST_WEIGHTS and state == SyncState(9, roster), how
        assert "the roster the chain certifies at step 5" in how
        assert keeper.chain() == honest_chain  # kept, and served on to later newcomers


def sign(host: P2PHost, state: SyncState) -> bytes:
    return attest(signer_for(host.key_pair.private_key), RUN, state)[1]


def serve_chain(host: P2PHost, chain: tuple[Link, ...]) -> None:
    ChainServer(host, RUN, own=lambda step: None, chain=lambda: chain, admit=lambda peer, op: True).install()


def test_a_genesis_joiner_takes_the_founders_answer_without_waiting_for_a_peer_already_in_step_0() -> None:
    """A genesis peer already running step 0 holds a state request until its next boundary, which step 0
    cannot reach without the joiner: the founder's genesis answer must end the wait, not that peer's timeout
    (once a 30 s stall at the start of a 4-peer run)."""
    async def body() -> None:
        async with start_hosts(4) as (me, founder, running, late):
            trainer = Trainer()
            roster = Roster.genesis([str(h.peer_id) for h in (me, founder, running, late)])  # f = 1
            genesis = Snapshot.build(0, trainer.weights_hash, SyncState(0, roster), {"weights": b""})
            serve(founder, genesis)
            never = trio.Event()

            async def hold(remote: ID, is_genesis: bool) -> Snapshot | None:
                await never.wait()
                return None

            StateServer(running, RUN, hold).install()
            with trio.fail_after(WAIT):
                await connect_all_to([me, founder, running], me)
            ctx = SyncContext(host=me, run_id=RUN, max_state_bytes=1 << 20, bootstrap=founder.peer_id,
                              trainer=trainer, round_view=lambda: None)
            with trio.fail_after(WAIT):
                state, how = await sync_from_swarm(ctx, genesis=True)
            assert (state, how) == (SyncState(0, roster), "genesis")
            assert trainer.loaded is None  # nothing moved: the joiner built these weights itself

    trio.run(body)

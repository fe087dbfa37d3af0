"""State requests through the gate (node/peer/state_gate.py) between real hosts on loopback: a banned peer
gets nothing, and anyone gets a few snapshot descriptions at once, then one per interval, so no connected
host can make a node cut snapshot after snapshot."""

from __future__ import annotations

import hashlib

import pytest
import trio
from distro_node.node.peer.state_gate import (
    CHUNK_BURST,
    CHUNKS_PER_S,
    META_BURST,
    META_INTERVAL_S,
    StateRequestGate,
)
from distro_node.protocol.host import P2PHost
from distro_node.protocol.membership import Roster, SyncState
from distro_node.protocol.rpc import RpcRefusedError, RpcStatus
from distro_node.protocol.sync import Snapshot, StateServer, fetch_meta
from distro_node.protocol.testing import WAIT, connect_all_to, start_hosts
from libp2p.peer.id import ID

pytestmark = pytest.mark.network

RUN = hashlib.sha256(b"state gate").digest()


class Bans:
    def __init__(self) -> None:
        self.banned: set[str] = set()

    def is_banned(self, peer: str) -> bool:
        return peer in self.banned


def test_snapshot_descriptions_are_rate_limited_per_peer_and_refused_to_banned_ones() -> None:
    clock = [0.0]
    bans = Bans()
    gate = StateRequestGate(bans, lambda: clock[0])
    cuts: list[str] = []

    async def provide(remote: ID, genesis: bool) -> Snapshot:
        cuts.append(str(remote))
        return Snapshot.build(3, bytes(32), SyncState(3, Roster.genesis(("a", "b"))), {"weights": b"w" * 100})

    async def body() -> None:
        async with start_hosts(3) as (donor, asker, other):
            StateServer(donor, RUN, provide, admit=gate).install()
            with trio.fail_after(WAIT):
                await connect_all_to([donor, asker, other], donor)

            async def meta(host: P2PHost) -> int:
                try:
                    await fetch_meta(host, donor.peer_id, RUN, genesis=False, timeout=WAIT,
                                     max_state_bytes=1 << 20)
                except RpcRefusedError as exc:
                    return exc.status
                return RpcStatus.OK

            with trio.fail_after(WAIT):
                got = [await meta(asker) for _ in range(META_BURST + 2)]
                assert got == [RpcStatus.OK] * META_BURST + [RpcStatus.BUSY] * 2
                assert await meta(other) == RpcStatus.OK  # each peer has its own budget
                clock[0] += META_INTERVAL_S
                assert await meta(asker) == RpcStatus.OK
                bans.banned.add(str(other.peer_id))
                assert await meta(other) == RpcStatus.BUSY
            assert len(cuts) == META_BURST + 2 and gate.refused == 3
            assert gate.refusals() == {"state_meta": 3}  # /metrics: distro_requests_refused_total

    trio.run(body)


def test_chunks_come_in_a_burst_then_at_the_chunk_rate() -> None:
    clock = [0.0]
    gate = StateRequestGate(Bans(), lambda: clock[0])
    asker, other = ID(b"asker"), ID(b"other")
    assert all(gate(asker, "chunk") for _ in range(CHUNK_BURST))
    assert not gate(asker, "chunk") and gate(other, "chunk")
    clock[0] += 1.0
    granted = sum(gate(asker, "chunk") for _ in range(2 * int(CHUNKS_PER_S)))
    assert granted == int(CHUNKS_PER_S)

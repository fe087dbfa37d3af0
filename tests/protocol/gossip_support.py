"""Real loopback hosts on one run's gossip topic, and a spy on what their routers send, for the gossip
tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import pytest
from distro_node.protocol.gossip import AnnouncementChannel, open_gossip
from distro_node.protocol.gossip_config import GossipConfig
from distro_node.protocol.gossip_router import RunRouter
from distro_node.protocol.host import P2PHost
from distro_node.protocol.testing import WAIT, start_hosts, wait_until
from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import GossipSub
from libp2p.pubsub.pb import rpc_pb2

RUN = bytes.fromhex("ab" * 32)

Sent = tuple[GossipSub, ID, rpc_pb2.RPC]


@asynccontextmanager
async def star(count: int, config: GossipConfig | None = None, *, spokes_linked: bool = False
               ) -> AsyncIterator[tuple[list[P2PHost], list[AnnouncementChannel]]]:
    """Host 0 linked to every other (and, with ``spokes_linked``, every host to every other); each spoke's
    mesh holds the hub before the block runs."""
    async with start_hosts(count) as hosts, AsyncExitStack() as stack:
        chans = [await stack.enter_async_context(open_gossip(h, RUN, config=config)) for h in hosts]
        hub, spokes = hosts[0], hosts[1:]
        for i, host in enumerate(spokes):
            await hub.connect(host.peer_id, host.addrs())
            for other in spokes[i + 1:] if spokes_linked else ():
                await host.connect(other.peer_id, other.addrs())
        for chan, host in zip(chans, hosts, strict=True):
            await chan.wait_for_subscribers(set(host.connected_peers()), timeout=WAIT)
        for chan in chans[1:]:
            mesh = router(chan).mesh
            await wait_until(lambda mesh=mesh, topic=chan.topic: hub.peer_id in mesh.get(topic, ()),
                             "each spoke meshes with the hub")
        yield hosts, chans


def sent_rpcs(monkeypatch: pytest.MonkeyPatch) -> list[Sent]:
    """Every RPC the routers send from here on, with the router and the peer, as it goes out (after
    LeanGossip's cuts)."""
    sent: list[Sent] = []
    original = GossipSub.send_rpc

    def spy(self: GossipSub, peer_id: ID, rpc: rpc_pb2.RPC, priority: bool = False) -> None:
        copy = rpc_pb2.RPC()
        copy.CopyFrom(rpc)
        sent.append((self, peer_id, copy))
        original(self, peer_id, rpc, priority)

    monkeypatch.setattr(GossipSub, "send_rpc", spy)
    return sent


def router(chan: AnnouncementChannel) -> RunRouter:
    found = chan._pubsub.router
    assert isinstance(found, RunRouter)
    return found

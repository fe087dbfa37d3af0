"""Members first in the gossip mesh (protocol/gossip_router.py), with real hosts on loopback in a star around
one hub: strangers crowding the hub's mesh make way for the run's members, and the hub's own messages reach
every member even when the mesh does not hold it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import pytest
import trio
from distro_node.protocol.gossip import AnnouncementChannel, open_gossip
from distro_node.protocol.gossip_config import GossipConfig
from distro_node.protocol.gossip_router import RunRouter
from distro_node.protocol.host import P2PHost
from distro_node.protocol.testing import WAIT, start_hosts, wait_until
from libp2p.peer.id import ID

RUN = bytes.fromhex("cd" * 32)


@asynccontextmanager
async def hub_with(
    count: int, hub_config: GossipConfig
) -> AsyncIterator[tuple[list[P2PHost], list[AnnouncementChannel]]]:
    """Host 0 is the hub (its own gossip config); the others start unconnected, subscribed."""
    async with start_hosts(count) as hosts, AsyncExitStack() as stack:
        chans = [await stack.enter_async_context(open_gossip(h, RUN, config=hub_config if i == 0 else None))
                 for i, h in enumerate(hosts)]
        yield hosts, chans


def _router(chan: AnnouncementChannel) -> RunRouter:
    router = chan._pubsub.router
    assert isinstance(router, RunRouter)
    return router


async def _link(hub: P2PHost, hub_chan: AnnouncementChannel, spokes: list[P2PHost],
                spoke_chans: list[AnnouncementChannel]) -> None:
    for host in spokes:
        await hub.connect(host.peer_id, host.addrs())
    await hub_chan.wait_for_subscribers({h.peer_id for h in spokes}, timeout=WAIT)
    for chan in spoke_chans:
        await chan.wait_for_subscribers({hub.peer_id}, timeout=WAIT)


@pytest.mark.network
def test_strangers_in_the_mesh_make_way_for_members() -> None:
    async def body() -> None:
        cfg = GossipConfig(degree=2, degree_low=1, degree_high=3)
        async with hub_with(7, cfg) as (hosts, chans):
            hub, strangers, members = hosts[0], hosts[1:5], hosts[5:]
            member_ids = {str(h.peer_id) for h in members}
            chans[0].prefer_members(lambda: member_ids)
            router = _router(chans[0])
            mesh = router.mesh[chans[0].topic]
            await _link(hub, chans[0], strangers, chans[1:5])
            # One stranger seated is enough for the point (members evict strangers); how many of the four
            # get a seat depends on how their GRAFTs and the hub's cross, which a busy machine reorders.
            await wait_until(lambda: len(mesh) >= 1,
                             "a stranger takes a seat in the hub's mesh, no member there yet")
            await _link(hub, chans[0], members, chans[5:])
            await wait_until(lambda: {str(p) for p in mesh} == member_ids, "the members take the whole mesh")
            # The same when one member's GRAFT reached the hub before its heartbeat (likelier on a busy
            # machine): it sits beside two strangers, a mesh of 3 within degree_high, and both make way.
            mesh.clear()
            mesh.update({strangers[0].peer_id, strangers[1].peer_id, members[0].peer_id})
            router.mesh_heartbeat()  # no await since the line above: nothing else ran in between
            assert {str(p) for p in mesh} == member_ids
            await chans[0].publish(b"vote")
            for chan in chans[5:]:
                with trio.fail_after(WAIT):
                    assert (await chan.receive()).data == b"vote"
            assert {str(p) for p in mesh} == member_ids

    trio.run(body)


@pytest.mark.network
def test_own_messages_reach_members_outside_the_mesh() -> None:
    """No heartbeat after the first (interval 1000 s), so nothing but a direct send reaches a member that is
    not in the hub's mesh: the flood publish of our own messages is what delivers it."""

    async def body() -> None:
        cfg = GossipConfig(degree=1, degree_low=1, degree_high=2, heartbeat_interval=1000)
        async with hub_with(3, cfg) as (hosts, chans):
            hub, members = hosts[0], hosts[1:]
            chans[0].prefer_members(lambda: {str(h.peer_id) for h in members})
            await _link(hub, chans[0], members, chans[1:])
            mesh = _router(chans[0]).mesh[chans[0].topic]
            mesh.difference_update({ID(m.peer_id.to_bytes()) for m in members})
            await chans[0].publish(b"announce")
            for chan in chans[1:]:
                with trio.fail_after(WAIT):
                    assert (await chan.receive()).data == b"announce"

    trio.run(body)


@pytest.mark.network
def test_without_members_named_the_mesh_is_plain_gossipsub() -> None:
    """Before start-up knows its roster, strangers are grafted as any subscriber would be."""

    async def body() -> None:
        cfg = GossipConfig(degree=2, degree_low=1, degree_high=3)
        async with hub_with(4, cfg) as (hosts, chans):
            await _link(hosts[0], chans[0], hosts[1:], chans[1:])
            mesh = _router(chans[0]).mesh[chans[0].topic]
            await wait_until(lambda: len(mesh) >= 2, "the hub grafts subscribers")

    trio.run(body)


@pytest.mark.network
def test_heartbeat_and_degrees_stay_as_configured_after_the_health_check() -> None:
    """py-libp2p rescores the mesh every 30 s and, left to it, turned a 1 s heartbeat into 60 s; the health
    timer is moved back here so that check falls on the next heartbeat instead of 30 s from now."""

    async def body() -> None:
        cfg = GossipConfig()
        async with hub_with(4, cfg) as (hosts, chans):
            await _link(hosts[0], chans[0], hosts[1:], chans[1:])
            router = _router(chans[0])
            router.last_health_update = 0
            seen = router.heartbeats
            await wait_until(lambda: router.heartbeats >= seen + 2, "two heartbeats after the health timer")
            assert router.heartbeat_interval == cfg.heartbeat_interval
            assert (router.degree_low, router.degree_high) == (cfg.degree_low, cfg.degree_high)

    trio.run(body)

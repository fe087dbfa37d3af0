"""A slow uplink keeps a small gossip mesh (protocol/gossip_degree.py): the rule on the testbed's mixed
lines, its hysteresis, and a real router pruning its mesh to the smaller degree."""

from __future__ import annotations

from contextlib import AsyncExitStack

import pytest
import trio
from distro_node.protocol.gossip import GossipConfig, open_gossip
from distro_node.protocol.gossip_degree import MeshDegree, UplinkDegree
from distro_node.protocol.testing import start_hosts, wait_until
from libp2p.pubsub.gossipsub import GossipSub

RUN = bytes.fromhex("cd" * 32)
NORMAL = MeshDegree(3, 4, 8)
# Per-piece rates a peer's fetches measure on the testbed's mixed lines (bytes/s, 2 upload slots): gigabit
# holders held back by the fetcher's own downlink, 100/10 holders at half their uplink, 20/2 at half theirs.
SLOW_VIEW = [2 * r for r in (625e3, 625e3, 625e3, 625e3, 625e3 / 4, 125e3 / 8)]
HOME_VIEW = [2 * r for r in (1.5e6, 1.5e6, 625e3, 625e3, 125e3 / 8, 125e3 / 8)]


def test_a_2_mbit_uplink_among_faster_lines_keeps_a_mesh_of_two_and_a_10_mbit_one_does_not() -> None:
    slow = UplinkDegree(NORMAL, slow_degree=2, ratio=0.5)
    assert slow.update(250e3, SLOW_VIEW) == MeshDegree(1, 2, 2)
    home = UplinkDegree(NORMAL, slow_degree=2, ratio=0.5)
    assert home.update(1.25e6, HOME_VIEW) == NORMAL
    # As the testbed's peers read them at a quarter of the rates (gossip_degree.py's docstring).
    assert UplinkDegree(NORMAL, 2, 0.5).update(83e3, [252e3] * 6) == MeshDegree(1, 2, 2)
    assert UplinkDegree(NORMAL, 2, 0.5).update(604e3, [237e3] * 6) == NORMAL


def test_equal_lines_are_not_slow_even_when_ours_reads_half() -> None:
    assert UplinkDegree(NORMAL, 2, 0.5).update(1.25e6 / 2 + 1, [1.25e6] * 7) == NORMAL


def test_the_degree_changes_back_only_well_past_the_line() -> None:
    rule = UplinkDegree(NORMAL, slow_degree=2, ratio=0.5)
    peers = [3e6] * 5
    assert rule.update(1.4e6, peers) == MeshDegree(1, 2, 2)  # under half of 3 MB/s
    assert rule.update(2.5e6, peers) == MeshDegree(1, 2, 2)  # over half, under the median: stays
    assert rule.update(3.1e6, peers) == NORMAL
    assert rule.update(2.5e6, peers) == NORMAL  # and back only under half again
    assert rule.update(None, peers) == NORMAL and rule.update(0.1, []) == NORMAL  # nothing measured


def test_off_and_bad_settings() -> None:
    assert UplinkDegree(NORMAL, slow_degree=0, ratio=0.5).update(1.0, [1e9]) == NORMAL
    with pytest.raises(ValueError, match="ratio"):
        UplinkDegree(NORMAL, slow_degree=2, ratio=0.6)
    with pytest.raises(ValueError, match="slow_uplink_degree"):
        GossipConfig(slow_uplink_degree=5)
    with pytest.raises(ValueError, match="slow_uplink_ratio"):
        GossipConfig(slow_uplink_ratio=0.0)
    with pytest.raises(ValueError, match="uplink_check_interval"):
        GossipConfig(uplink_check_interval=0.0)


@pytest.mark.network
def test_a_peer_that_finds_its_uplink_slow_prunes_its_mesh_to_two() -> None:
    config = GossipConfig(uplink_check_interval=0.2)

    async def body() -> None:
        async with start_hosts(5) as hosts, AsyncExitStack() as stack:
            chans = [await stack.enter_async_context(open_gossip(h, RUN, config=config)) for h in hosts]
            hub = hosts[0]
            for host in hosts[1:]:
                await hub.connect(host.peer_id, host.addrs())
            router = chans[0]._pubsub.router
            assert isinstance(router, GossipSub)
            mesh = lambda: len(router.mesh.get(chans[0].topic, ()))  # noqa: E731
            await wait_until(lambda: mesh() >= 3, "the hub meshes with 3 or more")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(chans[0].follow_uplink, lambda: 1e3, lambda: [1e6] * 4)
                await wait_until(lambda: mesh() <= 2, "the hub's heartbeat prunes its mesh to 2")
                assert router.degree == 2
                nursery.cancel_scope.cancel()

    trio.run(body)

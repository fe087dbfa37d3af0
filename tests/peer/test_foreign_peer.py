"""A libp2p peer that speaks none of our protocols joins a real daemon's run topic and gossips garbage: the
daemon keeps training, logs no ERROR line (it never asks that peer for a /distro/ protocol once identify has
listed what the peer speaks), and counts every refused message by reason in
``distro_gossip_rejected_total``."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio
from distro_node.protocol.gossip_config import announce_topic
from distro_node.protocol.testing import WAIT
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11, GossipSub
from libp2p.pubsub.pubsub import Pubsub
from libp2p.tools.anyio_service import background_trio_service
from multiaddr import Multiaddr
from peer_procs import Procs, gossip_rejected

pytestmark = [pytest.mark.network, pytest.mark.timeout(180)]

RUN = ["--preset", "tiny", "--batch-size", "4", "--seq-len", "32", "--log-level", "info"]
GARBAGE = 20


async def _gossip_garbage(addr: str, run_id: bytes, while_connected: Callable[[], object]) -> None:
    """A bare py-libp2p host (its default protocols only) with py-libp2p's own gossipsub on the run's topic
    publishes messages that are not ours, then stays connected until ``while_connected`` (run in a thread)
    returns, and disconnects before its pubsub stops (py-libp2p raises from a stopped pubsub that still
    receives)."""
    peer_id_text = addr.rsplit("/p2p/", 1)[1]
    target = ID.from_base58(peer_id_text)
    transport = Multiaddr(addr.rsplit("/p2p/", 1)[0])
    bare = new_host(key_pair=create_new_key_pair())
    router = GossipSub(protocols=[PROTOCOL_ID_V11], degree=2, degree_low=1, degree_high=4)
    pubsub = Pubsub(bare, router)
    topic = announce_topic(run_id)
    async with bare.run(listen_addrs=[Multiaddr("/ip4/127.0.0.1/tcp/0")]):
        async with background_trio_service(pubsub), background_trio_service(router):
            await pubsub.wait_until_ready()
            await pubsub.subscribe(topic)
            with trio.fail_after(WAIT):
                await bare.connect(PeerInfo(target, [transport]))
                await pubsub.wait_for_subscription(target, topic, timeout=WAIT)
            for i in range(GARBAGE):
                await pubsub.publish(topic, b"not a distro message %d" % i)
            # Connected while the daemon trains on: its peer exchange, fetches and state requests run.
            await trio.to_thread.run_sync(while_connected)
            await bare.disconnect(target)
        await bare.close()


def test_foreign_peer_is_ignored_and_its_garbage_counted(procs: Procs) -> None:
    founder = procs.start([*RUN, "--steps", "1000"], "peer0")
    info = founder.info()
    founder.wait_step(2, 60)
    def three_more_steps() -> None:
        founder.poll_events()
        founder.wait_step(max(founder.steps()) + 3, 60)

    trio.run(_gossip_garbage, info["addrs"][0], bytes.fromhex(info["run_id"]), three_more_steps)
    founder.wait_step(max(founder.steps()) + 1, 60)  # and after it left
    counts = gossip_rejected(info["metrics_url"])
    # Not msgpack at all. py-libp2p's own gossipsub passes on at most 10 of its publishes a second, so
    # fewer than GARBAGE may arrive; every one that does is refused and counted.
    assert counts["unpack"] >= 1, counts
    assert counts["banned"] == 0, counts  # every reason is exported, at 0 until seen
    errors = [line for line in founder.stderr_path.read_text().splitlines() if "ERROR" in line]
    assert errors == []

"""Relayed last in the gossip mesh (protocol/gossip_router.py), real hosts on loopback: a member reached only
through a relay is left out of our mesh and of our own flood publish while a member over a direct
connection is in reach, and still gets our messages through that member; with no direct member in reach it
is used as any other."""

from __future__ import annotations

import pytest
import trio
from distro_node.protocol.circuits import Kind
from distro_node.protocol.gossip import open_gossip
from distro_node.protocol.gossip_config import GossipConfig
from distro_node.protocol.gossip_router import RunRouter
from distro_node.protocol.relay_client import RelayClient
from distro_node.protocol.relay_service import open_relay_service
from distro_node.protocol.testing import WAIT, start_hosts, wait_until

RUN = bytes.fromhex("ce" * 32)
CFG = GossipConfig()


@pytest.mark.network
def test_a_relayed_member_gets_our_messages_through_a_direct_one_not_over_the_circuit() -> None:
    async def body() -> None:
        async with start_hosts(3) as (relay, private, dialer), trio.open_nursery() as nursery:
            async with (open_relay_service(relay, hop=True), open_relay_service(private) as stop_side,
                        open_relay_service(dialer) as dial_side):
                client = RelayClient(private, stop_side)
                RelayClient(dialer, dial_side)
                await private.connect(relay.peer_id, relay.addrs())
                with trio.fail_after(WAIT):
                    assert await client.reserve(relay.peer_id)
                await dialer.connect(relay.peer_id, relay.addrs())
                with trio.fail_after(WAIT * 2):
                    await dialer.connect(private.peer_id, client.circuit_addrs())
                assert dialer.connection_kind(private.peer_id) is Kind.RELAYED
                async with (open_gossip(relay, RUN), open_gossip(private, RUN) as heard,
                            open_gossip(dialer, RUN) as chan):
                    members = {str(h.peer_id) for h in (relay, private, dialer)}
                    chan.prefer_members(lambda: members)
                    await chan.wait_for_subscribers({relay.peer_id, private.peer_id}, timeout=WAIT)
                    router = chan._pubsub.router
                    assert isinstance(router, RunRouter)
                    mesh = router.mesh[chan.topic]
                    await wait_until(lambda: relay.peer_id in mesh, "the direct member in the mesh")
                    for _ in range(2):  # heartbeats pass: the relayed member never takes a seat
                        await trio.sleep(CFG.heartbeat_interval)
                        assert private.peer_id not in mesh
                    own = set(router._get_peers_to_send([chan.topic], dialer.peer_id, dialer.peer_id))
                    assert own == {relay.peer_id}
                    await chan.publish(b"vote")
                    with trio.fail_after(WAIT):  # through the relay's own mesh, on its direct connections
                        assert (await heard.receive()).data == b"vote"
                    # The relay is no member (a stranger we happen to reach directly): nothing else carries
                    # our messages to the private peer, so the circuit does.
                    members.discard(str(relay.peer_id))
                    own = set(router._get_peers_to_send([chan.topic], dialer.peer_id, dialer.peer_id))
                    assert private.peer_id in own
            nursery.cancel_scope.cancel()

    trio.run(body)

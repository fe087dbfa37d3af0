"""Circuit relay v2 on our hosts (protocol/relay_service.py, relay_client.py, circuits.py), real hosts on
loopback: a private peer reserves on a relay, another peer dials it through the relay only knowing its
circuit address, and streams run over that relayed connection; a banned peer's reservation is refused, and
a reservation in another peer's name too."""

from __future__ import annotations

import pytest
import trio
from distro_node.protocol.circuits import Kind
from distro_node.protocol.relay_client import RelayClient
from distro_node.protocol.relay_service import HOP_PROTOCOL, open_relay_service
from distro_node.protocol.testing import WAIT, start_hosts
from distro_node.protocol.wire import reset_quietly
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.pb.circuit_pb2 import HopMessage, PeerId
from libp2p.relay.circuit_v2.protocol_buffer import StatusCode
from libp2p.relay.circuit_v2.utils import read_delimited_msg, write_delimited_msg


@pytest.mark.network
def test_a_peer_known_only_by_its_circuit_address_is_dialed_through_the_relay() -> None:
    async def body() -> None:
        async with start_hosts(3) as (relay, private, dialer), trio.open_nursery() as nursery:
            async with (open_relay_service(relay, hop=True) as service,
                        open_relay_service(private) as stop_side, open_relay_service(dialer) as dial_side):
                client = RelayClient(private, stop_side)
                RelayClient(dialer, dial_side)  # the dialer's relayed dialing
                await private.connect(relay.peer_id, relay.addrs())
                with trio.fail_after(WAIT):
                    assert await client.reserve(relay.peer_id)
                assert service.reserved() == 1 and service.counts.reservations == 1
                circuit = client.circuit_addrs()
                assert len(circuit) == 1 and str(circuit[0]).endswith(f"/p2p/{relay.peer_id}/p2p-circuit")
                assert any("p2p-circuit" in str(a) for a in private.advertised_addrs())
                with trio.fail_after(WAIT * 2):
                    await dialer.connect(private.peer_id, circuit)
                assert dialer.connection_kind(private.peer_id) is Kind.RELAYED
                assert dialer.connection_kind(relay.peer_id) is Kind.DIRECT
                assert dialer.connection_kind(ID.from_pubkey(create_new_key_pair().public_key)) is Kind.NONE
                with trio.fail_after(WAIT):
                    learned = await dialer.exchange_peers(private.peer_id)  # a stream over the circuit
                assert relay.peer_id in learned
                assert service.counts.relayed_bytes > 0
            nursery.cancel_scope.cancel()

    trio.run(body)


@pytest.mark.network
def test_a_banned_peer_cannot_reserve_and_nobody_reserves_in_anothers_name() -> None:
    async def body() -> None:
        async with start_hosts(2) as (relay, private):
            async with open_relay_service(relay, hop=True) as service, open_relay_service(private) as side:
                client = RelayClient(private, side)
                await private.connect(relay.peer_id, relay.addrs())
                # In another peer's name: refused with PERMISSION_DENIED, nothing reserved.
                other = ID.from_pubkey(create_new_key_pair().public_key)
                stream = await private.open_stream(relay.peer_id, HOP_PROTOCOL)
                with trio.fail_after(WAIT):
                    await write_delimited_msg(stream, HopMessage(type=HopMessage.RESERVE,
                                                                 peer=PeerId(id=other.to_bytes())))
                    reply = await read_delimited_msg(stream, HopMessage)
                await reset_quietly(stream)
                assert StatusCode(reply.status) == StatusCode.PERMISSION_DENIED
                assert service.counts.refused == 1 and service.reserved() == 0
                # Banned: the hop stream is reset before any reservation is looked at.
                await relay.block(private.peer_id)
                await private.connect(relay.peer_id, relay.addrs())  # a banned peer may dial again ...
                with trio.fail_after(WAIT):  # ... but each of its streams is reset, the hop's too
                    assert await client.reserve(relay.peer_id) is False
                assert service.reserved() == 0 and client.circuit_addrs() == []

    trio.run(body)


@pytest.mark.network
def test_a_private_peer_holds_two_relays_and_replaces_one_that_leaves() -> None:
    async def body() -> None:
        async with start_hosts(3) as (private, relay_a, relay_c):
            async with (open_relay_service(private) as side, open_relay_service(relay_a, hop=True),
                        open_relay_service(relay_c, hop=True)):
                client = RelayClient(private, side)
                async with start_hosts(1) as (relay_b,), open_relay_service(relay_b, hop=True):
                    for relay in (relay_a, relay_b):
                        await private.connect(relay.peer_id, relay.addrs())
                    with trio.fail_after(WAIT * 2):
                        await client.round()
                    assert set(client.held) == {relay_a.peer_id, relay_b.peer_id}
                with trio.fail_after(WAIT):  # relay_b is gone
                    while private.is_connected(relay_b.peer_id):
                        await private.wait_for_change()
                await private.connect(relay_c.peer_id, relay_c.addrs())
                with trio.fail_after(WAIT * 2):
                    await client.round()
                assert set(client.held) == {relay_a.peer_id, relay_c.peer_id} and client.failovers == 1
                assert len(client.circuit_addrs()) == 2

    trio.run(body)

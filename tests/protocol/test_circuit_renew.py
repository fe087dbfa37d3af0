"""Relayed connections across their relay's caps (protocol/circuit_keeper.py, circuit_dial.py), real hosts on
loopback: a circuit cut at its cap is re-established before the cut without losing a stream exchange (time
cap and byte cap, both directions of streams), and a circuit whose relay dies is dialed again at once
through the peer's other relay."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
from distro_node.protocol.circuits import Kind, open_conns
from distro_node.protocol.host import P2PHost
from distro_node.protocol.relay_client import RelayClient
from distro_node.protocol.relay_config import RelayClientConfig, RelayServiceConfig
from distro_node.protocol.relay_service import RelayService, open_relay_service
from distro_node.protocol.testing import WAIT, start_hosts
from distro_node.protocol.wire import read_exactly
from libp2p.abc import INetStream
from libp2p.custom_types import TProtocol

ECHO = TProtocol("/distro/test-echo/1")
pytestmark = pytest.mark.network


async def _echo(stream: INetStream) -> None:
    size = int.from_bytes(await read_exactly(stream, 4), "big")
    await stream.write(await read_exactly(stream, size))
    await stream.close()


async def _exchange(src: P2PHost, dst: P2PHost, size: int, n: int) -> None:
    """One stream from ``src`` to ``dst`` carrying ``size`` bytes each way; any failure fails the test."""
    stream = await src.open_stream(dst.peer_id, ECHO)
    body = n.to_bytes(4, "big") * (size // 4)
    await stream.write(len(body).to_bytes(4, "big") + body)
    assert await read_exactly(stream, len(body)) == body
    await stream.close()


@asynccontextmanager
async def _relayed_pair(relay_cfg: RelayServiceConfig,
                        client_cfg: RelayClientConfig | None = None) -> AsyncIterator[
        tuple[P2PHost, P2PHost, RelayService, RelayClient, RelayClient]]:
    """A relay, a private peer holding a reservation on it and a dialer connected to the private peer
    through it only; both peers' circuit keepers run."""
    async with start_hosts(3) as (relay, private, dialer), trio.open_nursery() as nursery:
        async with (open_relay_service(relay, relay_cfg, hop=True) as service,
                    open_relay_service(private) as stop_side, open_relay_service(dialer) as dial_side):
            on_private = RelayClient(private, stop_side, client_cfg)
            on_dialer = RelayClient(dialer, dial_side, client_cfg)
            for host in (private, dialer):
                host.set_handler(ECHO, _echo)
            await private.connect(relay.peer_id, relay.addrs())
            with trio.fail_after(WAIT):
                assert await on_private.reserve(relay.peer_id)
            with trio.fail_after(WAIT * 2):
                await dialer.connect(private.peer_id, on_private.circuit_addrs())
            assert dialer.connection_kind(private.peer_id) is Kind.RELAYED
            nursery.start_soon(on_private.keeper.run)
            nursery.start_soon(on_dialer.keeper.run)
            yield private, dialer, service, on_private, on_dialer
            nursery.cancel_scope.cancel()


async def _exchange_until_renewed(private: P2PHost, dialer: P2PHost, client: RelayClient, size: int,
                                  renewals: int) -> int:
    first = open_conns(dialer.libp2p, private.peer_id)
    n = 0
    with trio.fail_after(60):
        while client.keeper.renewed < renewals:
            await _exchange(dialer, private, size, n)
            await _exchange(private, dialer, size, n)
            n += 1
        await _exchange(dialer, private, size, n)  # and on the newest circuit too
    # Retired, the first circuit is closed once idle a settle time later (circuit_renewal.settle_time),
    # which the exchanges above may outrun on a fast machine.
    with trio.move_on_after(WAIT):
        while not all(c.muxed_conn.is_closed for c in first):
            await dialer.wait_for_change()
    assert all(c.muxed_conn.is_closed for c in first), "the first circuit was never closed"
    return n


def test_a_circuit_is_renewed_before_its_time_cap_and_streams_keep_working() -> None:
    async def body() -> None:
        async with _relayed_pair(RelayServiceConfig(circuit_seconds=6)) as (private, dialer, service,
                                                                            on_private, on_dialer):
            n = await _exchange_until_renewed(private, dialer, on_dialer, 4096, renewals=2)
            assert n >= 2
            assert service.counts.cut_at_cap == 0, "the relay cut a circuit at its cap"
            assert dialer.connection_kind(private.peer_id) is Kind.RELAYED
            # Each old circuit was closed by one side or the other once idle, never left to the relay.
            assert on_dialer.keeper.retired_closed + on_private.keeper.retired_closed >= 1

    trio.run(body)


def test_a_circuit_is_renewed_before_its_byte_cap() -> None:
    async def body() -> None:
        cap = 1024 * 1024  # renewed from 512 KiB on; 64 KiB cross it per round of two exchanges
        # A short time margin: the old circuit, idle, is closed 0.25 s after its renewal rather than 7.5 s.
        async with _relayed_pair(RelayServiceConfig(circuit_bytes=cap, circuit_seconds=3600),
                                 RelayClientConfig(renew_before_seconds=1.0)) as (
                private, dialer, service, _, on_dialer):
            await _exchange_until_renewed(private, dialer, on_dialer, 16 * 1024, renewals=2)
            assert service.counts.cut_at_cap == 0, "the relay cut a circuit at its cap"
            assert all(c.life.used < cap for c in on_dialer.circuits.circuits.values())

    trio.run(body)


def test_a_circuit_whose_relay_dies_is_dialed_again_through_the_other_relay() -> None:
    async def body() -> None:
        async with (start_hosts(3) as (private, dialer, relay_a), trio.open_nursery() as nursery,
                    open_relay_service(relay_a, hop=True), open_relay_service(private) as stop_side,
                    open_relay_service(dialer) as dial_side):
            on_private, on_dialer = RelayClient(private, stop_side), RelayClient(dialer, dial_side)
            private.set_handler(ECHO, _echo)
            nursery.start_soon(on_dialer.keeper.run)
            async with start_hosts(1) as (relay_b,), open_relay_service(relay_b, hop=True):
                for relay in (relay_a, relay_b):
                    await private.connect(relay.peer_id, relay.addrs())
                    with trio.fail_after(WAIT):
                        assert await on_private.reserve(relay.peer_id)
                through_b = [a for a in on_private.circuit_addrs() if str(relay_b.peer_id) in str(a)]
                through_a = [a for a in on_private.circuit_addrs() if str(relay_a.peer_id) in str(a)]
                with trio.fail_after(WAIT * 2):
                    await dialer.connect(private.peer_id, through_b + through_a)  # through relay_b
                await _exchange(dialer, private, 1024, 0)
                assert on_dialer.keeper.redialed == 0
            with trio.fail_after(WAIT * 2):  # relay_b is gone; the dialer redials without being asked
                while on_dialer.keeper.redialed < 1:  # counted as the new circuit is registered
                    await on_dialer.circuits.changed.wait()
            assert dialer.connection_kind(private.peer_id) is Kind.RELAYED
            await _exchange(dialer, private, 1024, 1)
            nursery.cancel_scope.cancel()

    trio.run(body)

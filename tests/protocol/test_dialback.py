"""Dial-back probes with real hosts on loopback (protocol/dialback.py): a fresh connection from a throwaway
identity reaches a listening port and not a closed one; requests are capped and one asker probes at a time."""

from __future__ import annotations

import socket

import pytest
import trio
from distro_node.protocol.dialback import DialbackServer, decode_ports, encode_ports, probe
from distro_node.protocol.errors import TransportError
from distro_node.protocol.rpc import RpcRefusedError, RpcStatus
from distro_node.protocol.testing import WAIT, start_hosts


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port(addr: object) -> int:
    return int(str(addr).split("/tcp/")[1].split("/")[0])


@pytest.mark.network
def test_a_listening_port_is_reached_and_a_closed_one_is_not() -> None:
    async def body() -> None:
        async with start_hosts(2) as (asker, prober):
            server = DialbackServer(prober, dial_timeout=3.0)
            server.install()
            await asker.connect(prober.peer_id, prober.addrs())
            listening, closed = _port(asker.addrs()[0]), _closed_port()
            with trio.fail_after(WAIT):
                result = await probe(asker, prober.peer_id, [listening, closed])
            assert result.observed_ip == "127.0.0.1"
            assert result.reached == {listening: True, closed: False}
            assert [str(a) for a in result.addrs()] == [f"/ip4/127.0.0.1/tcp/{listening}"]
            assert server.probes == 1

    trio.run(body)


@pytest.mark.network
def test_a_second_probe_while_one_runs_is_busy() -> None:
    async def body() -> None:
        async with start_hosts(2) as (asker, prober):
            DialbackServer(prober, dial_timeout=3.0).install()
            await asker.connect(prober.peer_id, prober.addrs())
            outcomes: list[object] = []

            async def one() -> None:
                try:
                    outcomes.append(await probe(asker, prober.peer_id, [_closed_port()] * 4))
                except TransportError as exc:
                    outcomes.append(exc)

            with trio.fail_after(WAIT * 2):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(one)
                    nursery.start_soon(one)
            busy = [o for o in outcomes if isinstance(o, RpcRefusedError)]
            assert len(busy) == 1 and busy[0].status == RpcStatus.BUSY

    trio.run(body)


def test_requests_are_capped_and_malformed_ones_refused() -> None:
    assert decode_ports(encode_ports([1, 65535])) == [1, 65535]
    for bad in (b"", b"\x00", b"\x05" + b"\x00\x01" * 5, b"\x01\x00", b"\x01\x00\x00"):
        assert decode_ports(bad) is None
    for ports in ([], [0], [70000], [1, 2, 3, 4, 5]):
        with pytest.raises(ValueError):
            encode_ports(ports)

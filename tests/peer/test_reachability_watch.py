"""The daemon's reachability watch (node/peer/reachability_watch.py) with real hosts on loopback: two
connected peers that dial it back make it public, and the verdict is reported once as an event."""

from __future__ import annotations

import io
import json
import socket

import pytest
import trio
import trio.testing
from distro_node.node.peer.output import Output
from distro_node.node.peer.reachability_watch import ReachabilityWatch, listen_ports
from distro_node.protocol.dialback import DialbackServer
from distro_node.protocol.testing import WAIT, start_hosts


@pytest.mark.network
def test_two_probers_make_a_loopback_node_public_and_say_so_once() -> None:
    async def body() -> None:
        stream = io.StringIO()
        reported: list[str] = []
        async with start_hosts(3) as (node, a, b):
            for prober in (a, b):
                DialbackServer(prober, dial_timeout=3.0).install()
                await node.connect(prober.peer_id, prober.addrs())
            watch = ReachabilityWatch(node, Output("json", stream), reported.append)
            with trio.fail_after(WAIT * 2):
                assert await watch.round() == "public"
                assert await watch.round() == "public"
            port = listen_ports(node)[0]
        assert reported == ["public", "public"]
        events = [json.loads(line) for line in stream.getvalue().splitlines()]
        assert [e["verdict"] for e in events if e["event"] == "reachability"] == ["public"]
        assert events[0]["confirmed"] == [f"127.0.0.1:{port}"]

    trio.run(body)


@pytest.mark.network
def test_a_confirmed_address_is_advertised_once_and_an_unreachable_candidate_never() -> None:
    async def body() -> None:
        heard: list[list[str]] = []
        async with start_hosts(3) as (node, a, b):
            for prober in (a, b):
                DialbackServer(prober, dial_timeout=3.0).install()
                await node.connect(prober.peer_id, prober.addrs())
            port = listen_ports(node)[0]
            closed = _closed_port()
            watch = ReachabilityWatch(node, Output("json", io.StringIO()), on_confirmed=heard.append)
            watch.add_candidate(closed)
            assert watch.ports() == [closed, port]
            assert [str(x) for x in node.advertised_addrs()] == [str(x) for x in node.addrs()]
            with trio.fail_after(WAIT * 2):
                await watch.round()
                await watch.round()
            confirmed = f"/ip4/127.0.0.1/tcp/{port}"
            assert heard == [[confirmed]]
            assert watch.advertised == [confirmed]
            assert str(node.advertised_addrs()[0]) == f"{confirmed}/p2p/{node.peer_id}"

    trio.run(body)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_rounds_come_sooner_without_a_verdict_and_at_once_for_a_new_candidate() -> None:
    times: list[float] = []

    async def body() -> None:
        watch = ReachabilityWatch(None, Output("json", io.StringIO()))  # type: ignore[arg-type]  # unused

        async def round_() -> str:
            times.append(trio.current_time())
            watch.verdict = "unknown" if len(times) < 3 else "private"
            return watch.verdict

        watch.round = round_  # type: ignore[method-assign]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch.run, 5.0, 60.0, 10.0)
            await trio.sleep(100.0)  # rounds at 5, 15, 25 (unknown), then 85 (private, every 60)
            watch.add_candidate(4747)  # at 100: the next round comes at once, not at 145
            await trio.sleep(1.0)
            nursery.cancel_scope.cancel()

    trio.run(body, clock=trio.testing.MockClock(autojump_threshold=0))
    assert times == [5.0, 15.0, 25.0, 85.0, 100.0]

"""The daemon's isolation watch (node/peer/isolation_watch.py) with real hosts on loopback: losing the only
peer is said once (``isolated``), reported as seconds on the gauge, and a new connection ends it."""

from __future__ import annotations

import io
import json

import pytest
import trio
from distro_node.node.peer.isolation_watch import IsolationWatch
from distro_node.node.peer.output import Output
from distro_node.protocol.host import open_host
from distro_node.protocol.testing import NO_PX_LOOP, WAIT, start_hosts
from libp2p.crypto.ed25519 import create_new_key_pair


@pytest.mark.network
def test_losing_every_peer_is_said_once_and_a_new_connection_ends_it() -> None:
    async def body() -> None:
        stream = io.StringIO()
        gauge: list[float] = []
        async with start_hosts(2) as (a, c):
            watch = IsolationWatch(a, Output("json", stream), gauge.append)
            watch.check(99.0)  # not connected yet: start-up, not isolation
            async with open_host(create_new_key_pair(), NO_PX_LOOP) as b:
                await a.connect(b.peer_id, b.addrs())
                watch.check(100.0)
            with trio.fail_after(WAIT):
                while a.connected_peers():
                    await a.wait_for_change()
            watch.check(101.0)
            watch.check(103.5)
            await a.connect(c.peer_id, c.addrs())
            watch.check(104.0)
        assert gauge == [0.0, 0.0, 2.5, 0.0]
        events = [json.loads(line)["event"] for line in stream.getvalue().splitlines()]
        assert events == ["isolated", "reconnected"]

    trio.run(body)

"""The daemon's NAT traversal wiring (node/peer/nat_traversal.py) on a loopback host: the reachability
verdict turns the relay hop on or off and what the host advertises, and the report says so (events,
metrics)."""

from __future__ import annotations

import io
import json

import pytest
import trio
from distro_node.node.metrics import NodeMetrics
from distro_node.node.peer.nat_traversal import open_nat_traversal
from distro_node.node.peer.output import Output
from distro_node.protocol.relay_service import HOP_PROTOCOL
from distro_node.protocol.testing import WAIT, start_hosts
from distro_node.protocol.wire import reset_quietly
from prometheus_client import generate_latest


@pytest.mark.network
def test_the_verdict_switches_relaying_and_hiding_and_the_report_counts_connections() -> None:
    async def body() -> None:
        stream = io.StringIO()
        metrics = NodeMetrics()
        async with start_hosts(2) as (host, other), open_nat_traversal(host, Output("json", stream),
                                                                       metrics) as nat:
            await other.connect(host.peer_id, host.addrs())
            nat.on_verdict("public")
            assert nat.relay.serving_hop and not host.behind_nat
            with trio.fail_after(WAIT):  # the hop is spoken now
                await reset_quietly(await other.open_stream(host.peer_id, HOP_PROTOCOL))
            nat.on_verdict("unknown")  # not confirmed: no relaying, LAN addresses kept for the LAN
            assert not nat.relay.serving_hop and host.behind_nat
            nat.report()
        events = [json.loads(line) for line in stream.getvalue().splitlines()]
        assert [e["event"] for e in events] == ["relaying"]
        text = generate_latest(metrics.registry).decode()
        assert 'distro_connections{kind="direct"} 1.0' in text
        assert "distro_relay_reservations 0.0" in text

    trio.run(body)

"""The UPnP port mapper (node/peer/upnp.py) against a fake gateway: it maps, hands the mapping on, renews it
at half its lease, deletes it when cancelled, says a failure once and goes on, and never waits on a router
that stopped answering for longer than its deadline."""

from __future__ import annotations

import io
import json
import threading
from typing import Any

import pytest
import trio
import trio.testing
from distro_node.node.peer.output import Output
from distro_node.node.peer.upnp import PortMapper, PortMapping, UpnpError, keep_port_mapped


class FakeGateway:
    def __init__(self, devices: int = 1, *, permanent_only: bool = False,
                 block: threading.Event | None = None) -> None:
        self.discoverdelay = 0
        self.lanaddr = "192.168.1.20"
        self.devices = devices
        self.permanent_only = permanent_only
        self.block = block
        self.calls: list[tuple[Any, ...]] = []

    def discover(self) -> int:
        if self.block is not None:
            self.block.wait(10)
        return self.devices

    def selectigd(self) -> str:
        return "http://192.168.1.1:5000/ctl"

    def externalipaddress(self) -> str:
        return "198.18.0.9"

    def addportmapping(self, eport: int, proto: str, ihost: str, iport: int, desc: str, remote: str,
                       lease: int) -> bool:
        self.calls.append(("add", eport, proto, ihost, iport, lease))
        if self.permanent_only and lease:
            raise Exception("OnlyPermanentLeasesSupported")
        return True

    def deleteportmapping(self, eport: int, proto: str) -> bool:
        self.calls.append(("delete", eport, proto))
        return True


def _events(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_maps_renews_at_half_the_lease_and_deletes_on_the_way_out() -> None:
    gateway = FakeGateway()
    stream = io.StringIO()
    mapped: list[PortMapping] = []

    async def body() -> None:
        mapper = PortMapper(4747, lease_seconds=100, make_gateway=lambda: gateway)
        with trio.move_on_after(120):  # autojump clock: two renewals at 50 and 100 s
            await keep_port_mapped(mapper, Output("json", stream), mapped.append)

    # Jumps only after 0.1 s of real idleness, so the worker threads' calls finish first.
    trio.run(body, clock=trio.testing.MockClock(autojump_threshold=0.1))
    assert mapped == [PortMapping("198.18.0.9", 4747, "192.168.1.20", 4747)]
    assert gateway.calls == [("add", 4747, "TCP", "192.168.1.20", 4747, 100)] * 3 + [("delete", 4747, "TCP")]
    assert [(e["event"], e["mapped"], e["external"]) for e in _events(stream)] == [
        ("upnp", True, "198.18.0.9:4747")]


def test_no_gateway_is_said_once_and_the_node_goes_on() -> None:
    stream = io.StringIO()
    mapped: list[PortMapping] = []

    async def body() -> None:
        mapper = PortMapper(4747, make_gateway=lambda: FakeGateway(devices=0))
        await keep_port_mapped(mapper, Output("json", stream), mapped.append)  # returns: nothing to keep

    trio.run(body)
    assert mapped == []
    [event] = _events(stream)
    assert event["event"] == "upnp" and event["mapped"] is False
    assert "no UPnP device" in event["reason"]


def test_a_router_that_refuses_leases_gets_a_permanent_mapping() -> None:
    gateway = FakeGateway(permanent_only=True)

    async def body() -> None:
        mapper = PortMapper(4747, make_gateway=lambda: gateway)
        await mapper.open()
        await mapper.close()

    trio.run(body)
    assert [c[-1] for c in gateway.calls if c[0] == "add"] == [3600, 0]
    assert gateway.calls[-1] == ("delete", 4747, "TCP")


def test_a_router_that_stops_answering_costs_one_deadline() -> None:
    release = threading.Event()
    gateway = FakeGateway(block=release)

    async def body() -> None:
        mapper = PortMapper(4747, call_timeout=0.2, discover_ms=0, make_gateway=lambda: gateway)
        with trio.fail_after(5):
            with pytest.raises(UpnpError, match="no answer within"):
                await mapper.open()

    try:
        trio.run(body)
    finally:
        release.set()  # let the abandoned worker thread end


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="port"):
        PortMapper(0)
    with pytest.raises(ValueError, match="lease_seconds"):
        PortMapper(4747, lease_seconds=0)

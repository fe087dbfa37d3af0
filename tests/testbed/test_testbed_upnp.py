"""UPnP with a real home router: Debian's miniupnpd in the NAT router namespace (node/testbed/upnp_router.py).
The NAT'd peer maps its port, two probers dial the mapped address back, it is called public and advertises
it; its mapping is gone once it exits. A NAT'd peer whose router offers no UPnP says so and stays private.
Needs root, ip, tc, nft and miniupnpd (installed as root via node/testbed/debian.py; skipped otherwise)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from distro_node.node.testbed.debian import install_missing
from distro_node.node.testbed.dialback_roles import answer, start_asker, start_probers
from distro_node.node.testbed.nat import Nat, gateway
from distro_node.node.testbed.netns import HOME, PUBLIC_LOOKING_SUBNET, Network
from distro_node.node.testbed.upnp_router import UpnpRouter

PORT = 4300  # inside the test's own namespaces: nothing else listens there

_MISSING = install_missing(("nft",), "nftables") or install_missing(("miniupnpd",), "miniupnpd")
pytestmark = [pytest.mark.root, pytest.mark.skipif(_MISSING is not None, reason=str(_MISSING))]


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)


def test_a_peer_behind_a_upnp_router_maps_its_port_and_is_confirmed_public(
        procs: list[subprocess.Popen[str]]) -> None:
    nats = {1: Nat("drop"), 2: Nat("drop")}
    with Network([HOME] * 3, nats=nats, subnet=PUBLIC_LOOKING_SUBNET) as net:
        lan = gateway(1).rsplit(".", 1)[0] + ".0/24"
        with UpnpRouter(net.router_ns(1), lan) as router:
            probers = start_probers(net, 0, procs)
            mapped, unmapped = (start_asker(net, i, PORT, probers, procs, "--upnp") for i in (1, 2))
            with_upnp, without = answer(mapped), answer(unmapped)
            left = router.mappings()
    external = f"/ip4/{net.address(1)}/tcp/{PORT}"
    assert with_upnp["upnp"] == f"{net.address(1)}:{PORT} -> {net.listen_address(1)}:{PORT}", with_upnp
    assert with_upnp["verdict"] == "public", with_upnp
    assert with_upnp["confirmed"] == [external]
    assert str(with_upnp["advertised"][0]).startswith(f"{external}/p2p/")  # type: ignore[index]
    assert left == []  # the peer deleted its mapping on the way out
    assert str(without["upnp"]).startswith("failed: "), without
    assert without["verdict"] == "private", without

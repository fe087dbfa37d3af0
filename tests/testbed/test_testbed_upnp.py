"""UPnP with a real home router: Debian's miniupnpd in the NAT router namespace (node/testbed/upnp_router.py).
The NAT'd peer maps its port, two probers dial the mapped address back, it is called public and advertises
it; its mapping is gone once it exits. A NAT'd peer whose router offers no UPnP says so and stays private.
Needs root, ip, tc, nft and miniupnpd (installed as root via node/testbed/debian.py; skipped otherwise)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from distro_node.node.join_process import CLI, PeerProc, join_args, stop_all
from distro_node.node.testbed.debian import install_missing
from distro_node.node.testbed.dialback_roles import answer, start_asker, start_probers
from distro_node.node.testbed.links import HOME
from distro_node.node.testbed.nat import Nat, gateway
from distro_node.node.testbed.netns import PUBLIC_LOOKING_SUBNET, Network
from distro_node.node.testbed.upnp_router import UpnpRouter

PORT = 4300  # inside the test's own namespaces: nothing else listens there
STEPS = ["--steps", "1000"]  # more than the test waits for: the peers are stopped by SIGTERM
RUN = ["--preset", "tiny", "--batch-size", "4", "--seq-len", "32", "--round-timeout", "5", *STEPS]

_MISSING = install_missing(("nft",), "nftables") or install_missing(("miniupnpd",), "miniupnpd")
pytestmark = [pytest.mark.root, pytest.mark.skipif(_MISSING is not None, reason=str(_MISSING))]


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


def test_a_daemon_behind_a_upnp_router_maps_is_confirmed_and_prints_a_join_command_naming_it(
        tmp_path: Path) -> None:
    """Unmodified `join` daemons: a public founder and joiner, and a joiner behind a dropping NAT whose router
    runs miniupnpd. The NAT'd joiner listens on all interfaces by default (its bootstrap peer is elsewhere),
    maps its port, is confirmed by both others, prints the join command naming the mapped address, and
    deletes the mapping when it leaves."""
    with Network([HOME] * 3, nats={2: Nat("drop")}, subnet=PUBLIC_LOOKING_SUBNET) as net, \
            UpnpRouter(net.router_ns(2), gateway(2).rsplit(".", 1)[0] + ".0/24") as router:
        peers: list[PeerProc] = []
        try:
            # The founder waits for all three, so nobody starts behind (a resync delays leaving on SIGTERM).
            founder = PeerProc([*net.exec_prefix(0), *CLI, "join", *RUN, "--genesis-peers", "3", "--listen",
                                f"/ip4/{net.address(0)}/tcp/0", "--log-format", "json"], "peer0", tmp_path)
            peers.append(founder)
            args = join_args(str(founder.info()["join_command"]))
            for i in (1, 2):
                listen = ["--listen", f"/ip4/{net.address(i)}/tcp/0"] if i == 1 else []  # 2: the default
                peers.append(PeerProc([*net.exec_prefix(i), *CLI, "join", *args, *STEPS, *listen,
                                       "--log-format", "json"], f"peer{i}", tmp_path))
            natd = peers[2]
            bound = str(natd.info()["addrs"][0])
            assert bound.startswith("/ip4/0.0.0.0/tcp/"), bound
            port = int(bound.split("/tcp/")[1].split("/")[0])
            upnp = natd.wait_for(lambda e: e.get("event") == "upnp", 60, "upnp event")
            assert upnp["mapped"] is True and upnp["external"] == f"{net.address(2)}:{port}", upnp
            reachable = natd.wait_for(lambda e: e.get("event") == "reachable", 120, "reachable event")
            assert f"--bootstrap /ip4/{net.address(2)}/tcp/{port}/p2p/" in str(reachable["join_command"])
            assert len(router.mappings()) == 1
        finally:
            codes = stop_all(peers, 60)
        assert codes["peer2"] is not None, "peer2 did not leave on SIGTERM"  # (still joining: exit 1)
        assert router.mappings() == []

"""NAT routers of the namespace testbed (node/testbed/nat.py): each kind refuses, drops, remaps or forwards
what it should, with real TCP between namespaces. Needs root, ip, tc and nft (skipped otherwise)."""

from __future__ import annotations

import select
import subprocess
import sys

import pytest
from distro_node.node.testbed.debian import install_missing
from distro_node.node.testbed.links import HOME
from distro_node.node.testbed.nat import Nat
from distro_node.node.testbed.netns import Network

# Debian's nftables is installed here when missing (as root, node/testbed/debian.py), so CI runs these.
_NO_NFT = install_missing(("nft",), "nftables")
pytestmark = pytest.mark.skipif(_NO_NFT is not None, reason=str(_NO_NFT))

PORT = 4100  # inside the test's own namespaces: nothing else listens there
LOCAL_PORT = 40123
LISTEN = """
import socket, sys
s = socket.socket(); s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(); s.settimeout(20)
print("ready", flush=True)
conn, peer = s.accept(); print(f"{peer[0]} {peer[1]}", flush=True)
"""
CONNECT = """
import socket, sys, time
s = socket.socket(); s.settimeout(float(sys.argv[4]) if len(sys.argv) > 4 else 2.0)
if len(sys.argv) > 3: s.bind(("0.0.0.0", int(sys.argv[3])))
time.sleep(float(sys.argv[5]) if len(sys.argv) > 5 else 0.0)
print("dialing", file=sys.stderr, flush=True)
try:
    s.connect((sys.argv[1], int(sys.argv[2]))); print("ok")
except ConnectionRefusedError: print("refused")
except (TimeoutError, socket.timeout): print("timeout")
"""


def _listen(net: Network, i: int, procs: list[subprocess.Popen[str]]) -> subprocess.Popen[str]:
    argv = [*net.exec_prefix(i), sys.executable, "-c", LISTEN, net.listen_address(i), str(PORT)]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    procs.append(p)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


def _connect(net: Network, i: int, host: str, *local_port: int) -> str:
    argv = [*net.exec_prefix(i), sys.executable, "-c", CONNECT, host, str(PORT), *map(str, local_port)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout.strip()


@pytest.mark.parametrize(("kind", "inbound"), [("drop", "timeout"), ("reset", "refused"),
                                               ("random", "timeout"), ("forward", "ok")])
def test_unsolicited_inbound_meets_the_router_of_each_kind(
        kind: str, inbound: str, procs: list[subprocess.Popen[str]]) -> None:
    with Network([HOME, HOME], nats={1: Nat(kind, PORT if kind == "forward" else 0)}) as net:
        _listen(net, 1, procs)
        assert _connect(net, 0, net.address(1)) == inbound


@pytest.mark.parametrize("kind", ["drop", "random"])
def test_outbound_is_masqueraded_and_random_kind_remaps_the_port(
        kind: str, procs: list[subprocess.Popen[str]]) -> None:
    with Network([HOME, HOME], nats={1: Nat(kind)}) as net:
        listener = _listen(net, 0, procs)
        assert _connect(net, 1, net.address(0), LOCAL_PORT) == "ok"
        assert listener.stdout is not None
        host, port = listener.stdout.readline().split()
        assert host == net.address(1)  # the router's WAN address, never the LAN one
        assert (int(port) == LOCAL_PORT) == (kind == "drop")


# How long after the first the second peer dials: DCUtR's two dials land a round-trip estimate's error
# apart, not at the same instant. Longer than the first SYN takes to meet the other router (under a
# millisecond here), shorter than its retransmission (1 s), so each kind meets one outcome every run.
DIAL_OFFSET_S = 0.5


@pytest.mark.parametrize(("kind", "punched"), [("drop", True), ("reset", False), ("random", False)])
def test_simultaneous_open_punches_through_a_dropping_nat_only(kind: str, punched: bool) -> None:
    """What DCUtR relies on: two peers behind NATs dial each other's public address from the port the
    other dials, one shortly after the other. A dropping NAT drops the first SYN but lets the other's in once
    its own went out (the first is then answered as a simultaneous open); a resetting one refuses the first
    SYN, which kills that attempt; a random-port one maps to other ports. (With two dials within a
    millisecond even a resetting NAT lets both through: that happened now and then before the offset.)"""
    with Network([HOME, HOME, HOME], nats={1: Nat(kind), 2: Nat(kind)}) as net:
        argv = [[*net.exec_prefix(i), sys.executable, "-c", CONNECT, net.address(j), str(LOCAL_PORT),
                 str(LOCAL_PORT), "6", str(delay)] for i, j, delay in ((1, 2, 0.0), (2, 1, DIAL_OFFSET_S))]
        both: list[subprocess.Popen[str]] = []
        try:
            first = subprocess.Popen(argv[0], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            both.append(first)
            assert first.stderr is not None
            ready, _, _ = select.select([first.stderr], [], [], 30)
            assert ready and first.stderr.readline().strip() == "dialing", "the first dialer did not start"
            both.append(subprocess.Popen(argv[1], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            results = [p.communicate(timeout=30)[0].strip() for p in both]
        finally:
            for p in both:
                if p.poll() is None:
                    p.kill()
                p.wait(timeout=10)
        assert (results == ["ok", "ok"]) == punched, results


def test_bad_nat_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="NAT kind"):
        Nat("cone")
    with pytest.raises(ValueError, match="forward_port"):
        Nat("forward")
    with pytest.raises(ValueError, match="forward_port"):
        Nat("drop", 80)

"""Which addresses others can reach, from their text (node/peer/reach_addrs.py): scopes, the join command's
address (confirmed public first, relays as the fallback hook) and the listen default."""

from __future__ import annotations

import pytest
from distro_node.node.peer.reach_addrs import (
    default_listen,
    ip_of,
    join_address,
    printable_addr,
    scope,
)


@pytest.mark.parametrize(("addr", "where"), [
    ("/ip4/127.0.0.1/tcp/1", "loopback"),
    ("/ip6/::1/tcp/1", "loopback"),
    ("/ip4/0.0.0.0/tcp/1", "all interfaces"),
    ("/ip4/192.168.1.5/tcp/1", "private"),
    ("/ip4/10.0.0.5/tcp/1", "private"),
    ("/ip4/100.64.3.2/tcp/1", "private"),  # carrier-grade NAT
    ("/ip4/169.254.1.1/tcp/1", "private"),
    ("/ip4/8.8.8.8/tcp/1", "public"),
    ("/dns4/example.org/tcp/1", "public"),
])
def test_scope(addr: str, where: str) -> None:
    assert scope(addr) == where


def test_ip_of_and_a_wildcard_made_printable() -> None:
    assert ip_of("/ip4/1.2.3.4/tcp/5/p2p/x") == "1.2.3.4"
    assert ip_of("/dns4/example.org/tcp/5") is None
    printable = printable_addr("/ip4/0.0.0.0/tcp/5/p2p/x")
    assert printable.endswith("/tcp/5/p2p/x")
    assert printable == "/ip4/0.0.0.0/tcp/5/p2p/x" or scope(printable) != "all interfaces"
    assert printable_addr("/ip4/1.2.3.4/tcp/5") == "/ip4/1.2.3.4/tcp/5"


def test_the_join_address_is_a_confirmed_public_one_then_a_private_one_then_a_relay() -> None:
    public, lan, loop = "/ip4/8.8.8.8/tcp/1", "/ip4/192.168.1.5/tcp/1", "/ip4/127.0.0.1/tcp/1"
    relay = "/ip4/8.8.4.4/tcp/1/p2p/R/p2p-circuit"
    assert join_address([lan, public]) == public
    assert join_address([lan]) == lan
    assert join_address([loop]) is None
    assert join_address([], [relay]) == relay
    assert join_address([lan], [relay]) == lan
    assert join_address([]) is None


def test_default_listen_follows_the_bootstrap_peers() -> None:
    assert default_listen(()) == ("/ip4/127.0.0.1/tcp/0",)
    assert default_listen(("/ip4/127.0.0.1/tcp/4/p2p/x",)) == ("/ip4/127.0.0.1/tcp/0",)
    elsewhere = ("/ip4/127.0.0.1/tcp/4/p2p/x", "/ip4/8.8.8.8/tcp/4/p2p/y")
    assert default_listen(elsewhere) == ("/ip4/0.0.0.0/tcp/0",)

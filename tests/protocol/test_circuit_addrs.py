"""Circuit and private-range addresses (protocol/addrs.py) and what a host behind a NAT advertises to whom
(P2PHost.advertised_addrs): pure parsing, and one loopback host for the advertising rule."""

from __future__ import annotations

import pytest
import trio
from distro_node.protocol.addrs import circuit_relay, is_circuit, is_private, same_lan, split_peer_addr
from distro_node.protocol.errors import BadMultiaddrError
from distro_node.protocol.testing import start_hosts
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from multiaddr import Multiaddr


def _id() -> ID:
    return ID.from_pubkey(create_new_key_pair().public_key)


def test_a_circuit_address_names_the_target_last_and_the_relay_before_it() -> None:
    relay, target = _id(), _id()
    peer, transport = split_peer_addr(f"/ip4/203.0.113.5/tcp/4001/p2p/{relay}/p2p-circuit/p2p/{target}")
    assert peer == target and str(transport) == f"/ip4/203.0.113.5/tcp/4001/p2p/{relay}/p2p-circuit"
    assert is_circuit(transport) and circuit_relay(transport) == relay
    assert not is_circuit(Multiaddr("/ip4/203.0.113.5/tcp/4001")) and circuit_relay(transport) != target
    with pytest.raises(BadMultiaddrError):
        split_peer_addr(f"/ip4/203.0.113.5/tcp/4001/p2p/{relay}/p2p-circuit/p2p/notanid")


@pytest.mark.parametrize(("addr", "private"), [
    ("/ip4/192.168.3.2/tcp/1", True), ("/ip4/10.1.2.3/tcp/1", True), ("/ip4/100.64.0.9/tcp/1", True),
    ("/ip4/169.254.1.1/tcp/1", True), ("/ip6/fd00::1/tcp/1", True), ("/ip4/8.8.8.8/tcp/1", False),
    ("/ip4/127.0.0.1/tcp/1", False), ("/dns4/example.org/tcp/1", False)])
def test_private_ranges(addr: str, private: bool) -> None:
    assert is_private(Multiaddr(addr)) is private


def test_same_lan_is_the_same_24_or_64() -> None:
    assert same_lan(Multiaddr("/ip4/192.168.3.2/tcp/1"), "192.168.3.77")
    assert not same_lan(Multiaddr("/ip4/192.168.3.2/tcp/1"), "192.168.2.2")
    assert same_lan(Multiaddr("/ip6/fd00::1/tcp/1"), "fd00::99") and not same_lan(
        Multiaddr("/ip6/fd00::1/tcp/1"), "192.168.3.2")


def test_behind_a_nat_lan_addresses_go_only_to_the_lan_and_circuits_to_everyone() -> None:
    async def body() -> None:
        async with start_hosts(1) as (host,):
            relay = _id()
            circuit = Multiaddr(f"/ip4/203.0.113.5/tcp/4001/p2p/{relay}/p2p-circuit")
            host.use_relays(object(), lambda: [circuit])  # type: ignore[arg-type]
            host._announce = [Multiaddr("/ip4/192.168.3.2/tcp/4001")]
            outsider = _id()
            shown = [str(a) for a in host.advertised_addrs(outsider)]
            assert shown == [f"/ip4/192.168.3.2/tcp/4001/p2p/{host.peer_id}", f"{circuit}/p2p/{host.peer_id}"]
            host.behind_nat = True
            shown = [str(a) for a in host.advertised_addrs(outsider)]
            assert shown == [f"{circuit}/p2p/{host.peer_id}"]
            host._watch.ip_of = lambda peer: "192.168.3.9" if peer == outsider else None  # type: ignore[method-assign]
            assert len(host.advertised_addrs(outsider)) == 2  # on our LAN after all

    trio.run(body)


def test_a_slow_connection_is_closed_only_where_we_can_dial_the_peer_again() -> None:
    async def body() -> None:
        async with start_hosts(1) as (host,):
            natted, public, relay = _id(), _id(), _id()
            host.peer_book.add(natted, [Multiaddr(f"/ip4/8.8.4.4/tcp/1/p2p/{relay}/p2p-circuit")])
            host.peer_book.add(public, [Multiaddr("/ip4/8.8.8.8/tcp/4001")])
            host.peer_book.add(relay, [Multiaddr("/ip4/8.8.4.4/tcp/1")])
            assert not host._may_redial(natted) and host._may_redial(public) and host._may_redial(relay)
            assert not host._may_redial(_id())  # dialed us, never said where it listens
            host.use_relays(object(), list, lambda: {relay})  # type: ignore[arg-type]
            assert not host._may_redial(relay)  # our circuits run through it

    trio.run(body)

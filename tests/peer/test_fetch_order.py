"""How a payload fetch reaches each holder (direct, relayed, to dial), and which it leaves out at once."""

from __future__ import annotations

from distro_node.node.peer.payload_exchange import routes
from distro_node.protocol.addrs import worth_dialing
from distro_node.protocol.circuits import Kind
from distro_node.protocol.fetch_plan import Route
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from multiaddr import Multiaddr


def _ids(n: int) -> list[ID]:
    return [ID.from_pubkey(create_new_key_pair(bytes([i + 1]) * 32).public_key) for i in range(n)]


def test_each_holder_gets_its_route_and_an_unreachable_one_is_left_out() -> None:
    origin, public_a, natted, dialable, gone = _ids(5)
    kinds = {origin: Kind.RELAYED, public_a: Kind.DIRECT, natted: Kind.RELAYED, dialable: Kind.NONE,
             gone: Kind.NONE}
    got = routes([origin, gone, dialable, natted, public_a], kinds.__getitem__, lambda p: p == dialable)
    assert got == [(origin, Route.RELAYED), (dialable, Route.DIAL), (natted, Route.RELAYED),
                   (public_a, Route.DIRECT)]


def test_only_addresses_we_could_reach_are_worth_dialing() -> None:
    ours = [Multiaddr("/ip4/192.168.2.2/tcp/4001")]
    other_lan = Multiaddr("/ip4/192.168.4.2/tcp/4001")
    same_lan = Multiaddr("/ip4/192.168.2.7/tcp/4001")
    public = Multiaddr("/ip4/93.184.216.34/tcp/4001")
    circuit = Multiaddr(f"/ip4/203.0.113.5/tcp/4001/p2p/{_ids(1)[0]}/p2p-circuit")
    assert not worth_dialing([other_lan], ours, circuits=True)
    assert worth_dialing([other_lan, same_lan], ours, circuits=False)
    assert worth_dialing([public], ours, circuits=False)
    assert worth_dialing([circuit], ours, circuits=True)
    assert not worth_dialing([circuit], ours, circuits=False)
    assert worth_dialing([other_lan], [Multiaddr("/ip4/0.0.0.0/tcp/4001")], circuits=False)  # LAN unknown

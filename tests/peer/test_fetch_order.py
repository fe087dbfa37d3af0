"""Which holders a payload fetch asks first: direct connections, then relayed ones, then unconnected peers."""

from __future__ import annotations

from distro_node.node.peer.fetcher import by_path
from distro_node.protocol.circuits import Kind
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID


def _ids(n: int) -> list[ID]:
    return [ID.from_pubkey(create_new_key_pair(bytes([i + 1]) * 32).public_key) for i in range(n)]


def test_direct_before_relayed_before_unconnected_keeping_the_given_order_within_each() -> None:
    origin, public_a, public_b, natted, gone = _ids(5)
    kinds = {origin: Kind.RELAYED, public_a: Kind.DIRECT, public_b: Kind.DIRECT, natted: Kind.RELAYED,
             gone: Kind.NONE}
    order = by_path([origin, gone, public_b, natted, public_a], kinds.__getitem__)
    assert order == [public_b, public_a, origin, natted, gone]


def test_all_direct_keeps_the_order() -> None:
    peers = _ids(4)
    assert by_path(peers, lambda _: Kind.DIRECT) == peers

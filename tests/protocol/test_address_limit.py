"""The per-address rule (protocol/address_limit.py): distinct peer ids per remote IP, loopback exempt."""

from __future__ import annotations

from distro_node.protocol.address_limit import over_limit, remote_ip
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID

PEERS = [ID.from_pubkey(create_new_key_pair().public_key) for _ in range(4)]


def test_the_limit_counts_other_peers_on_the_same_address_only() -> None:
    held = {PEERS[0]: "203.0.113.7", PEERS[1]: "203.0.113.7", PEERS[2]: "198.51.100.1"}
    assert over_limit(PEERS[3], "203.0.113.7", held, 2)
    assert not over_limit(PEERS[3], "198.51.100.1", held, 2)
    assert not over_limit(PEERS[1], "203.0.113.7", held, 2)  # a second connection of a peer already held
    assert not over_limit(PEERS[3], "203.0.113.7", held, 0)  # 0: no limit


def test_loopback_and_unknown_addresses_are_exempt() -> None:
    held = dict.fromkeys(PEERS[:3], "127.0.0.1")
    assert not over_limit(PEERS[3], "127.0.0.1", held, 1)
    assert not over_limit(PEERS[3], "::1", dict.fromkeys(PEERS[:3], "::1"), 1)
    assert not over_limit(PEERS[3], None, held, 1)  # a relayed connection has no remote IP of its own
    assert remote_ip(object()) is None

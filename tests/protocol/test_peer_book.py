"""Peer exchange hearsay cannot rewrite or crowd out what a peer said for itself
(protocol/peer_exchange.py)."""

from __future__ import annotations

from distro_node.protocol.identity import peer_id_of
from distro_node.protocol.peer_exchange import PeerBook
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from multiaddr import Multiaddr


def new_id() -> ID:
    return peer_id_of(create_new_key_pair())


def tcp(port: int, peer: ID | None = None) -> Multiaddr:
    text = f"/ip4/127.0.0.1/tcp/{port}"
    return Multiaddr(text + (f"/p2p/{peer}" if peer is not None else ""))


def test_a_reply_cannot_rewrite_a_confirmed_address_but_speaks_for_its_sender() -> None:
    book, honest, liar = PeerBook(new_id()), new_id(), new_id()
    book.add(honest, [tcp(4001)])  # the honest peer's own word (or a dial that worked)
    learned = book.add_peer_addrs([tcp(6666, honest), tcp(5001, liar)], source=liar)
    assert set(learned) == {honest, liar}
    assert book.addrs(honest) == (tcp(4001),)
    assert book.addrs(liar) == (tcp(5001),)
    assert book.hearsay_refused == 1  # /metrics: distro_requests_refused_total{what="px_hearsay"}
    book.add_peer_addrs([tcp(4001, honest)], source=liar)  # hearsay that agrees is no lie
    assert book.hearsay_refused == 1
    stranger = new_id()
    book.add_peer_addrs([tcp(7001, stranger)], source=liar)  # hearsay fills a gap ...
    assert book.addrs(stranger) == (tcp(7001),)
    book.add(stranger, [tcp(7002)])  # ... until the peer's own word replaces it
    book.add_peer_addrs([tcp(6667, stranger)], source=liar)
    assert book.addrs(stranger) == (tcp(7002),)


def test_made_up_peers_are_evicted_before_any_confirmed_one() -> None:
    book = PeerBook(new_id(), max_peers=4)
    confirmed = [new_id() for _ in range(3)]
    for i, peer in enumerate(confirmed):
        book.add(peer, [tcp(4000 + i)])
    liar = new_id()
    book.add_peer_addrs([tcp(5000 + i, new_id()) for i in range(40)], source=liar)
    assert len(book) == 4 and all(peer in book for peer in confirmed)


def test_hearsay_into_a_book_full_of_confirmed_peers_evicts_only_itself() -> None:
    book = PeerBook(new_id(), max_peers=3)
    confirmed = [new_id() for _ in range(3)]
    for i, peer in enumerate(confirmed):
        book.add(peer, [tcp(4000 + i)])
    book.add_peer_addrs([tcp(5000 + i, new_id()) for i in range(10)], source=new_id())
    assert sorted(map(str, book.known())) == sorted(map(str, confirmed))
    assert [book.addrs(p) for p in confirmed] == [(tcp(4000 + i),) for i in range(3)]

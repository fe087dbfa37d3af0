"""Peer exchange (`/distro/peers/1.0.0`): wire codec and the bounded address book behind it.

A joining node knows one bootstrap address; an all-to-all payload exchange needs everyone. The exchange is a
single request/reply: the dialer sends its own listen addresses (so the other side can hand them on; the
source address of an inbound TCP connection is an ephemeral port and useless to third parties), the listener
replies with itself and the peers it is connected to. Both directions are capped in entry count and entry
length before anything is parsed, because both come from untrusted peers.

Wire format (both directions): u16 count, then count x (u16 length, UTF-8 multiaddr text).
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID
from multiaddr import Multiaddr

from .addrs import MAX_ADDR_TEXT, is_dialable, parse_multiaddr, split_peer_addr
from .errors import BadMultiaddrError, PeerExchangeError
from .wire import ByteReader, ShortReadError, read_exactly

PX_PROTOCOL = TProtocol("/distro/peers/1.0.0")
MAX_PX_ENTRIES = 64
MAX_SELF_ADDRS = 8
_U16 = struct.Struct(">H")


def encode_addr_list(addrs: Sequence[Multiaddr], limit: int = MAX_PX_ENTRIES) -> bytes:
    """Encode at most ``limit`` addresses; over-long ones are skipped rather than truncated."""
    parts: list[bytes] = []
    for addr in addrs:
        text = str(addr).encode()
        if len(text) <= MAX_ADDR_TEXT:
            parts.append(_U16.pack(len(text)) + text)
        if len(parts) >= limit:
            break
    return _U16.pack(len(parts)) + b"".join(parts)


async def read_addr_list(stream: ByteReader, max_entries: int) -> list[Multiaddr]:
    """Read a capped list; entries that do not parse are dropped, cap violations raise."""
    try:
        (count,) = _U16.unpack(await read_exactly(stream, _U16.size))
        if count > max_entries:
            raise PeerExchangeError(f"peer list of {count} entries exceeds cap {max_entries}")
        out: list[Multiaddr] = []
        for _ in range(count):
            (length,) = _U16.unpack(await read_exactly(stream, _U16.size))
            if length == 0 or length > MAX_ADDR_TEXT:
                raise PeerExchangeError(f"peer list entry of {length} bytes (cap {MAX_ADDR_TEXT})")
            raw = await read_exactly(stream, length)
            try:
                out.append(parse_multiaddr(raw.decode("utf-8")))
            except (UnicodeDecodeError, BadMultiaddrError):
                continue
        return out
    except ShortReadError as exc:
        raise PeerExchangeError(f"truncated peer list: {exc}") from exc


class PeerBook:
    """Dialable addresses per peer, learned from bootstrap, dials and peer exchange.

    Kept by us rather than read from the libp2p peerstore because 0.8.1 stores addresses with a TTL (120 s
    on ``connect``) and mixes in observed ephemeral addresses; we want exactly what peers say they listen on,
    bounded, least-recently-updated evicted first.

    Whose word counts: addresses a peer gave for itself, or that we dialed it on, are *confirmed*; addresses
    a peer-exchange reply gives for third parties are *hearsay*. Hearsay never replaces a confirmed entry
    and is evicted before any confirmed one, so a lying peer can neither point us away from an honest peer
    nor push honest peers out of a full book by naming thousands of made-up ones.
    """

    def __init__(self, own_id: ID, max_peers: int = 1024, max_addrs_per_peer: int = MAX_SELF_ADDRS) -> None:
        self._own_id = own_id
        self._max_peers = max_peers
        self._max_addrs = max_addrs_per_peer
        self._book: OrderedDict[ID, tuple[Multiaddr, ...]] = OrderedDict()
        self._confirmed: set[ID] = set()
        self.hearsay_refused = 0  # third-party claims that differed from a confirmed entry (kept out)

    def add(self, peer_id: ID, transports: Iterable[Multiaddr], *, hearsay: bool = False) -> None:
        """Addresses for ``peer_id``: its own word or a dial that worked, unless ``hearsay``."""
        if peer_id == self._own_id:
            return
        if hearsay and peer_id in self._confirmed:
            self.hearsay_refused += any(a not in self._book.get(peer_id, ()) for a in transports)
            return
        fresh: list[Multiaddr] = []
        for addr in transports:
            if is_dialable(addr) and addr not in fresh:
                fresh.append(addr)
            if len(fresh) >= self._max_addrs:
                break
        if not fresh:
            return
        self._book[peer_id] = tuple(fresh)
        self._book.move_to_end(peer_id)
        if not hearsay:
            self._confirmed.add(peer_id)
        while len(self._book) > self._max_peers:
            victim = next((p for p in self._book if p not in self._confirmed), next(iter(self._book)))
            self.forget(victim)

    def add_peer_addrs(self, addrs: Iterable[Multiaddr], source: ID | None = None) -> list[ID]:
        """Add ``.../p2p/<id>`` addresses (as received in a reply from ``source``: its own are confirmed,
        the rest hearsay); returns the peer ids seen."""
        grouped: dict[ID, list[Multiaddr]] = {}
        for addr in addrs:
            try:
                peer_id, transport = split_peer_addr(addr)
            except BadMultiaddrError:
                continue
            grouped.setdefault(peer_id, []).append(transport)
        for peer_id, transports in grouped.items():
            self.add(peer_id, transports, hearsay=peer_id != source)
        return [p for p in grouped if p != self._own_id]

    def addrs(self, peer_id: ID) -> tuple[Multiaddr, ...]:
        return self._book.get(peer_id, ())

    def known(self) -> list[ID]:
        return list(self._book)

    def forget(self, peer_id: ID) -> None:
        self._book.pop(peer_id, None)
        self._confirmed.discard(peer_id)

    def __contains__(self, peer_id: object) -> bool:
        return peer_id in self._book

    def __len__(self) -> int:
        return len(self._book)


class RedialSchedule:
    """When to dial again a known peer we are not connected to: at once, then after 1, 2, 4, 8, 10, 10 ... s.

    Why: peer exchange only advertises connected peers. After a partition both sides have closed their
    links across the cut, so no exchange ever names the other side again, and without redialing known
    peers the swarm stayed two islands after the network healed. A peer that stays unreachable for
    ``give_up_after`` attempts (~10 min with the defaults) is forgotten, so dead peers cost nothing for good.
    The cap bounds how long a healed partition stays split: a 60 s cut has backed every dial off to it.
    Pure: time is passed in. Bounded by the peer book it is fed from.
    """

    def __init__(self, base: float = 1.0, cap: float = 10.0, give_up_after: int = 64) -> None:
        self._base, self._cap, self._give_up = base, cap, give_up_after
        self._next: dict[ID, tuple[float, int]] = {}  # peer -> (next attempt time, failed attempts)

    def due(self, candidates: Iterable[ID], now: float) -> list[ID]:
        """The candidates whose next attempt has come, least-tried first."""
        candidates = list(candidates)
        keep = set(candidates)
        for peer in [p for p in self._next if p not in keep]:  # connected again, or gone from the book
            del self._next[peer]
        ready = [p for p in candidates if self._next.get(p, (now, 0))[0] <= now]
        return sorted(ready, key=lambda p: self._next.get(p, (now, 0))[1])

    def failed(self, peer_id: ID, now: float, *, count: bool = True) -> bool:
        """Record a failed dial; True when the peer should be forgotten. ``count=False`` backs off without
        moving towards forgetting (a dial made while we had no connection at all says nothing of the peer).
        """
        before = self._next.get(peer_id, (now, 0))[1]
        attempts = before + 1
        if count and attempts >= self._give_up:
            self._next.pop(peer_id, None)
            return True
        if not count and before and self._base * 2 ** (before - 1) >= self._cap:
            attempts = before  # already backed off to the cap: an uncounted failure adds nothing
        self._next[peer_id] = (now + min(self._cap, self._base * 2 ** (attempts - 1)), attempts)
        return False

    def succeeded(self, peer_id: ID) -> None:
        self._next.pop(peer_id, None)

    def __len__(self) -> int:
        return len(self._next)

"""Multiaddr parsing at the trust boundary.

Addresses arrive from the command line (bootstrap list) and from other peers (peer exchange). Both are
untrusted text, and the multiaddr/py-libp2p parsers raise a zoo of exception types (``StringParseError``,
``InvalidAddrError``, ``ProtocolLookupError``, ``ValueError``...). Funnel them into ``BadMultiaddrError`` here
so callers handle exactly one type.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from libp2p.peer.id import ID
from multiaddr import Multiaddr

from .errors import BadMultiaddrError

# Longer than any sane /ip6/.../tcp/.../p2p/... address; bounds what a peer can make us parse.
MAX_ADDR_TEXT = 256
_DIALABLE_NET = ("ip4", "ip6", "dns", "dns4", "dns6")
CIRCUIT = "p2p-circuit"


def parse_multiaddr(text: str) -> Multiaddr:
    """Parse one multiaddr string, rejecting empty and oversized input."""
    if not isinstance(text, str):
        raise BadMultiaddrError(repr(text), "not a string")
    if not text or len(text) > MAX_ADDR_TEXT:
        raise BadMultiaddrError(text[:MAX_ADDR_TEXT], f"length must be 1..{MAX_ADDR_TEXT} characters")
    try:
        addr = Multiaddr(text)
    except Exception as exc:  # the multiaddr package raises several unrelated types
        raise BadMultiaddrError(text, str(exc)) from exc
    if not list(addr.protocols()):
        raise BadMultiaddrError(text, "no protocols")
    return addr


def split_peer_addr(addr: Multiaddr | str) -> tuple[ID, Multiaddr]:
    """Split ``<transport>/p2p/<id>`` into (peer id, transport part); the id is required to dial securely."""
    maddr = parse_multiaddr(addr) if isinstance(addr, str) else addr
    text = str(maddr)
    protocols = [p.name for p in maddr.protocols()]
    if not protocols or protocols[-1] != "p2p":
        raise BadMultiaddrError(text, "must end with /p2p/<peer id>")
    if CIRCUIT in protocols:  # <relay transport>/p2p/<relay>/p2p-circuit/p2p/<id>: the id is the last part
        head, _, peer_text = text.rpartition("/p2p/")
        try:
            return ID.from_base58(peer_text), parse_multiaddr(head)
        except BadMultiaddrError:
            raise
        except Exception as exc:
            raise BadMultiaddrError(text, f"bad /p2p/ component ({exc})") from exc
    try:
        peer_text = maddr.value_for_protocol("p2p")
        peer_id = ID.from_base58(str(peer_text))
        transport = maddr.decapsulate(Multiaddr(f"/p2p/{peer_text}"))
    except Exception as exc:
        raise BadMultiaddrError(text, f"bad /p2p/ component ({exc})") from exc
    if not list(transport.protocols()):
        raise BadMultiaddrError(text, "no transport address before /p2p/")
    return peer_id, transport


def with_peer_id(transport: Multiaddr, peer_id: ID) -> Multiaddr:
    """Append ``/p2p/<id>`` to a transport address."""
    return transport.encapsulate(Multiaddr(f"/p2p/{peer_id}"))


def is_dialable(transport: Multiaddr) -> bool:
    """TCP over an IP or DNS name, and not an unspecified (0.0.0.0 / ::) listen address."""
    names = [p.name for p in transport.protocols()]
    if len(names) < 2 or names[0] not in _DIALABLE_NET or names[1] != "tcp":
        return False
    if names[0] in ("ip4", "ip6"):
        ip = _ip_of(transport)
        if ip is None or ip.is_unspecified or ip.is_multicast:
            return False
    return True


def is_circuit(transport: Multiaddr) -> bool:
    """A relayed address (``.../p2p/<relay>/p2p-circuit``): dialed through the relay, never by the swarm."""
    return CIRCUIT in [p.name for p in transport.protocols()]


def circuit_relay(transport: Multiaddr) -> ID | None:
    """The relay a circuit address goes through (None for a direct address or a malformed one)."""
    if not is_circuit(transport):
        return None
    head = str(transport).split("/" + CIRCUIT)[0]
    try:
        return ID.from_base58(head.rpartition("/p2p/")[2])
    except Exception:
        return None


def is_private(transport: Multiaddr) -> bool:
    """An IP address only its own network can reach (RFC 1918, link-local, CGNAT), loopback excepted:
    advertising it to peers elsewhere only makes them dial somebody else's LAN (issue 15)."""
    ip = _ip_of(transport)
    if ip is None or is_circuit(transport) or ip.is_loopback:
        return False
    return ip.is_private or ip.is_link_local or ip in _CGNAT


_CGNAT = ipaddress.ip_network("100.64.0.0/10")


def same_lan(addr: Multiaddr, ip: str) -> bool:
    """Whether ``addr``'s IP and ``ip`` share a /24 (IPv4) or /64 (IPv6): a peer on our own LAN."""
    mine = _ip_of(addr)
    try:
        theirs = ipaddress.ip_address(ip)
    except ValueError:
        return False
    if mine is None or mine.version != theirs.version:
        return False
    return theirs in ipaddress.ip_network(f"{mine}/{24 if mine.version == 4 else 64}", strict=False)


def worth_dialing(addrs: Iterable[Multiaddr], own: Iterable[Multiaddr], *, circuits: bool) -> bool:
    """Whether a peer we hold no connection to could be reached at ``addrs``: a circuit address (when we
    can dial those), a public one, or a private-range one on the LAN of one of our ``own`` addresses.
    Anything else is somebody else's LAN: dialing it only waits out the dial timeout (issue 15). Listening on
    all interfaces (0.0.0.0) we cannot tell our LAN, so every private address then counts."""
    own_ips = [ip for ip in (_ip_of(a) for a in own) if ip is not None]
    anywhere = any(ip.is_unspecified for ip in own_ips)
    for addr in addrs:
        if is_circuit(addr):
            if circuits:
                return True
        elif anywhere or not is_private(addr) or any(same_lan(addr, str(ip)) for ip in own_ips):
            return True
    return False


def _ip_of(addr: Multiaddr) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP an address starts with; None for a DNS name, a non-IP address or one that does not parse."""
    names = [p.name for p in addr.protocols()]
    if not names or names[0] not in ("ip4", "ip6"):
        return None
    try:
        return ipaddress.ip_address(str(addr.value_for_protocol(names[0])))
    except Exception:  # multiaddr raises its own errors for a malformed value
        return None

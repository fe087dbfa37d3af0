"""Which of our addresses others can reach, told from their text alone (no libp2p import: doctor uses it).

Why: `join` prints the command other machines run, and an address on loopback, a private range or the
wildcard 0.0.0.0 reaches nobody outside this machine or home network. What is known from text is only
where an address *cannot* be reached from; whether it *can* is for dial-back probes to say
(reachability_watch.py).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence

LOOPBACK_LISTEN = "/ip4/127.0.0.1/tcp/0"
ALL_INTERFACES_LISTEN = "/ip4/0.0.0.0/tcp/0"
# Any address outside this machine: connecting a UDP socket sends nothing, it only picks the route.
_ROUTE_PROBE = ("192.0.2.1", 9)
_SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT: as unreachable as 192.168/16


def ip_of(addr: str) -> str | None:
    """The IP of a multiaddr's ``/ip4/`` or ``/ip6/`` part, None for other kinds (dns, circuit)."""
    parts = str(addr).split("/")
    for i, name in enumerate(parts[:-1]):
        if name in ("ip4", "ip6"):
            return parts[i + 1]
    return None


def _ip(addr: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    text = ip_of(addr)
    try:
        return ipaddress.ip_address(text) if text is not None else None
    except ValueError:
        return None


def is_loopback(addr: str) -> bool:
    ip = _ip(addr)
    return ip is not None and ip.is_loopback


def is_wildcard(addr: str) -> bool:
    ip = _ip(addr)
    return ip is not None and ip.is_unspecified


def scope(addr: str) -> str:
    """Who could dial ``addr`` at best: ``loopback``, ``all interfaces`` (the wildcard: whatever this machine
    has), ``private`` (this network only: RFC 1918, link-local, carrier-grade NAT) or ``public``."""
    ip = _ip(addr)
    if ip is None:
        return "public"  # a DNS name or a relay address: meant for others by whoever wrote it
    if ip.is_loopback:
        return "loopback"
    if ip.is_unspecified:
        return "all interfaces"
    if ip.is_private or ip.is_link_local or (ip.version == 4 and ip in _SHARED):
        return "private"
    return "public"


def beyond_loopback(addrs: Sequence[str]) -> bool:
    """Whether any address could be dialed from another machine at all."""
    return any(not is_loopback(a) for a in addrs)


def default_listen(bootstrap: Sequence[str]) -> tuple[str, ...]:
    """Where `join` listens when no layer says: all interfaces when it joins peers on other machines, else
    loopback (a founder, or a local swarm on one machine, keep to loopback until told to listen wider)."""
    return (ALL_INTERFACES_LISTEN,) if beyond_loopback(bootstrap) else (LOOPBACK_LISTEN,)


def primary_ip() -> str | None:
    """The IPv4 address this machine's default route leaves from, None without one."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(_ROUTE_PROBE)
            ip = str(s.getsockname()[0])
    except OSError:
        return None
    return None if ip.startswith("0.") else ip


def printable_addr(addr: str) -> str:
    """``addr`` with a wildcard IP replaced by the primary one, so a printed command can be dialed."""
    ip = ip_of(addr)
    if ip is None or not is_wildcard(addr):
        return addr
    primary = primary_ip()
    return addr.replace(f"/{ip}/", f"/{primary}/", 1) if primary else addr


def join_address(confirmed: Sequence[str], relays: Sequence[str] = ()) -> str | None:
    """The address a printed join command should name: the first confirmed public one, else a confirmed one in
    a private range (its probers share that network: a lab), else a relay (circuit) address, else None
    (nothing others can reach yet).

    ``relays`` is the hook for circuit relays: pass this node's ``/p2p-circuit`` addresses once it holds
    reservations, and a NAT'd node's join command names one of them."""
    public = [a for a in confirmed if scope(a) == "public"]
    private = [a for a in confirmed if scope(a) == "private"]
    reachable = public or private or list(relays)
    return reachable[0] if reachable else None

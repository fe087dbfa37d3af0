"""At most a few peer ids connected from one IP address: one machine cannot bring a crowd of identities.

Why: in an open run an identity costs nothing, and what bounds how many a machine brings in is that each
needs a connection. Counting distinct peer ids per remote IP (connections, not identities, are what the
machine pays for) puts a price on a Sybil crowd: addresses. Loopback is exempt (a local swarm runs many
peers on one machine, on purpose), so is a limit of 0. Several volunteers behind one home NAT share an
address, hence a few, not one.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from libp2p.peer.id import ID


def remote_ip(conn: object) -> str | None:
    """The remote IP of a libp2p connection (None if its muxer does not say, e.g. a relayed one)."""
    muxed = getattr(conn, "muxed_conn", None)
    getter = getattr(muxed, "get_remote_address", None)
    try:
        address = getter() if callable(getter) else None
    except Exception:  # a connection going down under us
        return None
    return str(address[0]) if isinstance(address, tuple) and address else None


def over_limit(peer: ID, ip: str | None, connected_ips: Mapping[ID, str], per_address: int) -> bool:
    """Whether ``peer``, just connected from ``ip``, makes that address hold more than ``per_address``
    distinct peer ids (``connected_ips``: the other connected peers' addresses)."""
    if per_address <= 0 or ip is None:
        return False
    try:
        if ipaddress.ip_address(ip).is_loopback:
            return False
    except ValueError:
        return False
    others = {p for p, other_ip in connected_ips.items() if other_ip == ip and p != peer}
    return len(others) >= per_address


__all__ = ["over_limit", "remote_ip"]

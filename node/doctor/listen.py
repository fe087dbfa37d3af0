"""Can this machine bind the configured listen addresses, and who could reach them?

Why a plain socket rather than a libp2p host: py-libp2p 0.8.1 only logs a listener that fails to bind and
runs on with no address, so the failure would be invisible. A bind (no ``listen``, no traffic) is exactly
the step that fails for an address that is not on this machine or a port already taken; SO_REUSEADDR is set
as trio's listeners set it, so a port in TIME_WAIT is not reported as taken.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass

from distro_node.node.doctor.report import FAIL, PASS, WARN, Check, worst
from distro_node.protocol.addrs import parse_multiaddr
from distro_node.protocol.errors import BadMultiaddrError


@dataclass(frozen=True)
class BindResult:
    addr: str
    status: str
    note: str
    hint: str = ""


_ELSEWHERE = (
    "set network.listen to an address of this machine, e.g. /ip4/0.0.0.0/tcp/4747 (all interfaces), and put "
    "the public address in network.announce_addrs"
)


def _ip_and_port(text: str) -> tuple[str, int]:
    """(ip, tcp port) of an ``/ip4|ip6/<ip>/tcp/<port>`` multiaddr; ValueError for anything else."""
    try:
        maddr = parse_multiaddr(text)
    except BadMultiaddrError as exc:
        raise ValueError(str(exc)) from None
    names = [p.name for p in maddr.protocols()]
    if len(names) != 2 or names[0] not in ("ip4", "ip6") or names[1] != "tcp":
        raise ValueError("only /ip4/<ip>/tcp/<port> and /ip6/<ip>/tcp/<port> can be listened on")
    return str(maddr.value_for_protocol(names[0])), int(str(maddr.value_for_protocol("tcp")))


def _scope(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, announced: bool) -> tuple[str, str]:
    if ip.is_loopback:
        return WARN, "loopback: only peers on this machine can connect"
    if ip.is_unspecified:
        note = "all interfaces"
    elif ip.is_private or ip.is_link_local:
        note = "private address"
    else:
        return PASS, "public address"
    if announced:
        return PASS, f"{note}; network.announce_addrs tells peers where to dial"
    return PASS, f"{note}: peers outside this network need a forwarded port and network.announce_addrs"


def try_bind(text: str, announced: bool) -> BindResult:
    """Bind ``text`` and release it at once; the status says whether a node could listen there."""
    try:
        host, port = _ip_and_port(text)
    except ValueError as exc:
        return BindResult(text, FAIL, str(exc), _ELSEWHERE)
    ip = ipaddress.ip_address(host)
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            bound = sock.getsockname()[1]
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if exc.errno == errno.EADDRINUSE:
            return BindResult(
                text, WARN, f"port {port} is in use ({reason}): fine if this node holds it",
                "stop the process holding the port (`ss -ltnp`) or pick another port in network.listen",
            )
        if exc.errno == errno.EADDRNOTAVAIL:
            return BindResult(text, FAIL, f"{host} is not an address of this machine ({reason})", _ELSEWHERE)
        if exc.errno == errno.EACCES:
            return BindResult(text, FAIL, f"cannot bind ({reason})", "use a port >= 1024 in network.listen")
        return BindResult(text, FAIL, f"cannot bind ({reason})", _ELSEWHERE)
    status, note = _scope(ip, announced)
    port_note = f"port {bound} free" if port else "any free port"
    hint = "listen on /ip4/0.0.0.0/tcp/<port> to accept peers from other machines" if status == WARN else ""
    return BindResult(text, status, f"bound ({port_note}); {note}", hint)


def check_listen(addrs: Sequence[str], announce_addrs: Sequence[str]) -> Check:
    results = [try_bind(a, bool(announce_addrs)) for a in addrs]
    status = worst([r.status for r in results])
    summary = "; ".join(f"{r.addr}: {r.note}" for r in results)
    hint = "; ".join(dict.fromkeys(r.hint for r in results if r.hint))  # unique, in address order
    details = {"addresses": [{"addr": r.addr, "status": r.status, "note": r.note} for r in results]}
    return Check("listen", status, summary, hint=hint, details=details)

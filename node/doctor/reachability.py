"""Doctor's reachability check: can peers on other networks dial this machine, and what would it advertise?

Why in doctor: a volunteer behind a home NAT otherwise learns only from slow rounds that nobody can dial it.
Three parts, each bounded so doctor never hangs: where the listen addresses can be reached from at best
(loopback, this network, public: from their text); whether the home router maps a port by UPnP (a test
mapping, deleted at once, when network.upnp is on and we listen beyond loopback; at most a few seconds); and,
only when given peers to ask (``--bootstrap``), the dial-back probe (protocol/dialback.py) with the mapping in
place. The verdict, in the words the issue and the docs use:

- ``public``: a peer dialed us back on a fresh connection; the confirmed address is what we advertise;
- ``NAT (hole punching possible)``: nobody could dial us, and every prober saw one public IP, as behind most
  home routers, through which a direct connection can be punched;
- ``relay only``: nobody could dial us and the probers saw different IPs, or an IP in a private or
  carrier-grade NAT range (a second NAT upstream): only relayed connections will work.

One prober's word is enough here (the daemon waits for two): doctor reports what it saw, it advertises
nothing.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from ..peer.reach_addrs import beyond_loopback, scope
from ..peer.upnp import PortMapper, PortMapping, UpnpError
from .report import PASS, WARN, Check

PUBLIC = "public"
NAT = "NAT (hole punching possible)"
RELAY_ONLY = "relay only"
# miniupnpc's discovery took 4.0 s to give up on a network without any UPnP device (whatever the delay), so
# this bounds doctor's offline run to a few seconds more and still lets a slow router answer.
UPNP_DISCOVER_MS = 1000
UPNP_CALL_TIMEOUT_S = 5.0
PROBE_TIMEOUT_S = 45.0
PROBERS = 2
TEST_LEASE_S = 600  # deleted at once; the lease only bounds a mapping left by a doctor that was killed


@dataclass
class Seen:
    """What doctor found out; ``probed`` False when no peer was asked."""

    upnp: str = "not tried"
    mapping: PortMapping | None = None
    probed: bool = False
    answers: list[tuple[str, str, list[int]]] = field(default_factory=list)  # prober, observed ip, reached
    error: str | None = None
    ports: list[int] = field(default_factory=list)


def _port(addr: str) -> int:
    parts = addr.split("/")
    return int(parts[parts.index("tcp") + 1]) if "tcp" in parts else 0


async def _map(port: int, seen: Seen) -> PortMapper | None:
    mapper = PortMapper(port, lease_seconds=TEST_LEASE_S, discover_ms=UPNP_DISCOVER_MS,
                        call_timeout=UPNP_CALL_TIMEOUT_S)
    try:
        seen.mapping = await mapper.open()
    except UpnpError as exc:
        seen.upnp = f"nothing mapped: {exc}"
        return None
    seen.upnp = f"the router maps {seen.mapping.describe()}"
    return mapper


def _free(port: int) -> bool:
    """Whether nothing listens on ``port``: a running node holds its own mapping, which a test mapping's
    deletion would take from it."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def _why_no_upnp(listen: Sequence[str], upnp: bool, port: int, *, ours: bool) -> str | None:
    """Why no test mapping is made, or None to make one; ``ours``: we hold the port ourselves."""
    if not upnp:
        return "off (network.upnp = false)"
    if not beyond_loopback(listen):
        return "not tried: listening on loopback only"
    if not port:
        return "not tried: the listen port is chosen at start (tcp/0); give --bootstrap to map the bound one"
    if not ours and not _free(port):
        return f"not tried: port {port} is in use (a running node there keeps its own mapping)"
    return None


async def _mapped(port: int, seen: Seen, listen: Sequence[str], upnp: bool, *,
                  ours: bool) -> PortMapper | None:
    why_not = _why_no_upnp(listen, upnp, port, ours=ours)
    if why_not is not None:
        seen.upnp = why_not
        return None
    return await _map(port, seen)


async def _close(mapper: PortMapper | None) -> None:
    if mapper is not None:
        with trio.CancelScope(shield=True):
            try:
                await mapper.close()
            except UpnpError:
                pass  # leased: the router drops it when the lease ends


async def _probe(listen: Sequence[str], bootstrap: Sequence[str], upnp: bool, seen: Seen) -> None:
    # Imported here: libp2p is slow to import and only needed when peers are asked.
    from distro_node.protocol.dialback import MAX_PROBE_PORTS, probe
    from distro_node.protocol.errors import TransportError
    from distro_node.protocol.host import HostConfig, open_host
    from libp2p.crypto.ed25519 import create_new_key_pair

    from ..peer.reachability_watch import listen_ports

    config = HostConfig(listen_addrs=tuple(listen), px_interval=0.0)
    async with open_host(create_new_key_pair(), config) as host:
        ports = listen_ports(host)
        if not ports:
            seen.error = f"could not listen on {', '.join(listen)}"
            return
        mapper = await _mapped(ports[0], seen, listen, upnp, ours=True)
        try:
            if seen.mapping is not None and seen.mapping.external_port not in ports:
                ports = [seen.mapping.external_port, *ports][:MAX_PROBE_PORTS]
            seen.ports = ports
            try:
                await host.bootstrap(list(bootstrap))
            except TransportError as exc:
                seen.error = f"could not reach a bootstrap peer: {exc}"
                return
            for peer in sorted(host.member_peers(), key=str)[:PROBERS]:
                try:
                    answer = await probe(host, peer, ports)
                except TransportError as exc:
                    seen.error = f"a prober did not answer: {exc}"
                    continue
                seen.probed = True
                seen.answers.append((str(peer), answer.observed_ip,
                                     [p for p, ok in answer.reached.items() if ok]))
        finally:
            await _close(mapper)


async def _look(listen: Sequence[str], bootstrap: Sequence[str], upnp: bool, seen: Seen) -> None:
    if not bootstrap:
        await _close(await _mapped(_port(listen[0]), seen, listen, upnp, ours=False))
        return
    with trio.move_on_after(PROBE_TIMEOUT_S) as deadline:
        await _probe(listen, bootstrap, upnp, seen)
    if deadline.cancelled_caught:
        seen.error = f"no verdict within {PROBE_TIMEOUT_S:g}s"


def verdict(seen: Seen) -> tuple[str, str] | None:
    """The three-word verdict and why, or None when no prober answered."""
    if not seen.probed:
        return None
    reached = [(ip, port) for _, ip, ports in seen.answers for port in ports]
    if reached:
        ip, port = reached[0]
        return PUBLIC, f"a peer dialed {ip}:{port} back on a fresh connection"
    ips = sorted({ip for _, ip, _ in seen.answers})
    if len(ips) > 1:
        return RELAY_ONLY, f"no peer could dial us, and they saw us at different IPs ({', '.join(ips)})"
    if scope(f"/ip4/{ips[0]}") != "public":  # scope parses the text alone, IPv6 too
        return RELAY_ONLY, f"no peer could dial us, and they saw us at {ips[0]}, itself behind another NAT"
    return NAT, f"no peer could dial us; they all saw us at {ips[0]}"


def advertised(listen: Sequence[str], announce: Sequence[str], seen: Seen) -> tuple[list[str], str]:
    """What the daemon would advertise, and why."""
    found = verdict(seen)
    if announce:
        return list(announce), "network.announce_addrs (the operator's word; the daemon still probes them)"
    if found is not None and found[0] == PUBLIC:
        reached = [(ip, port) for _, ip, ports in seen.answers for port in ports]
        ip, port = reached[0]
        return [f"/ip4/{ip}/tcp/{port}", *listen], "the confirmed address first (a dial-back reached it)"
    reason = "the listen addresses, as bound (no address confirmed: peers elsewhere reach this node only "
    reason += "by dialing out from here, or through relays once they exist)"
    return list(listen), reason


def check_reachability(listen: Sequence[str], announce: Sequence[str], bootstrap: Sequence[str],
                       upnp: bool) -> Check:
    seen = Seen()
    trio.run(_look, listen, bootstrap, upnp, seen)
    scopes = {a: scope(a) for a in listen}
    found = verdict(seen)
    addrs, why = advertised(listen, announce, seen)
    parts = [f"listen {', '.join(f'{a} ({s})' for a, s in scopes.items())}", f"UPnP: {seen.upnp}"]
    if found is not None:
        parts.append(f"verdict: {found[0]} ({found[1]})")
    elif bootstrap:
        parts.append(f"verdict: unknown ({seen.error or 'no prober answered'})")
    else:
        parts.append("verdict: not asked (give --bootstrap to have peers dial this machine back)")
    parts.append(f"would advertise {', '.join(addrs)}: {why}")
    status = PASS if (found is None and not bootstrap) or (found is not None and found[0] == PUBLIC) else WARN
    hint = ("forward the listen port on the home router (or enable UPnP there) and set "
            "network.announce_addrs to the public address; otherwise this node trains through peers that can "
            "be dialed")
    details: dict[str, Any] = {
        "listen": [{"addr": a, "scope": s} for a, s in scopes.items()],
        "upnp": seen.upnp,
        "upnp_external": (f"{seen.mapping.external_ip}:{seen.mapping.external_port}"
                          if seen.mapping is not None else None),
        "verdict": found[0] if found is not None else None,
        "probed_ports": seen.ports,
        "answers": [{"prober": p, "observed_ip": ip, "reached_ports": ports}
                    for p, ip, ports in seen.answers],
        "advertise": addrs,
        "advertise_why": why,
    }
    return Check("reachability", status, "; ".join(parts), hint=hint, details=details)



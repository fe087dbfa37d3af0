"""``/distro/dialback/1.0.0``: can others reach me? Another peer dials my ports back on a fresh connection.

A node may advertise an address only if strangers can dial it, and most home machines sit behind a NAT
that drops unsolicited connections. py-libp2p 0.8.1's AutoNAT v1 cannot tell: its server dials back through
``host.connect``, which returns at once because the asker is already connected, so a NAT'd peer was told
"public" every time. Here the prober starts a throwaway host with a fresh key for each probe, so its dial
can only succeed over a new TCP connection to the address, and the Noise handshake proves that the asker's
identity answered there.

What may be asked: only ports. The prober dials the IP the asker's connection comes from (as its socket
sees it: the home router's public address for a NAT'd peer), never an address the asker names, so nobody
can make a prober dial a third party. At most ``MAX_PROBE_PORTS`` per request, one probe at a time per
asker and ``PROBE_CONCURRENCY`` at once in all (the others are answered BUSY).

Wire: request ``u8 count, count x u16 port``; reply ``u8 ip length, ip text, count x u8 outcome``.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID
from multiaddr import Multiaddr

from .errors import MalformedReplyError, TransportError
from .host import P2PHost, open_host
from .host_config import HostConfig
from .rpc import RpcStatus, call, install_rpc

DIALBACK_PROTOCOL = TProtocol("/distro/dialback/1.0.0")
MAX_PROBE_PORTS = 4
PROBE_CONCURRENCY = 4
DIAL_TIMEOUT = 5.0
_MAX_IP_TEXT = 45  # the longest IPv6 text form


class Outcome(IntEnum):
    REACHED = 0
    UNREACHED = 1


@dataclass(frozen=True)
class ProbeResult:
    """What one prober saw: the IP our connection came from, and per port whether a fresh dial got us."""

    prober: ID
    observed_ip: str
    reached: dict[int, bool]

    def addrs(self) -> list[Multiaddr]:
        """The reached ports as dialable addresses (at the observed IP)."""
        return [tcp_addr(self.observed_ip, port) for port, ok in self.reached.items() if ok]


def tcp_addr(ip: str, port: int) -> Multiaddr:
    family = "ip6" if ipaddress.ip_address(ip).version == 6 else "ip4"
    return Multiaddr(f"/{family}/{ip}/tcp/{port}")


def encode_ports(ports: Sequence[int]) -> bytes:
    if not 1 <= len(ports) <= MAX_PROBE_PORTS or not all(1 <= p <= 65535 for p in ports):
        raise ValueError(f"need 1..{MAX_PROBE_PORTS} ports in 1..65535, got {list(ports)}")
    return bytes([len(ports)]) + b"".join(struct.pack(">H", p) for p in ports)


def decode_ports(body: bytes) -> list[int] | None:
    """The ports of a request, or None if it is malformed or asks for too many."""
    if not body or not 1 <= body[0] <= MAX_PROBE_PORTS or len(body) != 1 + 2 * body[0]:
        return None
    ports = [struct.unpack_from(">H", body, 1 + 2 * i)[0] for i in range(body[0])]
    return ports if all(ports) else None


class DialbackServer:
    """Answers probes (see the module docstring); ``install`` registers it on the host."""

    def __init__(self, host: P2PHost, *, dial_timeout: float = DIAL_TIMEOUT) -> None:
        self._host = host
        self._dial_timeout = dial_timeout
        self._slots = trio.Semaphore(PROBE_CONCURRENCY)
        self._asking: set[ID] = set()
        self.probes = 0  # probes dialed (for tests and metrics)

    def install(self) -> None:
        timeout = MAX_PROBE_PORTS * (self._dial_timeout + 1.0) + 5.0
        install_rpc(self._host, DIALBACK_PROTOCOL, self._handle, max_request=1 + 2 * MAX_PROBE_PORTS,
                    timeout=timeout)

    async def _handle(self, asker: ID, body: bytes) -> tuple[RpcStatus, bytes]:
        ports, ip = decode_ports(body), self._host.remote_ip(asker)
        if ports is None:
            return RpcStatus.BAD_REQUEST, b""
        if ip is None:  # not connected directly (or gone): nothing to dial
            return RpcStatus.NOT_READY, b""
        if asker in self._asking or self._slots.value == 0:
            return RpcStatus.BUSY, b""
        self._asking.add(asker)
        try:
            async with self._slots:
                self.probes += 1
                outcomes = [await self._dial(asker, ip, port) for port in ports]
        finally:
            self._asking.discard(asker)
        text = ip.encode()
        return RpcStatus.OK, bytes([len(text)]) + text + bytes(outcomes)

    async def _dial(self, asker: ID, ip: str, port: int) -> Outcome:
        config = HostConfig(px_interval=0.0, dial_timeout=self._dial_timeout)
        with trio.move_on_after(self._dial_timeout + 1.0):
            async with open_host(create_new_key_pair(), config) as throwaway:
                try:
                    await throwaway.connect(asker, [tcp_addr(ip, port)])
                    return Outcome.REACHED
                except TransportError:  # refused, timed out, or another identity answered there
                    return Outcome.UNREACHED
        return Outcome.UNREACHED


async def probe(host: P2PHost, prober: ID, ports: Sequence[int], *, timeout: float = 30.0) -> ProbeResult:
    """Ask ``prober`` to dial ``ports`` back; typed TransportError if it will not or cannot answer."""
    reply = await call(host, prober, DIALBACK_PROTOCOL, encode_ports(ports), max_reply=1 + _MAX_IP_TEXT
                       + MAX_PROBE_PORTS, timeout=timeout)
    size = reply[0] if reply else 0
    if not reply or not 0 < size <= _MAX_IP_TEXT or len(reply) != 1 + size + len(ports):
        raise MalformedReplyError("dial-back reply of the wrong length", str(prober))
    try:
        ip = str(ipaddress.ip_address(reply[1:1 + size].decode("ascii")))
    except (UnicodeDecodeError, ValueError):
        raise MalformedReplyError("dial-back reply with a malformed IP", str(prober)) from None
    outcomes = reply[1 + size:]
    if any(o not in (Outcome.REACHED, Outcome.UNREACHED) for o in outcomes):
        raise MalformedReplyError("dial-back reply with an unknown outcome", str(prober))
    return ProbeResult(prober, ip, {p: o == Outcome.REACHED for p, o in zip(ports, outcomes, strict=True)})

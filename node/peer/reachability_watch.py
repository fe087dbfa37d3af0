"""Asking connected peers now and then whether they can dial us back (protocol/dialback.py), and saying
what that shows: an event when the verdict changes, the ``distro_reachability`` gauge and the ``status``
line.

Why a watch and not one probe at start: the answer changes (a router reboots, port forwarding is set up,
the first peers to answer may share our LAN), and it needs two distinct probers (protocol/reachability.py),
who may connect only later (so rounds come sooner while there is no verdict). Each round asks up to
``PROBERS_PER_ROUND`` connected members, our ports being the ones we listen on plus candidates (the
external port a UPnP mapping opened, node/peer/upnp.py; a new one brings the next round forward).

Only a confirmed address is advertised (``P2PHost.advertise_confirmed``): a UPnP mapping may exist and still
be unreachable (a second NAT upstream, a firewall), so the router's word is never enough. When the confirmed
set changes, ``on_confirmed`` hears it (the daemon prints the join command naming it).
"""

from __future__ import annotations

import random
from collections.abc import Callable

import trio
from distro_node.protocol.dialback import MAX_PROBE_PORTS, probe, tcp_addr
from distro_node.protocol.errors import TransportError
from distro_node.protocol.host import P2PHost
from distro_node.protocol.reachability import Reachability, ReachabilityConfig

from .output import Output

PROBERS_PER_ROUND = 2
FIRST_ROUND_AFTER_S = 5.0
ROUND_EVERY_S = 60.0
UNKNOWN_ROUND_EVERY_S = 10.0


def listen_ports(host: P2PHost) -> list[int]:
    ports: list[int] = []
    for addr in host.addrs():
        text = str(addr)
        if "/tcp/" in text:
            port = int(text.split("/tcp/")[1].split("/")[0])
            if port and port not in ports:
                ports.append(port)
    return ports[:MAX_PROBE_PORTS]


class ReachabilityWatch:
    def __init__(self, host: P2PHost, out: Output, report: Callable[[str], None] | None = None,
                 config: ReachabilityConfig | None = None,
                 on_confirmed: Callable[[list[str]], None] | None = None) -> None:
        self._host = host
        self._out = out
        self._report = report
        self._on_confirmed = on_confirmed
        self._candidates: list[int] = []
        self._candidate_added = trio.Event()
        self.state = Reachability(config)
        self.verdict = "unknown"
        self.advertised: list[str] = []  # the confirmed transport addresses we advertise (no /p2p/)

    def add_candidate(self, port: int) -> None:
        """Probe ``port`` too from the next round on (an external port some router mapped for us)."""
        if 1 <= port <= 65535 and port not in self._candidates:
            self._candidates.append(port)
            self._candidate_added.set()

    def ports(self) -> list[int]:
        """What each round asks probers to dial: candidates first (they are what we hope to confirm)."""
        ours = [p for p in listen_ports(self._host) if p not in self._candidates]
        return [*self._candidates, *ours][:MAX_PROBE_PORTS]

    async def run(self, first_after: float = FIRST_ROUND_AFTER_S, every: float = ROUND_EVERY_S,
                  unknown_every: float = UNKNOWN_ROUND_EVERY_S) -> None:
        """A round after ``first_after``, then every ``every`` seconds (``unknown_every`` while no verdict,
        e.g. only one member was connected yet), and soon after a new candidate port arrives."""
        await trio.sleep(first_after)
        while True:
            await self.round()
            with trio.move_on_after(unknown_every if self.verdict == "unknown" else every):
                await self._candidate_added.wait()
            self._candidate_added = trio.Event()

    async def round(self) -> str:
        """Probe a few connected members; returns the verdict after their answers."""
        ports = self.ports()
        peers = sorted(self._host.member_peers(), key=lambda _: random.random())[:PROBERS_PER_ROUND]
        for peer in peers if ports else []:
            try:
                answer = await probe(self._host, peer, ports)
            except TransportError:
                continue  # busy, gone, or an old peer without the protocol: ask another next round
            self.state.record(str(peer), answer.observed_ip, answer.reached)
        verdict = self.state.verdict()
        if verdict != self.verdict:
            self.verdict = verdict
            confirmed = [f"{ip}:{port}" for ip, port in self.state.confirmed()]
            where = f" at {', '.join(confirmed)}" if confirmed else ""
            self._out.emit("reachability", f"reachability: {verdict}{where}", verdict=verdict,
                           confirmed=confirmed)
        self._advertise(self.state.confirmed())
        if self._report is not None:
            self._report(verdict)
        return verdict

    def _advertise(self, confirmed: list[tuple[str, int]]) -> None:
        addrs = [str(tcp_addr(ip, port)) for ip, port in confirmed]
        if addrs == self.advertised:
            return
        self.advertised = addrs
        self._host.advertise_confirmed([tcp_addr(ip, port) for ip, port in confirmed])
        if self._on_confirmed is not None:
            self._on_confirmed(addrs)

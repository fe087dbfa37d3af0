"""Asking connected peers now and then whether they can dial us back (protocol/dialback.py), and saying
what that shows: an event when the verdict changes, the ``distro_reachability`` gauge and the ``status``
line.

Why a watch and not one probe at start: the answer changes (a router reboots, port forwarding is set up,
the first peers to answer may share our LAN), and it needs two distinct probers (protocol/reachability.py),
who may connect only later. Each round asks up to ``PROBERS_PER_ROUND`` connected members, ours ports being
the ones we listen on. The verdict is reported, not yet acted on: advertising and relays come with NAT
traversal.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import trio
from distro_node.protocol.dialback import MAX_PROBE_PORTS, probe
from distro_node.protocol.errors import TransportError
from distro_node.protocol.host import P2PHost
from distro_node.protocol.reachability import Reachability, ReachabilityConfig

from .output import Output

PROBERS_PER_ROUND = 2
FIRST_ROUND_AFTER_S = 5.0
ROUND_EVERY_S = 60.0


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
                 config: ReachabilityConfig | None = None) -> None:
        self._host = host
        self._out = out
        self._report = report
        self.state = Reachability(config)
        self.verdict = "unknown"

    async def run(self, first_after: float = FIRST_ROUND_AFTER_S, every: float = ROUND_EVERY_S) -> None:
        await trio.sleep(first_after)
        while True:
            await self.round()
            await trio.sleep(every)

    async def round(self) -> str:
        """Probe a few connected members; returns the verdict after their answers."""
        ports = listen_ports(self._host)
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
        if self._report is not None:
            self._report(verdict)
        return verdict

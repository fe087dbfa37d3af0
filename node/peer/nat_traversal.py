"""NAT traversal in the daemon: the relay service (stop side always, hop once we are confirmed public), a
private peer's reservations on two relays, hole punching, and what they report.

Why driven by the reachability verdict (node/peer/reachability_watch.py): only a peer that two others dialed
back on a fresh connection can relay (a NAT'd relay would be useless), and only a peer that none could dial
needs reservations and stops telling outsiders its LAN addresses (``P2PHost.behind_nat``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
from distro_node.protocol.circuits import Kind
from distro_node.protocol.holepunch import HolePunch, open_hole_punch
from distro_node.protocol.host import P2PHost
from distro_node.protocol.relay_client import RelayClient
from distro_node.protocol.relay_config import RelayClientConfig, RelayServiceConfig
from distro_node.protocol.relay_service import RelayService, open_relay_service

from ..metrics import NodeMetrics
from .output import Output

REPORT_EVERY_S = 2.0


class NatTraversal:
    def __init__(self, host: P2PHost, relay: RelayService, client: RelayClient, punch: HolePunch,
                 out: Output, metrics: NodeMetrics | None) -> None:
        self._host = host
        self.relay = relay
        self.client = client
        self.punch = punch
        self._out = out
        self._metrics = metrics
        self._reported = (0, 0, 0)  # relayed bytes, punch attempts, punch successes already counted
        self._relays: list[str] = []
        self._circuits: tuple[dict[str, str], int, int] = ({}, 0, 0)  # reported: through, renewed, redialed

    def on_verdict(self, verdict: str) -> None:
        """Act on a reachability verdict: relay for others when public, else reserve on relays."""
        # Not only "private": a peer behind a NAT often has a single member to probe it (the public one),
        # and one prober's word never makes a verdict. Reserving and hiding LAN addresses cost a public peer
        # little until two probers confirm it.
        public = verdict == "public"
        self._host.behind_nat = not public
        if public and not self.relay.serving_hop:
            self._out.emit("relaying", "confirmed public: relaying for peers behind NATs", serving=True)
        self.relay.serve_hop(public)

    def kinds(self) -> dict[str, int]:
        """Connected members by connection kind (``punched``: direct, and reached by one of our punches)."""
        out = {"direct": 0, "punched": 0, "relayed": 0}
        for peer in self._host.member_peers():
            kind = self._host.connection_kind(peer)
            if kind is Kind.DIRECT:
                out["punched" if peer in self.punch.punched else "direct"] += 1
            elif kind is Kind.RELAYED:
                out["relayed"] += 1
        return out

    def report(self) -> None:
        relays = [str(r) for r in sorted(self.client.held, key=str)]
        if relays != self._relays:
            self._relays = relays
            where = ", ".join(r[-8:] for r in relays) or "none"
            self._out.emit("relays", f"reachable through relays: {where}", relays=relays)
        keeper = self.client.keeper
        circuits = (keeper.through(), keeper.renewed, keeper.redialed)
        if circuits != self._circuits:
            self._circuits = circuits
            through, renewed, redialed = circuits
            self._out.emit("circuits", f"relayed connections we dialed: {len(through)}; {renewed} renewed "
                           f"before a relay's cap, {redialed} dialed again after a cut",
                           through=through, renewed=renewed, redialed=redialed)
        now = (self.relay.counts.relayed_bytes, self.punch.attempts, self.punch.successes)
        if now[1:] != self._reported[1:]:
            self._out.emit("holepunch", f"hole punches: {now[2]} of {now[1]} gave a direct connection",
                           attempts=now[1], successes=now[2])
        deltas = [max(0, a - b) for a, b in zip(now, self._reported, strict=True)]
        self._reported = now
        if self._metrics is None:
            return
        self._metrics.nat_traversal(*deltas)
        self._metrics.set_connections(self.kinds(), len(self.client.held))

    async def run(self, every: float = REPORT_EVERY_S) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.client.run, lambda: self._host.behind_nat)
            nursery.start_soon(self.client.keeper.run)  # circuits renewed before their relay's caps
            while True:
                self.report()
                await trio.sleep(every)


@asynccontextmanager
async def open_nat_traversal(host: P2PHost, out: Output, metrics: NodeMetrics | None,
                             service: RelayServiceConfig | None = None,
                             client: RelayClientConfig | None = None) -> AsyncIterator[NatTraversal]:
    async with open_relay_service(host, service) as relay, open_hole_punch(host) as punch:
        yield NatTraversal(host, relay, RelayClient(host, relay, client), punch, out, metrics)

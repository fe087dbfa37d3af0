"""A peer whose uplink is much slower than its peers' keeps a small gossip mesh.

Why: every gossip message a peer receives it forwards to its mesh peers. On a slow uplink (20/2 Mbit/s
among 100/10 and gigabit lines) those copies queue behind the piece bytes it is uploading on the same
connections and arrive after the fast peers' copies: nearly always duplicates, and about a third of the
small frames on that uplink (bench/exchange.py, mixed 8 at a quarter of the rates, docs/benchmarks.md).
The two slow peers of that swarm at a mesh of 2 took the round from a mean of 32.70 s to 31.63 s over five
runs each. In a run, members' own messages go to every member directly (gossip_router.RunRouter), so a
smaller mesh costs a slow peer's own deliveries little.

What "slow" rests on: only what this peer measured, never a claim. Its own upload rate is what its pieces
server's uploads took (swarm_turns.Waitlist.upload_rate, every slot busy); its peers' uplinks are the
per-piece rates its fetches measured from them (swarm_first_copies.PeerRates) times the upload slots they
share. Below ``GossipConfig.slow_uplink_ratio`` of the median peer it is slow; it is fast again only above
twice that ratio, so a rate near the line does not graft and prune back and forth. Both figures can read
up to twice a line's rate (an upload that had the line to itself counts as if every slot were as fast),
hence a half and not the lines' own ratio: on the testbed's mixed lines at a quarter, a 2 Mbit/s peer read
83-96 KB/s against a median of 252-257 KB/s (0.33-0.37), a 10 Mbit/s one 604 KB/s against 237 KB/s.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import trio
from libp2p.pubsub.gossipsub import GossipSub


@dataclass(frozen=True)
class MeshDegree:
    low: int
    degree: int
    high: int


class UplinkDegree:
    """The mesh degree for this peer's uplink (module docstring); pure, rates passed in."""

    def __init__(self, normal: MeshDegree, slow_degree: int, ratio: float) -> None:
        if slow_degree < 0 or not 0 < ratio <= 0.5:
            raise ValueError("UplinkDegree needs slow_degree >= 0 (0: off) and ratio in (0, 0.5]")
        self.normal = normal
        low = max(1, slow_degree - 1)
        self.slow_mesh = MeshDegree(low, slow_degree, slow_degree) if slow_degree else normal
        self.ratio = ratio
        self.slow = False

    def update(self, own_rate: float | None, peer_uplinks: Sequence[float]) -> MeshDegree:
        """The degree after a new look at the rates (bytes/s). ``own_rate`` None, or no peer measured:
        unchanged."""
        if own_rate is not None and peer_uplinks and self.slow_mesh != self.normal:
            typical = statistics.median(peer_uplinks)
            self.slow = own_rate < (2 if self.slow else 1) * self.ratio * typical
        return self.slow_mesh if self.slow else self.normal


def apply_degree(router: GossipSub, mesh: MeshDegree) -> None:
    """Set the router's degrees; its next heartbeat prunes a larger mesh down to ``mesh.degree`` (strangers
    first, gossip_router.RunRouter) or grafts up to it."""
    router.degree_low, router.degree, router.degree_high = mesh.low, mesh.degree, mesh.high


async def follow_uplink(router: GossipSub, degree: UplinkDegree, own_rate: Callable[[], float | None],
                        peer_uplinks: Callable[[], Sequence[float]], interval: float) -> None:
    """Every ``interval`` seconds, the degree for the rates as they stand; runs until cancelled."""
    while True:
        apply_degree(router, degree.update(own_rate(), peer_uplinks()))
        await trio.sleep(interval)

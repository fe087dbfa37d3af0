"""On a slow uplink, forward others' gossip messages only to the mesh peers that show no sign of having them.

Why: every gossip message a peer receives it forwards to its mesh peers (a mesh of 4 that others' grafts
grow to 6-8). On a slow uplink (20/2 Mbit/s among 100/10 and gigabit lines) those copies queue behind the
piece bytes it is uploading on the same connections and arrive after the fast peers' copies: nearly always
duplicates. A count of a slow peer's frames in a mixed swarm of 8 (bench/exchange.py, a quarter of the
rates, 1.45 MB payloads) found 138-145 forwarded copies a round, about a third of its small frames; two
slow peers held to a mesh of 2 (a throwaway experiment) took the round from a mean of 32.58 s to 31.63 s
over five runs (docs/benchmarks.md).

Shrinking the mesh is not the way: a version that pruned a slow peer's mesh to 2 stopped runs after their
first round. So the mesh stays as it is, and only the forwarding changes. A slow peer holds a message it
did not author for ``GossipConfig.slow_uplink_hold`` seconds before sending it on to the members in its
mesh it reaches directly, and meanwhile notes who sent it a copy (:class:`HeldForwards`). Its mesh peers
forward to it as they always do, so a peer that sent one has the message; when the hold ends, only those
that sent none get it. In a swarm of direct links that is about nobody: members' own messages reach every
member straight from their origin (gossip_router.RunRouter). Where a slow peer is the only path (a chain of
links, a member behind NAT reached through it), the message arrives ``slow_uplink_hold`` later, not never.
Strangers following the run and members over a relay get every message at once, as before: the origin
does not send to them directly. A copy a peer sends us only ever spares that peer a copy, so nobody can use
it against anyone else. On the testbed's mixed lines the two slow peers held 120-125 copies a round and,
at a 2 s hold, sent 11-15 when the hold ended; a capture of one found its control frames at 0.073
payloads a round, from 0.10 (docs/benchmarks.md).

What "slow" rests on: only what this peer measured, never a claim (:class:`SlowUplink`). Its own upload
rate is what its pieces server's uploads took (swarm_turns.Waitlist.upload_rate); its peers' uplinks are the
per-piece rates its fetches measured from them (swarm_first_copies.PeerRates) times the upload slots they
share. Below ``GossipConfig.slow_uplink_ratio`` of the median peer it is slow; fast again only above twice
that ratio, so a rate near the line does not switch back and forth. Both figures can read up to twice a
line's rate (an upload that had the line to itself counts as if every slot were as fast), hence a half and
not the lines' own ratio: on the testbed's mixed lines at a quarter, a 2 Mbit/s peer read 83-96 KB/s against
a median of 252-257 KB/s, a 10 Mbit/s one 604 KB/s against 237 KB/s.
"""

from __future__ import annotations

import statistics
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence

import trio
from libp2p.peer.id import ID

# Messages whose forwarding is held at once, at most; beyond it a message is forwarded at once, as before. A
# run's peers send a few messages a round each, so this is many rounds of them.
MAX_HELD = 256


class SlowUplink:
    """Whether this peer's uplink is slow beside its peers' (module docstring); pure, rates passed in."""

    def __init__(self, ratio: float) -> None:
        if not 0 <= ratio <= 0.5:
            raise ValueError(f"SlowUplink needs a ratio in [0, 0.5] (0: never slow), got {ratio}")
        self.ratio = ratio
        self.slow = False

    def update(self, own_rate: float | None, peer_uplinks: Sequence[float]) -> bool:
        """Slow after a new look at the rates (bytes/s). ``own_rate`` None or no peer measured: unchanged."""
        if own_rate is not None and peer_uplinks and self.ratio > 0:
            typical = statistics.median(peer_uplinks)
            self.slow = own_rate < (2 if self.slow else 1) * self.ratio * typical
        return self.slow


class HeldForwards:
    """Per held message (by id), the mesh peers it is still to be forwarded to; a copy from one of them
    strikes it off. Copies that came before the message was held (a peer's may overtake our own check of
    the first) are remembered for the last ``cap`` message ids. Bounded by ``cap`` messages each way, each by
    the peers connected to us."""

    def __init__(self, cap: int = MAX_HELD) -> None:
        if cap < 1:
            raise ValueError(f"HeldForwards needs cap >= 1, got {cap}")
        self._cap = cap
        self._held: dict[bytes, set[ID]] = {}
        self._early: OrderedDict[bytes, set[ID]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, msg_id: bytes, peers: Collection[ID]) -> bool:
        """Hold ``peers``' copies of ``msg_id``; False (nothing held) when ``cap`` messages already are: the
        caller then forwards at once, as it would have."""
        if len(self._held) >= self._cap or msg_id in self._held:
            return False
        self._held[msg_id] = set(peers) - self._early.pop(msg_id, set())
        return True

    def copy_from(self, msg_id: bytes, peer: ID) -> None:
        lacking = self._held.get(msg_id)
        if lacking is not None:
            lacking.discard(peer)
            return
        self._early.setdefault(msg_id, set()).add(peer)
        self._early.move_to_end(msg_id)
        while len(self._early) > self._cap:
            self._early.popitem(last=False)

    def release(self, msg_id: bytes) -> set[ID]:
        """The peers that sent no copy of ``msg_id`` before the hold ended (empty once released)."""
        return self._held.pop(msg_id, set())


async def follow_uplink(judge: SlowUplink, set_slow: Callable[[bool], None],
                        own_rate: Callable[[], float | None], peer_uplinks: Callable[[], Sequence[float]],
                        interval: float) -> None:
    """Every ``interval`` seconds, judge the rates as they stand and pass the verdict on; until cancelled."""
    while True:
        set_slow(judge.update(own_rate(), peer_uplinks()))
        await trio.sleep(interval)


__all__ = ["MAX_HELD", "HeldForwards", "SlowUplink", "follow_uplink"]

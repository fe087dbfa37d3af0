"""A fluid model of access links: transfers share each peer's uplink and downlink max-min fairly, no packets.

Why: the exchange of one step is decided by access links (a home line's 10 Mbit up), not by the core, so
a network of N peers reduces to 2N capacities. Concurrent TCP streams through one bottleneck get roughly
equal shares, and a stream limited elsewhere leaves its unused share to the others: max-min fairness, computed
by progressive filling. Between two events (a transfer ends, a new one starts) every rate is constant, so the
model jumps from event to event; thousands of peers cost seconds, not hours. What it leaves out, and why it
still predicts: TCP slow start and loss recovery (a 256 KiB piece at 10 Mbit lasts 0.2 s, well above the
handful of RTTs slow start needs on a 50 ms queue) and propagation delay (the namespace testbed has none;
the caller adds a per-request latency where it wants one).

What it keeps of TCP: the acknowledgements a download sends back up the downloader's own line
(``Line.ack``). On a 10:1 home line they are small per byte but not in sum: a download at the full
downlink rate takes 20-26% of the uplink (testbed, docs/benchmarks.md), and that uplink is where a slow
author's payload has to leave from. They go first: a FIFO queue serves their small frames at the rate
they arrive, and uploads share what remains.

Vectorised with numpy: a round of progressive filling is a few array operations over the active transfers,
and the number of rounds is the number of distinct bottleneck levels (two or three for the profiles used).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

# A transfer whose remaining bytes fall below this counts as done (float error over many events).
_DONE_BYTES = 1e-6
# The least share of an uplink left to uploads however much its acknowledgements take (a line so
# lopsided that they would fill it: the model keeps its uploads moving rather than stopping them).
_UP_LEFT = 0.05


class FlowModelError(ValueError):
    """A link or transfer the model cannot represent (a capacity <= 0, an unknown peer, a negative size)."""


@dataclass(frozen=True)
class Line:
    """One peer's access link in bytes per second of payload (framing already taken off). ``ack``: the
    uplink capacity, in the same units, that acknowledging one downloaded byte takes (0: none modelled)."""

    up: float
    down: float
    ack: float = 0.0

    def __post_init__(self) -> None:
        for name in ("up", "down"):
            value = getattr(self, name)
            if not value > 0:
                raise FlowModelError(f"Line.{name} must be > 0 bytes/s, got {value}")
        if not 0 <= self.ack < 1:
            raise FlowModelError(f"Line.ack must be in [0, 1), got {self.ack}")

    @classmethod
    def mbit(cls, down_mbit: float, up_mbit: float, efficiency: float = 1.0, ack: float = 0.0) -> Line:
        """From a line's nominal Mbit/s; ``efficiency`` is the payload share of what crosses it (TCP/IP)."""
        if not 0 < efficiency <= 1:
            raise FlowModelError(f"efficiency must be in (0, 1], got {efficiency}")
        return cls(up=up_mbit * 1e6 / 8 * efficiency, down=down_mbit * 1e6 / 8 * efficiency, ack=ack)


@dataclass
class Transfer:
    """Bytes moving from ``src`` to ``dst``; ``tag`` is the caller's (which payload, which piece)."""

    src: int
    dst: int
    size: float
    tag: object = None
    started: float = 0.0
    remaining: float = field(init=False)

    def __post_init__(self) -> None:
        if self.size < 0:
            raise FlowModelError(f"transfer size must be >= 0, got {self.size}")
        self.remaining = float(self.size)


def max_min_rates(src: np.ndarray, dst: np.ndarray, up: np.ndarray, down: np.ndarray,
                  ack: np.ndarray | None = None) -> np.ndarray:
    """Each transfer's rate under max-min fairness, uplinks and downlinks being the only constraints.

    ``ack`` (per peer, as ``Line.ack``): the acknowledgements of what each peer downloads come off its
    uplink before its uploads share it. Two fills: the first, without them, gives each peer's download
    rate; the second shares uplinks less those rates' acknowledgements (never less than ``_UP_LEFT`` of a
    line). A download the second fill slows keeps the acknowledgements of its first rate: a slight
    overstatement, where solving for the fixed point would cost a fill per round.
    """
    if ack is None or not ack.any():
        return _fill(src, dst, up, down)
    incoming = np.bincount(dst, weights=_fill(src, dst, up, down), minlength=len(up))
    return _fill(src, dst, np.maximum(up - ack * incoming, up * _UP_LEFT), down)


def _fill(src: np.ndarray, dst: np.ndarray, up: np.ndarray, down: np.ndarray) -> np.ndarray:
    """Progressive filling: raise every unfrozen rate together until some link is full, freeze the
    transfers through it, repeat. Uplink ``i`` is resource ``i`` and downlink ``i`` is resource ``n + i``."""
    n = len(up)
    count = len(src)
    rates = np.zeros(count)
    if count == 0:
        return rates
    capacity = np.concatenate([up, down]).astype(float)
    ups, downs = src, dst + n
    active = np.ones(count, dtype=bool)
    for _ in range(2 * n + 1):  # each round saturates at least one resource
        if not active.any():
            break
        users = np.bincount(ups[active], minlength=2 * n) + np.bincount(downs[active], minlength=2 * n)
        used = users > 0
        share = np.full(2 * n, np.inf)
        share[used] = capacity[used] / users[used]
        level = share.min()
        rates[active] += level
        capacity -= level * users
        full = used & (share <= level * (1 + 1e-9))
        frozen = active & (full[ups] | full[downs])
        active &= ~frozen
        capacity[full] = 0.0
    return rates


class FlowNetwork:
    """Transfers in flight over the lines of ``lines``; the caller starts transfers and advances time.

    The active transfers' sources, destinations and remaining bytes live in arrays, rebuilt only when the
    set changes, so an event costs a few array operations however many transfers are in flight."""

    def __init__(self, lines: Sequence[Line]) -> None:
        if not lines:
            raise FlowModelError("a flow network needs at least one line")
        self.lines = tuple(lines)
        self._up = np.array([line.up for line in lines])
        self._down = np.array([line.down for line in lines])
        # None when no line models acknowledgements: every refresh then fills once, as before them.
        self._ack = np.array([line.ack for line in lines]) if any(line.ack for line in lines) else None
        self.now = 0.0
        self._active: list[Transfer] = []
        self._src = np.zeros(0, dtype=np.int64)
        self._dst = np.zeros(0, dtype=np.int64)
        self._left = np.zeros(0)
        self._rates = np.zeros(0)
        self._stale = False
        self.uploaded = np.zeros(len(lines))
        self.downloaded = np.zeros(len(lines))

    @property
    def active(self) -> tuple[Transfer, ...]:
        self._sync()
        return tuple(self._active)

    def start(self, transfer: Transfer) -> None:
        for name in ("src", "dst"):
            peer = getattr(transfer, name)
            if not 0 <= peer < len(self.lines):
                raise FlowModelError(f"transfer {name} {peer} is not a peer of this network")
        if transfer.src == transfer.dst:
            raise FlowModelError(f"transfer from peer {transfer.src} to itself")
        self._sync()
        transfer.started = self.now
        self._active.append(transfer)
        self._stale = True

    def _sync(self) -> None:
        """Write the arrays' remaining bytes back into the transfer objects. While the set is stale the
        objects are the truth (the arrays no longer line up with ``_active``), so there is nothing to do."""
        if self._stale:
            return
        for transfer, left in zip(self._active, self._left.tolist(), strict=True):
            transfer.remaining = left

    def _refresh(self) -> None:
        if self._stale:
            self._src = np.array([t.src for t in self._active], dtype=np.int64)
            self._dst = np.array([t.dst for t in self._active], dtype=np.int64)
            self._left = np.array([t.remaining for t in self._active])
            self._rates = max_min_rates(self._src, self._dst, self._up, self._down, self._ack)
            self._stale = False

    def next_finish(self) -> float | None:
        """When the first active transfer ends at today's rates (None when nothing moves)."""
        self._refresh()
        if not self._active:
            return None
        moving = self._rates > 0
        if not moving.any():
            return None
        return self.now + float((self._left[moving] / self._rates[moving]).min())

    def advance(self, until: float) -> list[Transfer]:
        """Move time to ``until`` (not past the next finish) and return the transfers that ended."""
        if until < self.now:
            raise FlowModelError(f"time runs forward: {until} < {self.now}")
        self._refresh()
        dt = until - self.now
        self.now = until
        if not self._active:
            return []
        moved = np.minimum(self._left, self._rates * dt)
        self._left -= moved
        np.add.at(self.uploaded, self._src, moved)
        np.add.at(self.downloaded, self._dst, moved)
        ended = self._left <= _DONE_BYTES
        if not ended.any():
            return []
        self._sync()
        done = [t for t, e in zip(self._active, ended.tolist(), strict=True) if e]
        self._active = [t for t, e in zip(self._active, ended.tolist(), strict=True) if not e]
        self._stale = True
        return done

    def cancel(self, transfer: Transfer) -> None:
        """Stop a transfer (its bytes so far stay counted: they crossed the links)."""
        self._sync()
        self._active.remove(transfer)
        self._stale = True

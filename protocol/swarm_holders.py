"""What one fetch knows of each holder of its payload, and how it weighs them: a piece's expected time there,
their order, and which of them a far sooner holder keeps a piece from. Pure (time is an argument); the
state is protocol/swarm_schedule.py's, which decides with it.

Why "far sooner": a piece is not asked of a holder while another live holder of it, over as good a
connection, would deliver it in under 1/``slower_holder_factor`` of the time, its rest and queue counted;
the fetch waits for that one's turn instead, unless it refused us ``slower_holder_refusals`` times in a row
(a peer that claims pieces and never serves them cannot keep us from those that would). Holders of alike
lines are never held back: a busy one's queue makes it no sooner. Asked for all it held that was not
spoken for, a 2 Mbit/s peer (testbed, mixed 8) relayed and repeated up to 1.2 pieces a round, 2 s of its
uplink each; it is still asked for what no faster holder has.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .pieces import PIECE_BYTES
from .swarm_schedule_config import ScheduleConfig


@dataclass
class Holder:
    pieces: set[int]
    conn_class: int = 0
    rate: float | None = None
    uploads: int = 0  # uploads the holder reported busy with (all fetchers)
    in_flight: set[int] = field(default_factory=set)  # request ids
    resting_until: float = 0.0
    dropped: bool = False
    refusals: int = 0  # BUSY answers since it last served us a piece

    def expected_seconds(self, extra: int, prior_rate: float) -> float:
        """A piece's time here behind what is queued on it (ours in flight, its reported uploads) and
        ``extra`` more; ``prior_rate`` while it was never measured."""
        rate = self.rate if self.rate is not None else prior_rate
        return max(1, len(self.in_flight) + self.uploads + extra) * PIECE_BYTES / rate


def ranked(holders: Mapping[str, Holder], names: list[str], prior_rate: float) -> list[str]:
    """Best first: connection class, then a piece's expected time, then name."""
    return sorted(names, key=lambda n: (holders[n].conn_class, holders[n].expected_seconds(1, prior_rate), n))


def etas(holders: Mapping[str, Holder], now: float, config: ScheduleConfig) -> dict[str, float]:
    """Per live, measured holder that has not refused us ``slower_holder_refusals`` times in a row: the
    seconds a piece would take there, its rest and queue counted (none with the rule off)."""
    if config.slower_holder_factor <= 0:
        return {}
    return {n: max(0.0, g.resting_until - now) + g.expected_seconds(1, config.prior_rate)
            for n, g in holders.items()
            if not g.dropped and g.rate is not None and g.refusals < config.slower_holder_refusals}


def held_sooner(name: str, holders: Mapping[str, Holder], times: Mapping[str, float],
                config: ScheduleConfig) -> set[int]:
    """The pieces another holder among ``times`` (:func:`etas`), over as good a connection, would deliver in
    under 1/``slower_holder_factor`` of the time holder ``name`` would: not asked of it (never when it is
    unmeasured)."""
    h = holders[name]
    if h.rate is None or not times:
        return set()
    bar = h.expected_seconds(1, config.prior_rate) / config.slower_holder_factor
    out: set[int] = set()
    for other, eta in times.items():
        g = holders[other]
        if other != name and eta < bar and g.conn_class <= h.conn_class:
            out |= g.pieces
    return out

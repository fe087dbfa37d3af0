"""What one step's exchange is, for the flow model (flow_step.py): the swarm it runs on, what a run of it
gave, and the least time any run could take.

Apart from the event loop that runs it because the benches and tests build specs, read results and compare
with the bound without the simulation's internals.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from distro_node.protocol.pieces_wire import PiecesConfig
from distro_node.protocol.swarm_first_copies import PeerRates
from distro_node.protocol.swarm_schedule import ScheduleConfig

from .flow_net import FlowModelError, Line


@dataclass(frozen=True)
class ExchangeSpec:
    """One step: who has which link, who wants whose payload, who is connected to whom."""

    lines: tuple[Line, ...]
    payload_bytes: int
    # Per fetcher, the authors whose payloads it pulls (all others, or the list's K and a margin).
    wants: tuple[frozenset[int], ...]
    # Per peer, the peers it holds connections to (its holders besides the author); symmetric.
    neighbours: tuple[frozenset[int], ...]
    # When each author's payload exists (its announcement); 0 for all by default.
    announce_at: tuple[float, ...] = ()
    # One-way delay of a request, a reply header or a have-map update.
    latency: float = 0.001
    upload_slots: int = PiecesConfig.upload_slots
    slot_wait: float = PiecesConfig.slot_wait
    first_copy_factor: float = PiecesConfig.first_copy_factor
    first_copy_window: float = PiecesConfig.first_copy_window
    # The refusal rules of protocol/swarm_turns.py, as the daemon's pieces protocol has them (off: every
    # fetch polls busy holders each back-off, as before them).
    turns: bool = True
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    time_limit: float = 3600.0

    def __post_init__(self) -> None:
        n = len(self.lines)
        if len(self.wants) != n or len(self.neighbours) != n:
            raise FlowModelError(f"wants and neighbours need one entry per line ({n})")
        if self.announce_at and len(self.announce_at) != n:
            raise FlowModelError(f"announce_at needs one time per line ({n})")
        if self.payload_bytes < 1 or self.upload_slots < 1 or self.latency < 0 or self.slot_wait <= 0:
            raise FlowModelError("payload_bytes and upload_slots must be >= 1, latency >= 0, slot_wait > 0")
        for peer, wanted in enumerate(self.wants):
            if peer in wanted or any(not 0 <= a < n for a in wanted):
                raise FlowModelError(f"peer {peer} wants a payload that is its own or no peer's")

    def announced(self, author: int) -> float:
        return self.announce_at[author] if self.announce_at else 0.0


def daemon_settings(pieces: PiecesConfig) -> dict[str, Any]:
    """The fields of :class:`ExchangeSpec` that are the daemons' own settings, taken from their config (a
    dilated one, say): ``ExchangeSpec(..., **daemon_settings(cfg))``."""
    return {"upload_slots": pieces.upload_slots, "slot_wait": pieces.slot_wait,
            "first_copy_factor": pieces.first_copy_factor, "first_copy_window": pieces.first_copy_window,
            "schedule": pieces.schedule}


@dataclass
class ExchangeResult:
    done_at: list[float]  # per fetcher: when it held every payload it wanted (inf if never)
    uploaded: list[float]  # bytes per peer
    downloaded: list[float]
    wanted_bytes: list[int]  # per fetcher: payload bytes it needed
    refused: int = 0  # piece requests a holder declined as busy
    # Per peer, the rates its fetches measured: pass them to the next step's run, as a daemon keeps them.
    rates: list[PeerRates] = field(default_factory=list)
    # Per peer, the seconds its uploads of a piece took on average (``Waitlist.piece_seconds``): the
    # daemon's pieces server keeps them across steps too.
    piece_seconds: list[float] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return max(self.done_at)

    @property
    def amplification(self) -> float:
        need = sum(self.wanted_bytes)
        return sum(self.downloaded) / need if need else 1.0


def swarm_bound(lines: Sequence[Line], payload_bytes: int, wants: Sequence[frozenset[int]]) -> float:
    """The physical lower bound of an exchange: every payload leaves its author once, every fetcher
    downloads what it wants, and all copies fit through the summed uplinks."""
    authors = {a for w in wants for a in w}
    origin = max((payload_bytes / lines[a].up for a in authors), default=0.0)
    download = max((payload_bytes * len(w) / lines[i].down for i, w in enumerate(wants)), default=0.0)
    total = payload_bytes * sum(len(w) for w in wants) / sum(line.up for line in lines)
    return max(origin, download, total)

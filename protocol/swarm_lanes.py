"""A swarm fetch's lanes: one per holder, the state its session shares with the fetch's driver.

Why apart from protocol/swarm_fetch.py: the driver (which request goes out, which is overdue) and the
sessions (the messages on one holder's stream) meet only here. The driver asks which lane carries a request
it wants to cancel or free; a fetch that stalls or gives up says where each lane stood.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import trio
from libp2p.peer.id import ID

from .errors import TransportError
from .swarm_schedule import PieceScheduler, Request


class Lost(TransportError):
    """The current request was cancelled as overdue: the session's stream is mid-reply and must go, the
    holder stays. A TransportError so that ``rpc.client_stream`` lets it out as it is: anything else it
    wraps as a stream failure, and the fetch then counted our own cancel as the holder's loss (three of
    them dropped a slow author, the only holder, and the fetch failed)."""


@dataclass
class Lane:
    """One holder's session as the fetch sees it: the request waiting to go out on it, the one on the
    wire (``current``, set from the moment it is written, so a failed session fails it), and a wake-up."""

    holder: ID
    complete: bool  # known to hold the whole payload (the round machine's sources)
    pending: Request | None = None
    current: Request | None = None
    scope: trio.CancelScope | None = None
    work: trio.Event = field(default_factory=trio.Event)
    known: int = 0  # pieces its last have-map listed
    quiet: bool = False  # not polling: it has pieces we can ask for, and waits to be asked
    over: bool = False  # its session ended for good


def carrying(lanes: Iterable[Lane], request_id: int) -> Lane | None:
    """The lane whose session holds this request (on the wire or waiting to go out), if any."""
    for lane in lanes:
        if any(r is not None and r.id == request_id for r in (lane.current, lane.pending)):
            return lane
    return None


def describe(sched: PieceScheduler | None, lanes: Mapping[str, Lane]) -> str:
    """Where a fetch stands, for a debug log: what it misses, and each holder's lane and schedule."""
    if sched is None:
        over = sum(lane.over for lane in lanes.values())
        return f"no piece list; lanes over: {over}/{len(lanes)}"
    parts = [f"now {trio.current_time():.1f} missing {sched.missing_pieces()}"]
    for name, lane in lanes.items():
        h = sched.holders.get(name)
        held = "-" if h is None else (f"{len(h.pieces)} pieces, dropped={h.dropped}, rate={h.rate}, "
                                      f"resting_until={round(h.resting_until, 1)}")
        flight = [(c, piece, round(sent, 1)) for c, piece, sent in sched.requests_of(name)]
        parts.append(f"{name[-6:]}: over={lane.over} pending={lane.pending} current={lane.current} "
                     f"known={lane.known} ({held}, in flight {flight})")
    return "; ".join(parts)

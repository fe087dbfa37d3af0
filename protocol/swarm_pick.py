"""The holder's side of a piece request: which of the fetcher's candidates to send, or why not now.

Why apart from the fetcher's scheduler (protocol/swarm_schedule.py): the two sides are separate peers, and
this rule is what lets a slow origin send each piece about once while the fetchers trade the rest. The
daemon's server (protocol/pieces_serve.py) and the flow model (node/sim/flow_step.py) both answer with it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping


class Decline(enum.Enum):
    NOT_HELD = "not_held"  # holds none of the candidates
    BUSY = "busy"  # every upload slot taken, or only repeats left while it is uploading anyway


def own_first_copies_left(own_started: Mapping[int, int] | None, count: int) -> bool:
    """Whether a holder's own payload, once somebody asked for it (``own_started`` is not None), still has
    pieces it never began to upload: nobody else can hold those yet."""
    return own_started is not None and sum(1 for n in own_started.values() if n > 0) < count


def pick_to_serve(candidates: Iterable[int], have: Iterable[int], started: Mapping[int, int], *,
                  uploading: int, slots: int, relay_waits: bool = False) -> int | Decline:
    """The holder's side of a request: of the candidates it holds, the piece it has started uploading
    least often (ties: the fetcher's order). A piece it already sent once is sent again only when its
    uplink is otherwise idle: the fetchers that got the first copy serve it, and a slow origin's uplink
    stays on pieces nobody has yet (the flow model in tests/protocol/test_swarm_schedule.py: a 2 Mbit/s
    origin sent 1.7x its payload without this rule, 1.09x with it). A one-piece payload is the exception:
    its fetchers ask its complete holders only (protocol/swarm_fetch.py), so repeats are all there is.

    ``relay_waits``: the request is for another author's payload while :func:`own_first_copies_left` holds
    for ours. Declined: only we can send those first copies, anyone holding the other's pieces can relay
    them. Without this a 2 Mbit/s origin spent most of its uplink relaying (bench/flow.py, mixed, 16
    peers, K = 8: its own pieces were all out after 14.4 s, 6.7 s with the rule; the bound is 6.1 s)."""
    held = set(have)
    options = [i for i in candidates if i in held]
    if not options:
        return Decline.NOT_HELD
    if uploading >= slots or relay_waits:
        return Decline.BUSY
    best = min(options, key=lambda i: started.get(i, 0))
    if uploading > 0 and started.get(best, 0) > 0 and len(held) > 1:
        return Decline.BUSY
    return best

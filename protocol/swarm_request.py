"""What a swarm fetch (protocol/swarm_fetch.py) is given and what it reports back: the payload's address,
how a holder's connection ranks, and the bytes moved. Apart from the fetch so that callers (the bench
peers, and the daemon once it fetches in pieces) name these without the trio machinery."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from libp2p.peer.id import ID

ConnClass = Callable[[ID], int]


def all_direct(_: ID) -> int:
    """The default connection class: every holder is a direct connection (class 0)."""
    return 0


@dataclass
class FetchStats:
    """What one fetch moved: piece bytes read (every verified or rejected piece), by holder too.
    ``downloaded / size`` is the fetch amplification."""

    downloaded: int = 0
    by_holder: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class SwarmRequest:
    run_id: bytes
    step: int
    root: bytes
    size: int | None  # from the announcement; None when only a list names the payload (the root binds it)

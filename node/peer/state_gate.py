"""Who may ask this node for state (protocol/sync.py ``StateServer``), and how often.

A banned peer gets nothing. Anyone else may, since a joiner is not in the roster yet, but at a bounded
rate: a snapshot description (``meta``) may mean cutting a new snapshot, which serializes and hashes the
whole state, so each peer gets a few at once and then one per ``META_INTERVAL_S``: an honest joiner or
resyncing peer asks each donor once per attempt, and attempts are seconds apart. Chunk requests only read
a held snapshot and are limited loosely, as a guard against a request flood, not a bandwidth cap.
"""

from __future__ import annotations

from collections.abc import Callable

from libp2p.peer.id import ID

from .intake import BanList
from .rate_limit import PeerRateLimit

META_INTERVAL_S = 5.0
META_BURST = 4
CHUNKS_PER_S = 200.0
CHUNK_BURST = 400


class StateRequestGate:
    def __init__(self, bans: BanList, clock: Callable[[], float]) -> None:
        self._bans = bans
        self._meta = PeerRateLimit(1.0 / META_INTERVAL_S, META_BURST, clock)
        self._chunks = PeerRateLimit(CHUNKS_PER_S, CHUNK_BURST, clock)
        self.refused = 0

    def __call__(self, remote: ID, op: str) -> bool:
        peer = str(remote)
        if self._bans.is_banned(peer):
            allowed = False
        elif op == "meta":
            allowed = self._meta.allow(peer)
        else:
            allowed = self._chunks.allow(peer)
        self.refused += not allowed
        return allowed

"""Who may ask this node for state (protocol/sync.py ``StateServer``), and how often.

A banned peer gets nothing. Anyone else may, since a joiner is not in the roster yet, but at a bounded
rate: a snapshot description (``meta``) may mean cutting a new snapshot, which serializes and hashes the
whole state, so each peer gets a few at once and then one per ``META_INTERVAL_S``: an honest joiner or
resyncing peer asks each donor once per attempt, and attempts are seconds apart. Chunk requests only read
a held snapshot, but each is up to a chunk of bytes (1 MiB by default) this node uploads: a peer gets a burst
of ``CHUNK_BURST`` (a whole small snapshot at once) and then ``CHUNKS_PER_S``, about 20 MiB/s, more than a
home line carries, so an honest joiner is never the one slowed. At 200 a second one member could make a node
serve its whole state again and again (bench/byzantine.py's meta-flood: 678 chunks in one run).

The same gate judges ``/distro/chain/1.0.0`` (protocol/chain_rpc.py): a whole chain (up to a few MB) is asked
once per sync attempt, so it is limited like a description; one attestation (``sig``) is small and asked by
each peer of the roster after each boundary it attests, so a few a second.
"""

from __future__ import annotations

from collections.abc import Callable

from libp2p.peer.id import ID

from .intake import BanList
from .rate_limit import PeerRateLimit

META_INTERVAL_S = 5.0
META_BURST = 4
CHUNKS_PER_S = 20.0
CHUNK_BURST = 400
SIGS_PER_S = 2.0
SIG_BURST = 16


class StateRequestGate:
    def __init__(self, bans: BanList, clock: Callable[[], float]) -> None:
        self._bans = bans
        self._meta = PeerRateLimit(1.0 / META_INTERVAL_S, META_BURST, clock)
        self._chunks = PeerRateLimit(CHUNKS_PER_S, CHUNK_BURST, clock)
        self._chain = PeerRateLimit(1.0 / META_INTERVAL_S, META_BURST, clock)
        self._sigs = PeerRateLimit(SIGS_PER_S, SIG_BURST, clock)
        self.refused = 0
        self.refused_by_op: dict[str, int] = {}  # for /metrics (``distro_requests_refused_total``)

    def __call__(self, remote: ID, op: str) -> bool:
        peer = str(remote)
        if self._bans.is_banned(peer):
            allowed = False
        elif op == "meta":
            allowed = self._meta.allow(peer)
        elif op == "chain":
            allowed = self._chain.allow(peer)
        elif op == "sig":
            allowed = self._sigs.allow(peer)
        else:
            allowed = self._chunks.allow(peer)
        if not allowed:
            self.refused += 1
            kind = op if op in ("meta", "chain", "sig") else "chunk"
            self.refused_by_op[kind] = self.refused_by_op.get(kind, 0) + 1
        return allowed

    def refusals(self) -> dict[str, int]:
        """Refused requests so far, as ``state_<op>`` (the labels of ``node/metrics.py`` ``REFUSALS``)."""
        return {f"state_{op}": n for op, n in self.refused_by_op.items()}

"""The shards a fetching peer's batches need, fetched from the swarm a few steps before they are read.

Why per step and per peer: a batch is a function of (run, step, peer) and the document lengths
(node/data/sampling.py), so this peer knows which shards its step s reads (``batch_shards``) without holding
any. ``ready(s)`` returns once those (and the shards of the fixed held-out-loss batch a checkpoint
evaluates) are held verified, fetching what is missing; meanwhile a background task
fetches the shards of the next ``ahead`` steps, so training rarely waits. A step waits at most
``wait_timeout`` seconds: then :class:`DataWaitError` stops the peer with the shard and the last error named
(a peer that cannot get its data must not train on anything else).

Faulty servers. protocol/blobs.py names every holder whose bytes failed the shard's sha256; such a peer is
counted (``distro_blob_faulty_total``), reported as a ``blob_faulty`` event and never asked for a file by this
peer again. It is not banned: bans change which inclusion lists a replica votes for and are fed only inputs
every honest replica shares (node/peer/bans.py); a bad upload is seen by its fetcher alone, so banning on it
would let one replica's view split the swarm's votes, and a liar could frame an honest peer the same way.
"""

from __future__ import annotations

import logging

import trio
from distro_node.protocol.blobs import BlobCatalog, BlobConfig, BlobFetchFailedError, fetch_blob
from distro_node.protocol.errors import TransportError
from distro_node.protocol.host import P2PHost
from libp2p.peer.id import ID

from ..data.rows import DocumentRows
from ..data.sampling import batch_shards
from ..data.shard_cache import CacheFullError, ShardCache
from ..data_metrics import DataMetrics
from .options import PeerError
from .output import Output
from .trainer import HELDOUT_PEER

logger = logging.getLogger(__name__)

AHEAD_STEPS = 3  # steps whose shards are fetched before they are needed
WAIT_TIMEOUT = 120.0  # seconds one step may wait for its shards
RETRY_SECONDS = 1.0


class DataWaitError(PeerError):
    """A step's shards could not be fetched and verified in time; names the shard and the last error."""


class DataFeed:
    def __init__(self, *, host: P2PHost, cache: ShardCache, rows: DocumentRows, catalog: BlobCatalog,
                 run_id: bytes, peer_id: str, batch_size: int, seq_len: int, bootstrap: ID | None,
                 out: Output, metrics: DataMetrics | None, ahead: int = AHEAD_STEPS,
                 wait_timeout: float = WAIT_TIMEOUT, config: BlobConfig | None = None) -> None:
        self._host = host
        self._cache = cache
        self._rows = rows
        self._catalog = catalog
        self._key = (run_id, peer_id, batch_size, seq_len)
        self._bootstrap = bootstrap
        self._out = out
        self._metrics = metrics
        self._ahead = ahead
        self._wait_timeout = wait_timeout
        self._config = config or BlobConfig()
        self._needed: dict[int, frozenset[int]] = {}
        self._inflight: dict[int, trio.Event] = {}
        self._faulty: set[str] = set()
        self._current = 0
        self._wake = trio.Event()
        self._last_error = "no fetch tried yet"
        run_id, _, batch_size, seq_len = self._key
        # The fixed batch a checkpoint's held-out loss is taken on (Trainer.heldout_loss): always held.
        self._pinned = frozenset(batch_shards(rows, run_id=run_id, step=0, peer=HELDOUT_PEER,
                                              batch_size=batch_size, seq_len=seq_len))
        self.fetched: list[int] = []  # shard indexes, in fetch order
        self.bytes_fetched = 0
        if metrics is not None:
            metrics.cached(len(cache.held()))

    def needed(self, step: int) -> frozenset[int]:
        """The train shards this peer's batch of ``step`` reads."""
        if step not in self._needed:
            run_id, peer, batch_size, seq_len = self._key
            self._needed[step] = frozenset(batch_shards(self._rows, run_id=run_id, step=step, peer=peer,
                                                        batch_size=batch_size, seq_len=seq_len))
        return self._needed[step]

    def _window(self) -> frozenset[int]:
        """Every shard of the current step and the next ``ahead``: what eviction must leave alone."""
        keep: set[int] = set(self._pinned)
        for s in range(self._current, self._current + self._ahead + 1):
            keep |= self.needed(s)
        return frozenset(keep)

    async def ready(self, step: int) -> None:
        """Return once every shard of ``step`` is held verified; DataWaitError after ``wait_timeout``."""
        self._current = max(self._current, step)
        for old in [s for s in self._needed if s < self._current]:
            del self._needed[old]
        need = self.needed(step) | self._pinned
        started = trio.current_time()
        with trio.move_on_after(self._wait_timeout) as scope:
            for i in sorted(need):
                while not self._cache.holds(i):
                    try:
                        ok = await self._ensure(i, need | self._window())
                    except CacheFullError:  # the coming steps' shards may go; this step's must fit
                        try:
                            ok = await self._ensure(i, need)
                        except CacheFullError as exc:
                            raise DataWaitError(f"step {step}: {exc}") from None
                    if not ok:
                        await trio.sleep(RETRY_SECONDS)
        if scope.cancelled_caught:
            missing = sorted(i for i in need if not self._cache.holds(i))
            blob = self._cache.blobs[missing[0]]
            raise DataWaitError(f"step {step} needs train shard {missing[0]} ({blob.file}, sha256 "
                                f"{blob.sha256}) but no peer served it verified within "
                                f"{self._wait_timeout:g}s: {self._last_error}")
        for i in need:
            self._cache.touch(i)
        if self._metrics is not None:
            self._metrics.waited(trio.current_time() - started)
        self._wake.set()

    async def prefetch(self) -> None:
        """Background task: after each ``ready``, fetch the shards of the next steps (one try each)."""
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            start = self._current
            for s in range(start + 1, start + self._ahead + 1):
                try:
                    for i in sorted(self.needed(s)):
                        if not self._cache.holds(i):
                            await self._ensure(i, self._window())
                except CacheFullError as exc:  # the coming steps do not fit: fetch them when they come
                    logger.debug("prefetch stopped at step %d: %s", s, exc)
                    break

    async def _ensure(self, index: int, keep: frozenset[int]) -> bool:
        """One attempt at holding shard ``index`` (or waiting for the attempt already running)."""
        running = self._inflight.get(index)
        if running is not None:
            await running.wait()
            return self._cache.holds(index)
        done = self._inflight[index] = trio.Event()
        try:
            return await self._fetch(index, keep)
        finally:
            del self._inflight[index]
            done.set()

    def _holders(self) -> list[ID]:
        """Connected members not known to serve bad bytes: the bootstrap peer first, then by id."""
        members = [p for p in self._host.member_peers() if str(p) not in self._faulty]
        members.sort(key=lambda p: (p != self._bootstrap, str(p)))
        return members

    async def _fetch(self, index: int, keep: frozenset[int]) -> bool:
        cache, blob = self._cache, self._cache.blobs[index]
        evicted = cache.make_room(blob.size, keep | {index})
        if self._metrics is not None and evicted:
            self._metrics.evicted(len(evicted))
        holders = self._holders()
        if not holders:
            self._last_error = "no connected member to fetch from"
            return False
        digest = bytes.fromhex(blob.sha256)
        try:
            result = await fetch_blob(self._host, digest, blob.size, holders, cache.path(index), self._config)
        except BlobFetchFailedError as exc:
            self._count_faulty(index, exc.faulty)
            self._last_error = str(exc)
            return False
        except TransportError as exc:
            self._last_error = f"{type(exc).__name__}: {exc}"
            return False
        self._count_faulty(index, result.faulty)
        cache.admit(index)
        self._catalog.add(cache.path(index), digest)
        size = blob.size - result.resumed_from if result.served_by else 0
        self.fetched.append(index)
        self.bytes_fetched += size
        if self._metrics is not None:
            self._metrics.fetched(size, shard=True)
            self._metrics.cached(len(cache.held()))
        self._out.emit("data_fetched", f"fetched train shard {index} ({blob.file}, {blob.size:,} B) from "
                       f"{', '.join(p[-8:] for p in result.served_by) or 'an earlier partial file'}",
                       shard=index, file=blob.file, bytes=size, served_by=result.served_by,
                       faulty=result.faulty, evicted=evicted, cached=len(cache.held()))
        return True

    def _count_faulty(self, index: int, faulty: list[str]) -> None:
        if not faulty:
            return
        blob = self._cache.blobs[index]
        if self._metrics is not None:  # counted before the event, so a reader of the event finds the count
            self._metrics.faulty(len(faulty))
        for peer in faulty:
            self._faulty.add(peer)
            logger.warning("peer %s served bytes of %s that fail its sha256; not asked again", peer,
                           blob.file)
            self._out.emit("blob_faulty", f"peer {peer[-8:]} served bytes of {blob.file} that fail its "
                           "sha256: rejected, fetching from another peer", peer=peer, shard=index,
                           file=blob.file)


__all__ = ["AHEAD_STEPS", "WAIT_TIMEOUT", "DataFeed", "DataWaitError"]

"""Fetching a payload the round machine asked for: download it (node/peer/payload_exchange.py), decode, keep
if valid.

The fetcher only gets bytes and judges them; the result goes back to the round machine through the caller
(node/peer/driver.py), so this module knows nothing of rounds.
"""

from __future__ import annotations

import enum
import logging

import trio
from distro_node.compression.errors import PayloadError
from distro_node.protocol.consensus import FetchPayload
from distro_node.protocol.errors import FetchFailedError, PayloadNotFoundError, TransportError
from libp2p.peer.id import ID

from .output import Output
from .payload_exchange import PayloadExchange
from .payloads import DecodedPayloads, PayloadKey
from .telemetry import Telemetry
from .trainer import Trainer

# bench/soak.py counts undelivered payloads by this record's logger name (`...node: fetch failed`), which
# dates from before node.py was split; it stays until the bench matches on the message alone.
logger = logging.getLogger(__name__)


class FetchResult(enum.Enum):
    VALID = "valid"  # decoded and kept (or already held)
    INVALID = "invalid"  # delivered but failed validation
    FAILED = "failed"  # no holder delivered
    DENIED = "denied"  # no holder delivered, and the author said it does not hold its own payload


class Fetcher:
    def __init__(
        self,
        *,
        exchange: PayloadExchange,
        run_id: bytes,
        trainer: Trainer,
        decoded: DecodedPayloads,
        out: Output,
        telemetry: Telemetry | None,
        decode_limit: trio.CapacityLimiter,
    ) -> None:
        self._exchange = exchange
        self._run_id = run_id
        self._trainer = trainer
        self._decoded = decoded
        self._out = out
        self._telemetry = telemetry
        self._decode_limit = decode_limit
        self._in_flight: set[PayloadKey] = set()

    async def fetch(self, a: FetchPayload) -> FetchResult | None:
        """Fetch, decode and judge one payload; None for a repeat request while one is in flight.

        The round machine repeats a fetch every ``fetch_retry_interval`` until it hears a result. A pull
        that takes longer than that (a 2.8 MB payload over a 10 Mbit link takes ~2 s) must not start a
        second download of the same bytes: on shaped links that doubled the bytes each peer pulled.
        """
        key = (a.step, a.peer_id, a.payload_hash)
        if key in self._decoded:
            return FetchResult.VALID
        if key in self._in_flight:
            return None  # the running fetch reports its result
        self._in_flight.add(key)
        try:
            return await self._fetch_once(a, key)
        finally:
            self._in_flight.discard(key)

    async def _fetch_once(self, a: FetchPayload, key: PayloadKey) -> FetchResult:
        data = self._exchange.store.get(a.step, a.payload_hash)
        try:
            if data is None:
                data = await self._exchange.pull(self._run_id, a.step, a.payload_hash, a.payload_size,
                                                 author=ID.from_base58(a.peer_id),
                                                 sources=[ID.from_base58(s) for s in a.sources])
        except TransportError as exc:
            logger.debug("fetch failed: %s", exc)
            attempts = exc.attempts if isinstance(exc, FetchFailedError) else []
            if any(peer == a.peer_id and isinstance(err, PayloadNotFoundError) for peer, err in attempts):
                return FetchResult.DENIED
            return FetchResult.FAILED
        try:
            payload = await trio.to_thread.run_sync(self._trainer.decode, data, a.peer_id, a.step,
                                                    limiter=self._decode_limit)
        except PayloadError as exc:
            self._out.emit("rejected", f"payload of {a.peer_id[-8:]} step {a.step} rejected: {exc.reason}",
                           peer=a.peer_id, step=a.step, reason=exc.reason)
            if self._telemetry is not None:
                self._telemetry.rejected(exc.reason)
            return FetchResult.INVALID
        self._decoded.put(key, payload)
        return FetchResult.VALID

"""Announcing our own payload of a step: store it, check it as a peer would, and tell the swarm.

With ``--fault`` the bytes are first rewritten by the fault injector (node/faults.py): nothing (silent),
other bytes, or two different payloads (equivocate: both announced, the first one is ours). Bytes that fail
our own validation are announced but never offered to our round machine, as an honest peer would treat
them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import trio
from distro_node.compression.errors import PayloadError
from distro_node.compression.payload import Payload
from distro_node.protocol.authorship import AuthorshipSigner
from distro_node.protocol.messages import Announcement
from distro_node.protocol.store import PayloadStore, payload_digest

from ..faults import FaultInjector
from .announced_mark import AnnouncedMark
from .driver import RoundDriver
from .outbox import Outbox
from .payloads import DecodedPayloads
from .telemetry import Telemetry
from .trainer import Computed, Trainer

logger = logging.getLogger(__name__)


class Announcer:
    def __init__(
        self,
        *,
        self_id: str,
        run_id: bytes,
        signer: AuthorshipSigner,
        mark: AnnouncedMark,
        trainer: Trainer,
        store: PayloadStore,
        own: Callable[[int, bytes], None],
        decoded: DecodedPayloads,
        outbox: Outbox,
        driver: RoundDriver,
        telemetry: Telemetry | None,
        fault: FaultInjector | None,
        decode_limit: trio.CapacityLimiter,
        comm_delay: float,
    ) -> None:
        self._self_id = self_id
        self._run_id = run_id
        self._signer = signer
        self._mark = mark
        self._trainer = trainer
        self._store = store
        self._own = own
        self._decoded = decoded
        self._outbox = outbox
        self._driver = driver
        self._telemetry = telemetry
        self._fault = fault
        self._decode_limit = decode_limit
        self._comm_delay = comm_delay

    async def announce(self, s: int, done: Computed, phases: dict[str, float]) -> int:
        """Store, self-decode and announce our payload of step ``s``; returns its size in bytes. Adds the
        time spent to ``phases`` ("codec", and "comm_delay" for the benchmark knob)."""
        if self._driver.machine is None or done.data is None:
            return 0
        t0 = time.perf_counter()
        messages = [done.data]
        if self._fault is not None:
            messages = await trio.to_thread.run_sync(self._fault.rewrite, s, done.data, self._trainer.spec,
                                                     self._run_id, self._self_id, limiter=self._decode_limit)
            if not messages:
                return 0
        data = messages[0]
        digest = payload_digest(data)
        if not self._mark.may_announce(s, digest):
            logger.warning("not announcing step %d: this identity signed another payload for it (before a "
                           "resync or a restart); a second one would be equivocation", s)
            return 0
        self._store.put_verified(s, digest, data)
        self._own(s, digest)
        payload: Payload | None = None
        try:
            payload = await trio.to_thread.run_sync(self._trainer.decode, data, self._self_id, s,
                                                    limiter=self._decode_limit)
        except PayloadError:
            if self._fault is None:
                raise  # our honest encoder produced bytes we cannot read: a bug, not a peer fault
        if payload is not None:
            self._decoded.put((s, self._self_id, digest), payload)
        phases["codec"] = time.perf_counter() - t0
        if self._comm_delay > 0:  # benchmark knob: the payload is ready, its "upload" takes this long
            t0 = time.perf_counter()
            await trio.sleep(self._comm_delay)
            phases["comm_delay"] = time.perf_counter() - t0
        # The hash of the weights at this step boundary (what a snapshot cut at step s describes).
        # Sequential: the weights the gradient was taken on. Overlapped: the gradient was taken one update
        # earlier, but every peer announces the same boundary hash, which the round machine compares.
        weights = self._trainer.weights_hash
        ann = Announcement(self._run_id, s, self._self_id, digest, len(data), weights,
                           self._signer.sign(s, digest))
        if self._telemetry is not None:
            self._telemetry.payload_sent(len(data))
        self._mark.record(s, digest)
        self._outbox.publish(ann)
        if payload is not None:
            self._driver.feed(lambda m, now: m.on_local_announcement(ann, now))
        for other in messages[1:]:
            other_digest = self._store.put(s, other)
            signature = self._signer.sign(s, other_digest)
            self._outbox.publish(Announcement(self._run_id, s, self._self_id, other_digest, len(other),
                                              weights, signature))
        return len(data)

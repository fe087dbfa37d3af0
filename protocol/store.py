"""Content-addressed payload store for the recent steps of one run.

Every peer serves whatever it holds, its own payload and every payload it fetched, so the upload of a popular
payload spreads over many holders instead of landing on its author's 10 Mbit uplink. Peers that lag a step
or two still need the previous steps' payloads, hence a window of steps rather than just the current one;
and a budget in bytes, because the window times the swarm size times ~2.8 MB is the node's memory.

Keyed by (step, sha256): identical bytes in two steps would be two entries, which never happens in practice
(the payload header carries the step) and keeps eviction a plain "drop oldest step".
"""

from __future__ import annotations

from collections import OrderedDict

from .errors import PayloadTooLargeForStoreError, StaleStepError
from .pieces import payload_root

DIGEST_BYTES = 32


def payload_digest(data: bytes) -> bytes:
    """The content address peers announce and request: the 32-byte root over the payload's pieces
    (protocol/pieces.py), so a swarm fetch checks every piece as it lands."""
    return payload_root(data)


class PayloadStore:
    """Payloads of the last ``window_steps`` steps, at most ``max_bytes`` in total, oldest evicted first."""

    def __init__(self, run_id: bytes, *, window_steps: int = 4, max_bytes: int = 512 * 1024 * 1024) -> None:
        if not run_id:
            raise ValueError("run_id must not be empty")
        if window_steps < 1:
            raise ValueError("window_steps must be >= 1")
        if max_bytes < 1:
            raise ValueError("max_bytes must be >= 1")
        self.run_id = bytes(run_id)
        self.window_steps = window_steps
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[int, bytes], bytes] = OrderedDict()
        self._bytes = 0
        self._newest_step: int | None = None

    @property
    def total_bytes(self) -> int:
        return self._bytes

    @property
    def newest_step(self) -> int | None:
        return self._newest_step

    def __len__(self) -> int:
        return len(self._entries)

    def oldest_kept_step(self) -> int | None:
        """Lowest step the window still accepts (None before the first put)."""
        if self._newest_step is None:
            return None
        return self._newest_step - self.window_steps + 1

    def put(self, step: int, data: bytes) -> bytes:
        """Store our own (or otherwise trusted) payload; returns its digest."""
        digest = payload_digest(data)
        self.put_verified(step, digest, data)
        return digest

    def put_verified(self, step: int, digest: bytes, data: bytes) -> None:
        """Store bytes whose sha256 the caller has just verified (the fetch path hashes while reading)."""
        _check_step(step)
        if len(digest) != DIGEST_BYTES:
            raise ValueError(f"digest must be {DIGEST_BYTES} bytes")
        if len(data) > self.max_bytes:
            raise PayloadTooLargeForStoreError(
                f"payload of {len(data)} bytes exceeds the store budget of {self.max_bytes}"
            )
        floor = self.oldest_kept_step()
        if floor is not None and step < floor:
            raise StaleStepError(f"step {step} is older than the store window (oldest kept {floor})")
        key = (step, bytes(digest))
        if key in self._entries:
            return
        if self._newest_step is None or step > self._newest_step:
            self._newest_step = step
            self._evict_outside_window()
        self._entries[key] = bytes(data)
        self._bytes += len(data)
        self._evict_over_budget()

    def get(self, step: int, digest: bytes) -> bytes | None:
        return self._entries.get((step, bytes(digest)))

    def has(self, step: int, digest: bytes) -> bool:
        return (step, bytes(digest)) in self._entries

    def _evict_outside_window(self) -> None:
        floor = self.oldest_kept_step()
        if floor is None:
            return
        for key in [k for k in self._entries if k[0] < floor]:
            self._bytes -= len(self._entries.pop(key))

    def _evict_over_budget(self) -> None:
        while self._bytes > self.max_bytes and self._entries:
            oldest = min(self._entries, key=lambda k: k[0])  # lowest step; insertion order breaks ties
            self._bytes -= len(self._entries.pop(oldest))


def _check_step(step: int) -> None:
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a non-negative int, got {step!r}")

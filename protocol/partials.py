"""Payloads being fetched, piece by piece: what a peer serves before it has a whole payload.

A fetcher opens an entry once it holds the verified piece-hash list, adds each piece after checking it, and
closes the entry when the payload is complete (it then lives in the PayloadStore) or the fetch gave up.
Pieces are kept as they arrive, so memory grows with what was received, never with what a peer claimed.
``changed`` wakes the server's long-polling HAVE requests whenever anything here moves.
"""

from __future__ import annotations

import trio

from .pieces import piece_count, piece_span


class PartialPayload:
    def __init__(self, size: int, hashes: list[bytes]) -> None:
        if len(hashes) != piece_count(size):
            raise ValueError(f"{len(hashes)} piece hashes for a payload of {piece_count(size)} pieces")
        self.size = size
        self.hashes = hashes
        self._pieces: dict[int, bytes] = {}

    @property
    def have(self) -> set[int]:
        return set(self._pieces)

    def piece(self, index: int) -> bytes | None:
        return self._pieces.get(index)

    def put(self, index: int, data: bytes) -> None:
        """Keep a piece the caller verified against ``hashes[index]``."""
        want = piece_span(self.size, index)[1]
        if len(data) != want:
            raise ValueError(f"piece {index} has {len(data)} bytes, expected {want}")
        self._pieces[index] = data

    def complete(self) -> bool:
        return len(self._pieces) == len(self.hashes)

    def assemble(self) -> bytes:
        return b"".join(self._pieces[i] for i in range(len(self.hashes)))


class PartialPayloads:
    """Open partial payloads by (step, root); at most ``max_entries`` (a fetch beyond it is not served)."""

    def __init__(self, max_entries: int = 64) -> None:
        self.max_entries = max_entries
        self._entries: dict[tuple[int, bytes], PartialPayload] = {}
        self._changed = trio.Event()

    def __len__(self) -> int:
        return len(self._entries)

    def open(self, step: int, root: bytes, size: int, hashes: list[bytes]) -> PartialPayload:
        entry = PartialPayload(size, hashes)
        key = (step, bytes(root))
        if key in self._entries or len(self._entries) < self.max_entries:
            self._entries[key] = entry
            self.notify()
        return entry

    def get(self, step: int, root: bytes) -> PartialPayload | None:
        return self._entries.get((step, bytes(root)))

    def close(self, step: int, root: bytes) -> None:
        if self._entries.pop((step, bytes(root)), None) is not None:
            self.notify()

    def notify(self) -> None:
        """Something changed (a piece, an entry): wake every waiter."""
        self._changed.set()
        self._changed = trio.Event()

    async def wait_changed(self) -> None:
        await self._changed.wait()

"""Payloads being fetched, piece by piece: what a peer serves before it has a whole payload.

A fetcher takes an entry once it holds the verified piece-hash list (``acquire``), adds each piece after
checking it, and closes the entry when the payload is complete (it then lives in the PayloadStore). A fetch
that gave up releases its entry instead: the verified pieces stay, served to others, and the next fetch of
that payload asks only for the rest (with the entry dropped, a retry downloaded every piece again). A
released entry gives its place to a newer payload's when every place is taken, the oldest step first.
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
    """Open partial payloads by (step, root); at most ``max_entries`` (a fetch beyond it is not served), of
    which at most ``max_released`` no fetch works on (each holds up to a payload's bytes until evicted)."""

    def __init__(self, max_entries: int = 64, max_released: int = 8) -> None:
        if max_entries < 1 or max_released < 0:
            raise ValueError("PartialPayloads needs max_entries >= 1 and max_released >= 0")
        self.max_entries = max_entries
        self.max_released = max_released
        self._entries: dict[tuple[int, bytes], PartialPayload] = {}
        self._users: dict[tuple[int, bytes], int] = {}  # fetches working on an entry now
        self._changed = trio.Event()

    def __len__(self) -> int:
        return len(self._entries)

    def open(self, step: int, root: bytes, size: int, hashes: list[bytes]) -> PartialPayload:
        """A new entry for the payload (replacing one it had), unregistered when every place is taken."""
        entry = PartialPayload(size, hashes)
        key = (step, bytes(root))
        if key not in self._entries and len(self._entries) >= self.max_entries:
            released = self._released()
            if released:
                self.close(*released[0])
        if key in self._entries or len(self._entries) < self.max_entries:
            self._entries[key] = entry
            self.notify()
        return entry

    def acquire(self, step: int, root: bytes, size: int, hashes: list[bytes]) -> PartialPayload:
        """The entry a fetch works on: the one an earlier fetch of this payload left, with its pieces, else a
        new one. ``hashes`` must be the list verified against ``root`` (so equal to a kept entry's)."""
        key = (step, bytes(root))
        entry = self._entries.get(key)
        if entry is None:
            entry = self.open(step, root, size, hashes)
        if self._entries.get(key) is entry:
            self._users[key] = self._users.get(key, 0) + 1
        return entry

    def release(self, step: int, root: bytes) -> None:
        """A fetch of this payload gave up: its pieces stay until a newer payload needs the place, or more
        than ``max_released`` entries wait so (the oldest step goes first)."""
        key = (step, bytes(root))
        left = self._users.pop(key, 0) - 1
        if left > 0:
            self._users[key] = left
        released = self._released()
        for old in released[: max(0, len(released) - self.max_released)]:
            self.close(*old)

    def get(self, step: int, root: bytes) -> PartialPayload | None:
        return self._entries.get((step, bytes(root)))

    def close(self, step: int, root: bytes) -> None:
        self._users.pop((step, bytes(root)), None)
        if self._entries.pop((step, bytes(root)), None) is not None:
            self.notify()

    def _released(self) -> list[tuple[int, bytes]]:
        """The entries no fetch is working on, oldest step first (the order they give their place in)."""
        return sorted(key for key in self._entries if key not in self._users)

    def notify(self) -> None:
        """Something changed (a piece, an entry): wake every waiter."""
        self._changed.set()
        self._changed = trio.Event()

    async def wait_changed(self) -> None:
        await self._changed.wait()

"""A payload's content address as a root over fixed-size pieces, so each piece can be checked on arrival.

Why not sha256 of the whole payload: a swarm fetch takes pieces from several holders, and a whole-payload
hash only convicts *someone* once every byte is in. The root is sha256 over the payload size and the list of
piece hashes; whoever holds the payload serves that list, the fetcher checks it against the root it got
from the signed announcement, and from then on every piece is verified the moment it lands and a lying
holder is known by name. The announcement carries only the 32-byte root, so it stays the same size at any
model size; the list (32 bytes per piece, 4 KiB at the 16 MiB payload cap) moves on the piece protocol.

Piece size: payloads are 0.4-2.8 MB and the slowest uplinks 2-10 Mbit/s. 128 KiB is 0.1 s at 10 Mbit and
0.5 s at 2 Mbit, and cuts a 1.45 MB payload into 12 pieces, enough for 7 fetchers to start on different
pieces of a slow origin and trade them among themselves, while a request per piece stays small next to it.
It is part of the address (a different size gives a different root), hence a constant, not a setting.
"""

from __future__ import annotations

import hashlib
import struct

PIECE_BYTES = 128 * 1024
PIECE_HASH_BYTES = 32
_DOMAIN = b"distro-node/pieces/v1\0"
_SIZE = struct.Struct(">Q")


def piece_count(size: int) -> int:
    """Pieces of a payload of ``size`` bytes (an empty payload still has one, empty, piece)."""
    if size < 0:
        raise ValueError(f"negative payload size {size}")
    return max(1, -(-size // PIECE_BYTES))


def piece_span(size: int, index: int) -> tuple[int, int]:
    """(offset, length) of piece ``index`` of a payload of ``size`` bytes."""
    if not 0 <= index < piece_count(size):
        raise ValueError(f"piece {index} outside 0..{piece_count(size) - 1}")
    start = index * PIECE_BYTES
    return start, min(PIECE_BYTES, size - start)


def piece_hash(data: bytes | memoryview) -> bytes:
    return hashlib.sha256(data).digest()


def piece_hashes(data: bytes) -> list[bytes]:
    view = memoryview(data)
    spans = (piece_span(len(data), i) for i in range(piece_count(len(data))))
    return [piece_hash(view[o : o + n]) for o, n in spans]


def piece_matches(data: bytes, index: int, hashes: list[bytes] | None, size: int, root: bytes) -> bool:
    """Whether ``data`` is piece ``index``: against its listed hash, or (``hashes`` None: a one-piece
    payload fetched without its list) against the root itself."""
    digest = piece_hash(data)
    return root_of(size, [digest]) == root if hashes is None else digest == hashes[index]


def root_of(size: int, hashes: list[bytes]) -> bytes:
    """The content address of a payload of ``size`` bytes whose pieces hash to ``hashes``."""
    digest = hashlib.sha256(_DOMAIN)
    digest.update(_SIZE.pack(size))
    for h in hashes:
        digest.update(h)
    return digest.digest()


def payload_root(data: bytes) -> bytes:
    return root_of(len(data), piece_hashes(data))


class RootHasher:
    """The root of bytes fed in arbitrary chunks (the whole-payload stream hashes as it reads)."""

    def __init__(self) -> None:
        self._hashes: list[bytes] = []
        self._piece = hashlib.sha256()
        self._in_piece = 0
        self._size = 0

    def update(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            take = min(PIECE_BYTES - self._in_piece, len(view))
            self._piece.update(view[:take])
            self._in_piece += take
            self._size += take
            view = view[take:]
            if self._in_piece == PIECE_BYTES:
                self._hashes.append(self._piece.digest())
                self._piece = hashlib.sha256()
                self._in_piece = 0

    def digest(self) -> bytes:
        hashes = list(self._hashes)
        if self._in_piece or not hashes:
            hashes.append(self._piece.digest())
        return root_of(self._size, hashes)

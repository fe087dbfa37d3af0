"""The piece root: the same whether hashed whole or streamed, and sensitive to every piece and the size."""

from __future__ import annotations

import pytest
from distro_node.protocol.pieces import (
    PIECE_BYTES,
    RootHasher,
    payload_root,
    piece_count,
    piece_hashes,
    piece_span,
    root_of,
)


@pytest.mark.parametrize("size", [0, 1, PIECE_BYTES - 1, PIECE_BYTES, PIECE_BYTES + 1, 3 * PIECE_BYTES + 17])
def test_streamed_root_equals_whole_root(size: int) -> None:
    data = bytes(i % 251 for i in range(size))
    hasher = RootHasher()
    for k in range(0, size, 7777):
        hasher.update(data[k : k + 7777])
    assert hasher.digest() == payload_root(data)
    assert len(piece_hashes(data)) == piece_count(size)
    assert sum(piece_span(size, i)[1] for i in range(piece_count(size))) == size


def test_root_binds_size_and_every_piece() -> None:
    data = bytes(3 * PIECE_BYTES)
    hashes = piece_hashes(data)
    root = root_of(len(data), hashes)
    assert root_of(len(data) - 1, hashes) != root
    changed = bytearray(data)
    changed[2 * PIECE_BYTES + 5] ^= 1
    assert payload_root(bytes(changed)) != root
    with pytest.raises(ValueError):
        piece_span(len(data), 3)

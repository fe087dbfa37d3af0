"""Partial payloads (protocol/partials.py): a fetch that gave up leaves its verified pieces for the next try,
and a released entry makes room for a newer payload's, never one a fetch is working on."""

from __future__ import annotations

import pytest
from distro_node.protocol.partials import PartialPayloads
from distro_node.protocol.pieces import PIECE_BYTES, piece_hashes, piece_span

DATA = bytes(range(256)) * (3 * PIECE_BYTES // 256) + b"tail"
HASHES = piece_hashes(DATA)


def _put(partials: PartialPayloads, step: int, root: bytes, index: int) -> None:
    entry = partials.acquire(step, root, len(DATA), HASHES)
    start, length = piece_span(len(DATA), index)
    entry.put(index, DATA[start : start + length])


def test_a_released_entry_keeps_its_pieces_for_the_next_fetch() -> None:
    partials = PartialPayloads()
    _put(partials, 5, b"r" * 32, 1)
    partials.release(5, b"r" * 32)  # the fetch gave up
    again = partials.acquire(5, b"r" * 32, len(DATA), HASHES)
    assert again.have == {1}
    partials.close(5, b"r" * 32)  # the payload is complete: the entry goes
    assert partials.get(5, b"r" * 32) is None and len(partials) == 0


def test_a_full_table_drops_the_oldest_released_entry_and_never_one_in_use() -> None:
    partials = PartialPayloads(max_entries=2)
    partials.acquire(7, b"a" * 32, len(DATA), HASHES)
    partials.acquire(3, b"b" * 32, len(DATA), HASHES)
    # Both in use: a third payload's fetch works on an entry of its own that is not served.
    third = partials.acquire(9, b"c" * 32, len(DATA), HASHES)
    assert partials.get(9, b"c" * 32) is None and third.have == set()
    partials.release(7, b"a" * 32)
    partials.release(3, b"b" * 32)
    partials.acquire(7, b"a" * 32, len(DATA), HASHES)  # taken up again: in use
    partials.acquire(9, b"c" * 32, len(DATA), HASHES)
    assert partials.get(3, b"b" * 32) is None  # the released one went
    assert partials.get(7, b"a" * 32) is not None and partials.get(9, b"c" * 32) is not None


def test_an_entry_two_fetches_share_stays_in_use_until_both_released() -> None:
    partials = PartialPayloads(max_entries=1)
    partials.acquire(1, b"a" * 32, len(DATA), HASHES)
    partials.acquire(1, b"a" * 32, len(DATA), HASHES)
    partials.release(1, b"a" * 32)
    partials.acquire(2, b"b" * 32, len(DATA), HASHES)
    assert partials.get(1, b"a" * 32) is not None  # the other fetch still works on it
    partials.release(1, b"a" * 32)
    partials.acquire(2, b"b" * 32, len(DATA), HASHES)
    assert partials.get(1, b"a" * 32) is None and partials.get(2, b"b" * 32) is not None


def test_at_most_max_released_entries_wait_for_a_next_fetch() -> None:
    partials = PartialPayloads(max_entries=8, max_released=2)
    for step in (4, 2, 6):
        partials.acquire(step, b"r" * 32, len(DATA), HASHES)
    for step in (4, 2, 6):
        partials.release(step, b"r" * 32)
    assert partials.get(2, b"r" * 32) is None  # the oldest step went
    assert partials.get(4, b"r" * 32) is not None and partials.get(6, b"r" * 32) is not None


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="max_released"):
        PartialPayloads(max_released=-1)
    with pytest.raises(ValueError, match="max_entries"):
        PartialPayloads(max_entries=0)

"""Payload store: window of steps, byte budget, typed refusals (no network)."""

from __future__ import annotations

import pytest
from distro_node.protocol.errors import PayloadTooLargeForStoreError, StaleStepError
from distro_node.protocol.store import PayloadStore, payload_digest

RUN = b"\x01" * 32


def test_put_get_by_step_and_hash() -> None:
    store = PayloadStore(RUN)
    digest = store.put(3, b"abc")
    assert digest == payload_digest(b"abc")
    assert store.get(3, digest) == b"abc"
    assert store.get(4, digest) is None
    assert store.has(3, digest) and len(store) == 1 and store.total_bytes == 3


def test_window_evicts_old_steps_and_refuses_stale() -> None:
    store = PayloadStore(RUN, window_steps=2)
    d1 = store.put(1, b"one")
    d2 = store.put(2, b"two")
    d3 = store.put(3, b"three")
    assert store.get(1, d1) is None
    assert store.get(2, d2) == b"two" and store.get(3, d3) == b"three"
    with pytest.raises(StaleStepError):
        store.put(1, b"late")
    assert store.total_bytes == len(b"two") + len(b"three")


def test_byte_budget_evicts_oldest_first() -> None:
    store = PayloadStore(RUN, window_steps=10, max_bytes=10)
    a = store.put(1, b"aaaa")
    b = store.put(2, b"bbbb")
    c = store.put(3, b"cccc")
    assert store.get(1, a) is None
    assert store.get(2, b) and store.get(3, c)
    assert store.total_bytes == 8
    with pytest.raises(PayloadTooLargeForStoreError):
        store.put(4, b"x" * 11)


def test_duplicate_put_is_idempotent() -> None:
    store = PayloadStore(RUN)
    store.put(1, b"same")
    store.put(1, b"same")
    assert len(store) == 1 and store.total_bytes == 4


@pytest.mark.parametrize("step", [-1, 1.5, True, "3"])
def test_bad_step_rejected(step: object) -> None:
    with pytest.raises(ValueError):
        PayloadStore(RUN).put(step, b"x")  # type: ignore[arg-type]


def test_bad_construction_rejected() -> None:
    with pytest.raises(ValueError):
        PayloadStore(b"")
    with pytest.raises(ValueError):
        PayloadStore(RUN, window_steps=0)

"""The renewal decisions for relayed connections (protocol/circuit_renewal.py): pure, times passed in."""

from __future__ import annotations

import pytest
from distro_node.protocol.circuit_renewal import (
    CircuitLife,
    Margins,
    Step,
    close_time,
    decide,
    next_wake,
    redial_order,
    renew_bytes,
    renew_time,
    settle_time,
    superseded,
    to_retire,
)

M = Margins(seconds=30.0, bytes=1000)


def _step(c: CircuitLife, now: float, *, is_open: bool = True, busy: bool = False, others: bool = False,
          outbound: bool = True) -> Step:
    return decide(c, now, M, is_open=is_open, busy=busy, others=others, outbound=outbound)


def test_an_outbound_circuit_is_renewed_its_margin_before_the_time_cap() -> None:
    c = CircuitLife(opened_at=100.0, seconds=600.0, bytes_cap=None)
    assert renew_time(c, M) == 670.0 and next_wake(c, M) == 670.0
    assert _step(c, 669.9) is Step.KEEP
    assert _step(c, 670.0) is Step.RENEW
    assert _step(c, 670.0, outbound=False) is Step.KEEP  # the side that was dialed knows no circuit address


def test_a_tiny_cap_is_renewed_half_way_not_at_once() -> None:
    c = CircuitLife(opened_at=0.0, seconds=4.0, bytes_cap=600)
    assert renew_time(c, M) == 2.0 and renew_bytes(c, M) == 300
    assert _step(c, 1.9) is Step.KEEP and _step(c, 2.0) is Step.RENEW


def test_the_byte_cap_renews_once_the_bytes_near_it() -> None:
    c = CircuitLife(opened_at=0.0, seconds=None, bytes_cap=10_000)
    assert renew_bytes(c, M) == 9000 and next_wake(c, M) is None  # bytes wake the keeper themselves
    c.used = 8999
    assert _step(c, 1e9) is Step.KEEP
    c.used = 9000
    assert _step(c, 0.0) is Step.RENEW


def test_with_another_connection_open_the_circuit_is_retired_not_renewed() -> None:
    c = CircuitLife(opened_at=0.0, seconds=100.0, bytes_cap=None)
    assert _step(c, 80.0, others=True) is Step.RETIRE  # e.g. hole punching gave a direct one


def test_a_failed_renewal_waits_for_its_retry_time() -> None:
    c = CircuitLife(opened_at=0.0, seconds=100.0, bytes_cap=None, retry_at=75.0)
    assert _step(c, 74.0) is Step.KEEP and next_wake(c, M) == 75.0
    assert _step(c, 75.0) is Step.RENEW


def test_a_retired_circuit_closes_once_idle_after_settling_or_half_way_to_its_cap() -> None:
    c = CircuitLife(opened_at=0.0, seconds=600.0, bytes_cap=None, retired_at=570.0)
    assert close_time(c, M) == 585.0 and next_wake(c, M) == 585.0 and settle_time(c, M) == 577.5
    assert _step(c, 571.0, busy=False) is Step.KEEP  # the other side may still be switching over
    assert _step(c, 577.5, busy=True) is Step.KEEP
    assert _step(c, 577.5, busy=False) is Step.CLOSE
    assert _step(c, 585.0, busy=True) is Step.CLOSE
    assert _step(c, 571.0, is_open=False) is Step.FORGET
    inbound = CircuitLife(opened_at=0.0, seconds=None, bytes_cap=None, retired_at=10.0)
    assert close_time(inbound, M) == 25.0  # caps unknown: half the time margin


def test_a_cut_circuit_is_redialed_only_by_its_dialer_and_only_if_nothing_else_is_open() -> None:
    c = CircuitLife(opened_at=0.0, seconds=600.0, bytes_cap=None)
    assert _step(c, 10.0, is_open=False) is Step.REDIAL
    assert _step(c, 10.0, is_open=False, others=True) is Step.FORGET
    assert _step(c, 10.0, is_open=False, outbound=False) is Step.FORGET


def test_renewing_tries_the_same_relay_first_and_a_cut_tries_the_others_first() -> None:
    addrs = [("a1", "A"), ("b1", "B"), ("a2", "A"), ("c1", "C")]
    assert redial_order(addrs, "A", cut=False) == ["a1", "a2", "b1", "c1"]
    assert redial_order(addrs, "A", cut=True) == ["b1", "c1", "a1", "a2"]
    assert redial_order([], "A", cut=True) == []


def test_of_a_peers_circuits_all_but_the_newest_are_superseded() -> None:
    assert superseded([("old", 1.0), ("new", 5.0), ("mid", 3.0)]) == ["old", "mid"]
    assert superseded([("only", 1.0)]) == [] and superseded([]) == []


def test_when_both_sides_dialed_only_the_smaller_ids_circuits_stay_and_of_those_the_newest() -> None:
    ours, theirs = [("o1", 1.0), ("o2", 4.0)], [("t1", 2.0), ("t2", 3.0)]
    assert to_retire(ours, theirs, ours_kept=True) == ["t1", "t2", "o1"]
    assert to_retire(ours, theirs, ours_kept=False) == ["o1", "o2", "t1"]  # the other side decides alike
    assert to_retire([], theirs, ours_kept=True) == ["t1"]  # only they dialed: a renewal of theirs
    assert to_retire(ours, [], ours_kept=False) == ["o1"]
    assert to_retire([("o1", 1.0)], [], ours_kept=False) == []


@pytest.mark.parametrize(("seconds", "nbytes"), [(0.0, 10), (-1.0, 10), (1.0, 0)])
def test_bad_margins_are_refused(seconds: float, nbytes: int) -> None:
    with pytest.raises(ValueError, match="margins"):
        Margins(seconds, nbytes)

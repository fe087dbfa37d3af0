"""Turns at a busy holder and one request per holder per fetcher (protocol/swarm_turns.py), the scheduler's
side of them (retry-after rests, the gate in next_requests), and their effect in the flow model."""

from __future__ import annotations

import pytest
from distro_node.node.sim.flow_net import Line
from distro_node.node.sim.flow_spec import ExchangeSpec
from distro_node.node.sim.flow_step import simulate_exchange
from distro_node.node.sim.flow_topology import full_mesh
from distro_node.protocol.pieces import PIECE_BYTES
from distro_node.protocol.swarm_schedule import ALL, Failure, PieceScheduler, ScheduleConfig
from distro_node.protocol.swarm_turns import GateUse, HolderGate, Waitlist

SIZE = 6 * PIECE_BYTES


def test_refused_fetchers_are_told_turns_one_slot_time_apart_after_the_first_free_slot() -> None:
    w = Waitlist(slots=2, prior_piece_seconds=1.0)
    w.started(1, now=0.0)
    w.started(2, now=0.4)
    assert w.turn("a", now=0.5) == pytest.approx(0.5)  # upload 1 ends at 1.0
    assert w.turn("b", now=0.5) == pytest.approx(1.0)  # then every 1.0 / 2 slots
    assert w.turn("a", now=0.6) == pytest.approx(0.4)  # asked again early: same turn
    w.served("a")
    assert w.turn("c", now=0.6) == pytest.approx(0.4 + 0.5)  # behind b only


def test_past_turns_are_forgotten_and_a_holder_with_no_upload_waits_one_spacing() -> None:
    w = Waitlist(slots=2, prior_piece_seconds=1.0)
    assert w.turn("a", now=0.0) == pytest.approx(0.5)
    assert w.turn("b", now=10.0) == pytest.approx(0.5)  # a's turn passed long ago


def test_the_time_per_piece_follows_complete_uploads_only() -> None:
    w = Waitlist(slots=1, prior_piece_seconds=1.0, smoothing=0.5)
    w.started(1, now=0.0)
    w.finished(1, now=3.0, complete=True)
    assert w.piece_seconds == pytest.approx(2.0)
    w.started(2, now=3.0)
    w.finished(2, now=3.1, complete=False)  # cut off: says nothing of the uplink
    assert w.piece_seconds == pytest.approx(2.0)


def test_turns_tracked_are_bounded_and_bad_settings_refused() -> None:
    w = Waitlist(slots=1, prior_piece_seconds=1.0, max_tracked=3)
    for i in range(10):
        w.turn(f"f{i}", now=0.0)
    assert w.turn("late", now=0.0) <= 4.0  # at most 3 ahead of it
    with pytest.raises(ValueError):
        Waitlist(slots=0, prior_piece_seconds=1.0)
    with pytest.raises(ValueError):
        HolderGate(per_holder=0)


def test_the_gate_allows_one_request_per_holder_and_pokes_every_fetch_when_one_ends() -> None:
    gate = HolderGate()
    pokes: list[str] = []
    stop = gate.watch(lambda: pokes.append("x"))
    one, two = GateUse(gate), GateUse(gate)
    one.took(1, "h")
    assert not gate.may_ask("h") and gate.may_ask("g")
    two.settle(set())  # the other fetch holds nothing there
    assert not gate.may_ask("h")
    one.settle({1})  # still in flight
    assert not gate.may_ask("h") and pokes == []
    one.settle(set())
    assert gate.may_ask("h") and pokes == ["x"]
    stop()
    one.took(2, "h")
    one.settle(set())
    assert pokes == ["x"]
    assert GateUse(None).may_ask is None


def test_scheduler_rests_a_busy_holder_as_told_within_its_bounds() -> None:
    cfg = ScheduleConfig(backoff=0.1, max_rest=2.0)
    s = PieceScheduler(SIZE, config=cfg)
    s.holder_has("h", ALL)
    for told, rest in ((0.0, 0.1), (0.7, 0.7), (3600.0, 2.0)):
        (req,) = s.next_requests(0.0)
        s.request_failed(req.id, 0.0, Failure.BUSY, retry_after=told)
        assert s.next_wake(0.0) == pytest.approx(rest)
        assert s.next_requests(rest - 0.01) == [] and not s.could_ask("h", rest - 0.01)
        assert s.could_ask("h", rest)
        s.holders["h"].resting_until = 0.0
    with pytest.raises(ValueError):
        ScheduleConfig(max_rest=0)


def test_next_requests_skips_holders_the_gate_closes() -> None:
    s = PieceScheduler(SIZE, config=ScheduleConfig(max_in_flight=2))
    s.holder_has("a", ALL)
    s.holder_has("b", ALL)
    reqs = s.next_requests(0.0, lambda h: h != "a")
    assert [r.holder for r in reqs] == ["b"]  # one per holder per call under a gate
    assert s.in_flight_ids() == {reqs[0].id}


def test_in_the_flow_model_turns_refuse_far_fewer_requests_and_the_exchange_is_no_slower() -> None:
    home = Line.mbit(100, 10)
    n = 8
    results = {}
    for turns in (False, True):
        spec = ExchangeSpec(lines=(home,) * n, payload_bytes=600_000, wants=full_mesh(n),
                            neighbours=full_mesh(n), latency=0.025, turns=turns)
        results[turns] = simulate_exchange(spec)
    before, after = results[False], results[True]
    assert after.refused * 2 < before.refused
    assert after.seconds <= before.seconds * 1.05
    assert after.amplification == pytest.approx(1.0)


def test_a_request_is_held_for_a_slot_only_when_one_should_free_soon() -> None:
    w = Waitlist(slots=2, prior_piece_seconds=0.4)
    w.started(1, now=0.0)
    w.started(2, now=0.3)
    assert w.hold_for(0.1, cap=0.5) == pytest.approx(2 * 0.3)  # upload 1 should end at 0.4: margin 2x
    assert w.hold_for(0.1, cap=0.2) == 0.0  # not within the cap: refused at once, as a slow holder does


def test_in_the_flow_model_requests_held_for_a_slot_are_refused_less_and_the_exchange_is_no_slower() -> None:
    home = Line.mbit(100, 10)
    n = 8
    results = {}
    for slot_wait in (1e-9, 0.25):  # refused at once, as before holding; the default
        spec = ExchangeSpec(lines=(home,) * n, payload_bytes=600_000, wants=full_mesh(n),
                            neighbours=full_mesh(n), latency=0.025, slot_wait=slot_wait)
        results[slot_wait] = simulate_exchange(spec)
    before, after = results[1e-9], results[0.25]
    assert after.refused * 2 < before.refused
    assert after.seconds <= before.seconds * 1.02
    assert after.amplification == pytest.approx(1.0)

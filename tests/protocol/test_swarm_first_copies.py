"""An origin's first copies go to fetchers that pass them on fast (protocol/swarm_first_copies.py): the pure
rule, the pieces server applying it on real loopback hosts, and the flow model of the testbed's lines."""

from __future__ import annotations

import os

import pytest
import trio
from distro_node.node.sim.flow_net import FlowModelError, Line
from distro_node.node.sim.flow_spec import ExchangeSpec
from distro_node.node.sim.flow_step import simulate_exchange
from distro_node.node.sim.flow_topology import full_mesh
from distro_node.node.testbed.links import profile_links
from distro_node.protocol.pieces_wire import PiecesConfig, Status
from distro_node.protocol.swarm_first_copies import FirstCopies, PeerRates
from distro_node.protocol.testing import WAIT, wait_until
from pieces_support import SIZE, ask_piece, open_session, swarm

FAST, SLOW = 1e12, 1.0  # bytes/s: far above and below any upload rate a loopback holder measures


def test_peer_rates_average_each_peer_and_forget_the_least_recent_beyond_the_cap() -> None:
    rates = PeerRates(smoothing=0.5, max_tracked=2)
    rates.observe("a", 100.0)
    rates.observe("a", 300.0)
    rates.observe("b", 0.0)  # nothing measured: ignored
    assert rates.get("a") == 200.0 and rates.get("b") == 0.0
    rates.observe("b", 10.0)
    rates.observe("c", 20.0)
    assert rates.get("a") == 0.0 and rates.get("b") == 10.0 and rates.get("c") == 20.0
    with pytest.raises(ValueError, match="smoothing"):
        PeerRates(smoothing=0)


def test_a_first_copy_waits_for_a_fast_fetcher_only_while_one_is_waiting() -> None:
    rates = PeerRates()
    rates.observe("gigabit", 100.0)
    rates.observe("home", 15.0)
    rule = FirstCopies(factor=2.0, window=1.0)
    own = 10.0  # our upload rate: "fast" is 20 and more
    assert rule.may_send("home", 0.0, own, rates)  # nobody fast asked yet
    rule.asked("gigabit", 0.0)
    assert rule.may_send("gigabit", 0.5, own, rates)
    assert not rule.may_send("home", 0.5, own, rates)  # kept for the gigabit fetcher
    assert not rule.may_send("stranger", 0.5, own, rates)  # never measured: not fast
    assert rule.may_send("home", 1.5, own, rates)  # the gigabit fetcher has not asked for a while
    assert FirstCopies(factor=0.0, window=1.0).may_send("home", 0.5, own, rates)  # off
    with pytest.raises(ValueError, match="factor"):
        FirstCopies(factor=-1.0, window=1.0)


def test_a_repeat_waits_a_window_after_a_fast_fetcher_got_the_piece() -> None:
    rates = PeerRates()
    rates.observe("gigabit", 100.0)
    rates.observe("home", 15.0)
    rule = FirstCopies(factor=2.0, window=1.0)
    own, started = 10.0, {0: 1, 1: 1}
    rule.delivered("p", 0, "gigabit", 0.0, own, rates)
    rule.delivered("p", 1, "home", 0.0, own, rates)  # not twice our rate: its copy does not count
    assert rule.keeps("p", 0, started, "home", 0.5, own, rates)
    assert not rule.keeps("p", 1, started, "gigabit", 0.5, own, rates)
    assert not rule.keeps("other payload", 0, started, "home", 0.5, own, rates)
    assert not rule.keeps("p", 0, started, "home", 1.5, own, rates)  # the window is over: served again
    off = FirstCopies(factor=0.0, window=1.0)
    off.delivered("p", 0, "gigabit", 0.0, own, rates)
    assert not off.keeps("p", 0, started, "home", 0.5, own, rates)


@pytest.mark.network
def test_an_origin_keeps_its_first_copies_for_a_fast_fetcher_and_repeats_only_what_no_fast_one_got() -> None:
    config = PiecesConfig(piece_timeout=WAIT, fetch_timeout=WAIT, first_copy_window=WAIT)

    async def body() -> None:
        async with swarm(3, config=config) as ((origin, fast, slow), (server, _, _)):
            server.rates.observe(str(fast.peer_id), FAST)  # as if the origin had fetched from them
            server.rates.observe(str(slow.peer_id), SLOW)
            root = server.store.put(3, os.urandom(SIZE))
            server.mark_own(3, root)
            with trio.fail_after(WAIT):
                from_fast = await open_session(fast, origin, 3, root)
                from_slow = await open_session(slow, origin, 3, root)
                assert await ask_piece(from_slow, 1) is Status.OK  # nobody fast asked yet
                assert await ask_piece(from_fast, 0) is Status.OK
                assert await ask_piece(from_slow, 2) is Status.BUSY  # a first copy, kept for the fast one
                assert server.busy == 1
                assert await ask_piece(from_fast, 2) is Status.OK
                assert await ask_piece(from_fast, 1) is Status.OK  # a repeat, on an idle uplink
                # A repeat of what the fast fetcher just got: it is to be had from there.
                assert await ask_piece(from_slow, 0) is Status.BUSY
            kinds = {"own_first": 3, "own_repeat": 1, "relay": 0}
            await wait_until(lambda: server.served_by_kind == kinds, "three first copies and a repeat")

    trio.run(body)


def _exchange_seconds(lines: list[Line], factor: float) -> float:
    """One step after a first one (whose measured rates it starts from), as bench/flow.py runs it."""
    spec = ExchangeSpec(lines=tuple(lines), payload_bytes=1_450_000, wants=full_mesh(len(lines)),
                        neighbours=full_mesh(len(lines)), latency=0.0005, first_copy_factor=factor)
    warm = simulate_exchange(spec)
    return simulate_exchange(spec, rates=warm.rates).seconds


def test_in_the_flow_model_first_copies_to_fast_fetchers_shorten_the_mixed_exchange_only() -> None:
    """The testbed's lines at 8 peers (the acceptance swarm): mixed lines faster by a tenth or more, equal
    home lines as they were (nobody is twice as fast as an origin there)."""
    mixed = [Line.mbit(link.down_mbit, link.up_mbit) for link in profile_links("mixed", 8)]
    home = [Line.mbit(link.down_mbit, link.up_mbit) for link in profile_links("home", 8)]
    assert _exchange_seconds(mixed, 2.0) < 0.9 * _exchange_seconds(mixed, 0.0)
    assert _exchange_seconds(home, 2.0) == _exchange_seconds(home, 0.0)


def test_in_the_flow_model_an_origin_that_knows_its_own_upload_rate_keeps_first_copies_for_the_fast() -> None:
    """A 2 Mbit/s origin, a fetcher that served it at 16 Mbit/s and a 2 Mbit/s one. Starting from the
    prior (1 MB/s, so "twice as fast" is 2 MB/s) nobody is fast and the slow fetcher gets first copies it
    then relays over its own slow uplink; starting from the time its uploads took before, as the daemon's
    pieces server keeps it across steps, the origin gives every first copy to the fast one."""
    from distro_node.protocol.pieces import PIECE_BYTES

    lines = (Line(up=250e3, down=2.5e6), Line(up=2e6, down=2e6), Line(up=250e3, down=2.5e6))
    wants = (frozenset(), frozenset({0}), frozenset({0}))
    spec = ExchangeSpec(lines=lines, payload_bytes=1_450_000, wants=wants, neighbours=full_mesh(3),
                        latency=0.001)

    def run(piece_seconds: list[float] | None) -> list[float]:
        rates = [PeerRates() for _ in lines]
        rates[0].observe("1", 2e6)
        rates[0].observe("2", 250e3)
        return simulate_exchange(spec, rates=rates, piece_seconds=piece_seconds).uploaded

    assert run(None)[2] > 0
    known = run([spec.upload_slots * PIECE_BYTES / line.up for line in lines])
    assert known[0] == pytest.approx(1_450_000) and known[2] == 0
    with pytest.raises(FlowModelError):
        simulate_exchange(spec, piece_seconds=[1.0])

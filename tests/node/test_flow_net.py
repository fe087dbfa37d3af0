"""The fluid link model: max-min shares, event times and byte counts against hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest
from distro_node.node.sim.flow_net import FlowModelError, FlowNetwork, Line, Transfer, max_min_rates


def _rates(pairs: list[tuple[int, int]], up: list[float], down: list[float]) -> list[float]:
    src = np.array([p[0] for p in pairs], dtype=np.int64)
    dst = np.array([p[1] for p in pairs], dtype=np.int64)
    return [round(float(r), 6) for r in max_min_rates(src, dst, np.array(up), np.array(down))]


def test_one_uplink_is_shared_equally() -> None:
    assert _rates([(0, 1), (0, 2), (0, 3)], [9, 100, 100, 100], [100] * 4) == [3, 3, 3]


def test_a_transfer_limited_elsewhere_leaves_its_share_to_the_others() -> None:
    # Peer 0 uploads 10 to peers 1 and 2; peer 2's downlink (2) also carries a transfer from peer 3, so
    # 0 -> 2 gets 1 and 0 -> 1 takes the other 9 of peer 0's uplink.
    assert _rates([(0, 1), (0, 2), (3, 2)], [10, 100, 100, 100], [100, 100, 2, 100]) == [9, 1, 1]


def test_downlink_bound() -> None:
    assert _rates([(1, 0), (2, 0)], [1, 50, 50], [10, 100, 100]) == [5, 5]


def test_acknowledgements_of_a_download_come_off_the_downloaders_uplink_first() -> None:
    """Peer 0 (10 up, 100 down) downloads from peer 1 at its full downlink and uploads to peer 2: at 0.02
    of each downloaded byte, its acknowledgements take 2 of its uplink, and the upload gets the other 8."""
    src, dst = np.array([1, 0]), np.array([0, 2])
    up, down = np.array([10.0, 1000, 1000]), np.array([100.0, 1000, 1000])
    assert [round(float(r), 6) for r in max_min_rates(src, dst, up, down)] == [100, 10]
    with_acks = max_min_rates(src, dst, up, down, np.array([0.02, 0.02, 0.02]))
    assert [round(float(r), 6) for r in with_acks] == [100, 8]
    # So lopsided a line that its acknowledgements would fill it: its upload keeps a twentieth.
    assert round(float(max_min_rates(src, dst, up, down, np.array([0.5, 0, 0]))[1]), 6) == 0.5


def test_a_network_of_lines_with_acknowledgements_times_an_upload_beside_a_download() -> None:
    net = FlowNetwork([Line(up=10, down=100, ack=0.02), Line(up=1000, down=1000), Line(up=1000, down=1000)])
    upload, download = Transfer(0, 2, 80), Transfer(1, 0, 2000)
    net.start(upload)
    net.start(download)
    assert net.next_finish() == pytest.approx(10.0)  # 8/s for 80 bytes, beside 100/s coming in
    assert net.advance(net.next_finish() or 0) == [upload]
    assert download.remaining == pytest.approx(1000)
    assert net.uploaded[0] == pytest.approx(80)  # acknowledgements are not payload


def test_network_times_and_bytes() -> None:
    net = FlowNetwork([Line(up=10, down=100), Line(up=10, down=100), Line(up=10, down=100)])
    a, b = Transfer(0, 1, 50), Transfer(0, 2, 100)
    net.start(a)
    net.start(b)
    t = net.next_finish()
    assert t == pytest.approx(10.0)  # both at 5/s: a ends after 50 bytes
    assert net.advance(t) == [a]
    t = net.next_finish()
    assert t == pytest.approx(15.0)  # b alone at 10/s for its last 50 bytes
    assert net.advance(t) == [b]
    assert net.next_finish() is None
    assert net.uploaded[0] == pytest.approx(150)
    assert net.downloaded[2] == pytest.approx(100)


def test_bytes_add_up_when_transfers_start_after_others_ended() -> None:
    net = FlowNetwork([Line(up=10, down=100)] * 3)
    first, second = Transfer(0, 1, 10), Transfer(0, 2, 40)
    net.start(first)
    net.start(second)
    assert net.advance(net.next_finish() or 0) == [first]  # 2 s at 5/s each
    third = Transfer(1, 2, 30)
    net.start(third)  # second has 30 left; it shares nothing with third but peer 2's ample downlink
    while net.next_finish() is not None:
        net.advance(net.next_finish() or 0)
    assert net.now == pytest.approx(5.0)  # second: 30 more at 10/s; third: 30 at 10/s
    assert net.downloaded.sum() == pytest.approx(80)
    assert second.remaining == pytest.approx(0) and third.remaining == pytest.approx(0)


@pytest.mark.parametrize("bad", [
    lambda: Line(up=0, down=1),
    lambda: Line.mbit(10, 10, efficiency=1.5),
    lambda: Line(up=1, down=1, ack=1.0),
    lambda: Line(up=1, down=1, ack=-0.1),
    lambda: FlowNetwork([]),
    lambda: FlowNetwork([Line(1, 1)]).start(Transfer(0, 1, 5)),
    lambda: FlowNetwork([Line(1, 1), Line(1, 1)]).start(Transfer(1, 1, 5)),
    lambda: Transfer(0, 1, -1),
])
def test_bad_input_is_a_typed_error(bad: object) -> None:
    with pytest.raises(FlowModelError):
        bad()  # type: ignore[operator]


def test_exchange_of_four_equal_peers_is_near_the_bound_and_downloads_each_byte_once() -> None:
    from distro_node.node.sim.flow_spec import ExchangeSpec, swarm_bound
    from distro_node.node.sim.flow_step import simulate_exchange
    from distro_node.node.sim.flow_topology import full_mesh

    lines = (Line.mbit(100, 10),) * 4
    spec = ExchangeSpec(lines=lines, payload_bytes=600_000, wants=full_mesh(4), neighbours=full_mesh(4))
    result = simulate_exchange(spec)
    bound = swarm_bound(lines, 600_000, full_mesh(4))
    assert bound <= result.seconds <= 1.3 * bound
    assert result.amplification == pytest.approx(1.0, abs=1e-6)
    assert all(t <= result.seconds for t in result.done_at)


def test_the_author_is_a_holder_even_when_not_a_neighbour() -> None:
    from distro_node.node.sim.flow_spec import ExchangeSpec
    from distro_node.node.sim.flow_step import simulate_exchange

    # Peer 1 wants peer 0's payload and they are not neighbours: the announcement names its author, whom
    # the fetcher dials, so the payload still arrives.
    lines = (Line.mbit(100, 10),) * 3
    nbrs = (frozenset({2}), frozenset({2}), frozenset({0, 1}))
    wants = (frozenset(), frozenset({0}), frozenset())
    spec = ExchangeSpec(lines=lines, payload_bytes=200_000, wants=wants, neighbours=nbrs, time_limit=30)
    result = simulate_exchange(spec)
    assert result.done_at[1] < 30


def test_a_slow_origin_sends_its_own_first_copies_before_relaying() -> None:
    """Mixed lines (one gigabit, home, 2 Mbit/s peers), three authors chosen: a 2 Mbit/s author also holds
    pieces of the others' payloads, and relaying them had kept its own first copies waiting (7.98 s, 1.38x
    the bound, without ``relay_waits``; 6.52 s, 1.12x, with it). The model is deterministic."""
    from distro_node.node.sim.flow_spec import ExchangeSpec, swarm_bound
    from distro_node.node.sim.flow_step import simulate_exchange
    from distro_node.node.sim.flow_topology import full_mesh

    gigabit, home, slow = Line.mbit(1000, 1000), Line.mbit(100, 10), Line.mbit(20, 2)
    lines = (gigabit, slow, home, home, home, slow, home, home)
    chosen = frozenset({0, 1, 2})
    wants = tuple(chosen - {i} for i in range(len(lines)))
    spec = ExchangeSpec(lines=lines, payload_bytes=1_450_000, wants=wants, neighbours=full_mesh(len(lines)),
                        latency=0.025)
    result = simulate_exchange(spec)
    bound = swarm_bound(lines, 1_450_000, wants)
    assert result.amplification == pytest.approx(1.0)
    assert result.seconds <= 1.25 * bound


def test_the_model_tells_no_fetcher_of_relays_a_holder_would_refuse() -> None:
    """As the daemon's HAVE answer (pieces_serve.py ``_offered``): a holder whose own first copies are left
    offers none of another payload's pieces, so fetchers do not ask it and are not refused. Mixed lines, 8
    peers, a first step: told of them, 1748 requests were refused and the exchange took 9.02 s; with the
    rule 1323 and 8.15 s."""
    from distro_node.node.sim import flow_step
    from distro_node.node.sim.flow_spec import ExchangeSpec
    from distro_node.node.sim.flow_topology import full_mesh

    gigabit, home, slow = Line.mbit(1000, 1000), Line.mbit(100, 10), Line.mbit(20, 2)
    lines = (gigabit, slow, home, home, home, slow, home, home)
    wants = tuple(frozenset(range(len(lines))) - {i} for i in range(len(lines)))
    spec = ExchangeSpec(lines=lines, payload_bytes=1_450_000, wants=wants, neighbours=full_mesh(len(lines)),
                        latency=0.025)
    told = flow_step.simulate_exchange(spec)

    class TellsAll(flow_step._Exchange):
        def _offered(self, holder: int, author: int) -> frozenset[int]:
            return frozenset(self.have[holder].get(author, ()))

    everything = TellsAll(spec, None, None).run()
    assert told.amplification == pytest.approx(1.0)
    assert told.refused < everything.refused
    assert told.seconds <= everything.seconds * 1.02

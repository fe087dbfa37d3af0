"""Crash, graceful leave and the join command with real peer processes on loopback (mid-run join:
test_peer_join.py)."""

from __future__ import annotations

import signal

import pytest
from distro_node.node.peer.leaving import GOODBYE_DRAIN
from distro_node.node.peer.options import PeerOptions
from peer_procs import PeerProc, Procs, assert_identical, leader

pytestmark = [pytest.mark.network, pytest.mark.timeout(120)]

TIMEOUT = 5.0
RUN = ["--preset", "tiny", "--batch-size", "4", "--seq-len", "32", "--round-timeout", str(TIMEOUT),
       "--leader-timeout", "1", "--liveness-timeout", "3"]


def _ids(peers: list[PeerProc]) -> dict[str, PeerProc]:
    return {p.info()["peer_id"]: p for p in peers}


def _rounds_after_kill(
    peers: list[PeerProc], victim: PeerProc, kill_after: int
) -> dict[str, dict[int, float]]:
    """SIGKILL ``victim`` once it applied ``kill_after``; the survivors must stay identical and list 3 of 3
    after 6 more steps. Returns each survivor's round times of those steps."""
    victim.wait_step(kill_after, 60)
    victim.signal(signal.SIGKILL)  # it is now computing or announcing step kill_after + 1
    survivors = [p for p in peers if p is not victim]
    last = kill_after + 6
    for p in survivors:
        p.wait_step(last, 60)
    assert_identical(survivors, range(last + 1))
    out: dict[str, dict[int, float]] = {}
    for p in survivors:
        rows = p.steps()
        assert rows[last]["included"] == 3 and rows[last]["roster"] == 3, rows[last]
        out[p.name] = {s: rows[s]["round_s"] for s in range(kill_after + 1, last + 1)}
    return out


def test_kill_9_mid_round_others_close_it_by_the_deadline(procs: Procs) -> None:
    peers = procs.swarm(4, RUN, ["--steps", "60"])
    by_id = _ids(peers)
    run_id = peers[0].info()["run_id"]
    ids = sorted(by_id)
    # A victim that does not lead the rounds it can still be waited for (until dropped after 3 misses):
    # a dead epoch-0 leader costs one more leader timeout, which is the fallback path, tested elsewhere.
    choice = next(
        (k, v) for k in range(6, 30) for v in ids
        if v not in {leader(run_id, s, ids) for s in range(k, k + 5)}
    )
    kill_after, victim_id = choice
    for name, times in _rounds_after_kill(peers, by_id[victim_id], kill_after).items():
        slow = {s: t for s, t in times.items() if t > TIMEOUT + 1}
        assert not slow, f"{name}: rounds after the crash exceeded the deadline + 1 s: {slow}"


def test_kill_9_of_the_next_leader_is_noticed_at_once(procs: Procs) -> None:
    """With 20 s deadlines and 30 s of silence before a peer counts as dead, only the closed connections
    can tell the survivors of the crash in time: rounds stay far below both."""
    slow_timeouts = ["--preset", "tiny", "--batch-size", "4", "--seq-len", "32", "--round-timeout", "20",
                     "--leader-timeout", "1", "--liveness-timeout", "30"]
    peers = procs.swarm(4, slow_timeouts, ["--steps", "60"])
    by_id = _ids(peers)
    run_id = peers[0].info()["run_id"]
    ids = sorted(by_id)
    kill_after = next(k for k in range(6, 30) if leader(run_id, k + 1, ids) == leader(run_id, k + 2, ids))
    victim = by_id[leader(run_id, kill_after + 1, ids)]
    for name, times in _rounds_after_kill(peers, victim, kill_after).items():
        assert max(times.values()) < 4.0, f"{name} waited for the crashed peer: {times}"


def test_graceful_leave_next_round_does_not_wait(procs: Procs) -> None:
    peers = procs.swarm(4, RUN, ["--steps", "60"])
    leaver = peers[2]
    leaver.wait_step(8, 60)
    leaver.signal(signal.SIGTERM)
    # The leaver's own bounds: its round closes within leave_budget, its goodbye drains within GOODBYE_DRAIN,
    # and it serves the others for at most linger_max more. Checked on its own clock (the events' ``t``):
    # the exit as the test sees it also has the process's start of shutdown and teardown in it, which a
    # busy machine stretches (10 s was too few beside two other processes).
    opts = PeerOptions()
    assert leaver.wait_exit(opts.leave_budget + GOODBYE_DRAIN + opts.linger_max) == 0
    stopping = leaver.wait_for(lambda e: e.get("event") == "stopping", 1, "stopping")
    event = leaver.wait_for(lambda e: e.get("event") == "left", 1, "left")
    assert event["sent"] is True, event
    assert event["t"] - stopping["t"] <= opts.leave_budget + GOODBYE_DRAIN + 2.0, (stopping, event)
    left = event["step"]
    survivors = [p for p in peers if p is not leaver]
    for p in survivors:
        p.wait_step(left + 4, 60)
    assert_identical(peers, range(left + 4))
    for p in survivors:
        rows = p.steps()
        times = {s: rows[s]["round_s"] for s in range(left, left + 4)}
        assert max(times.values()) < TIMEOUT / 2, f"{p.name} waited for the leaver: {times}"
        assert rows[left + 3]["roster"] == 3

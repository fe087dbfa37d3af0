"""Three real peers in the overlapped order (``join --overlap``): step s + 1 is computed while step s's round
runs, and step s is applied one step late. The order changes when gradients are taken, never which updates
every replica applies, so the weights must stay bit-identical, and training must still make progress."""

from __future__ import annotations

import pytest
from peer_procs import Procs, assert_identical

pytestmark = [pytest.mark.network, pytest.mark.timeout(60)]

RUN = ["--preset", "tiny", "--batch-size", "4", "--seq-len", "32", "--round-timeout", "5", "--overlap"]
STEPS = 16


def test_three_overlapped_peers_stay_identical_and_learn(procs: Procs) -> None:
    peers = procs.swarm(3, RUN, ["--steps", str(STEPS)])
    for p in peers:
        p.wait_for(lambda e: e.get("event") == "left", 45, "leave after the last step")
    for p in peers:
        assert p.wait_exit(10) == 0
    for p in peers:
        rows = p.steps()
        assert sorted(rows) == list(range(STEPS)), f"{p.name} applied {sorted(rows)}"
        assert all(rows[s]["overlapped"] for s in rows), f"{p.name} did not run the overlapped order"
    assert_identical(peers, range(STEPS))
    # Every step's hash is present on every peer (assert_identical only compares the peers that have it).
    for s in range(STEPS):
        assert len({p.steps()[s]["weights_hash"] for p in peers}) == 1
    losses = [[p.steps()[s]["loss"] for p in peers if p.steps()[s]["loss"] is not None] for s in range(STEPS)]
    first = [x for row in losses[:4] for x in row]
    last = [x for row in losses[-4:] for x in row]
    assert sum(last) / len(last) < sum(first) / len(first) - 0.05, f"loss did not go down: {first} -> {last}"


def test_newcomer_joins_an_overlapped_run_mid_way_and_matches(procs: Procs) -> None:
    """A mid-run joiner syncs the weights of a step boundary (never a prepared-ahead step: weights only
    change in apply), computes its first step itself, and then follows the overlapped order like everyone."""
    long = ["--steps", "100000"]  # never reached: the test ends by killing the processes
    run = [*RUN, "--leader-timeout", "1", "--liveness-timeout", "3"]
    peers = procs.swarm(2, run, long)
    peers[0].wait_step(5, 30)
    newcomer = procs.start_command(peers[0].info()["join_command"], long, "newcomer")
    joined = newcomer.wait_for(lambda e: e.get("event") == "joined", 30, "joined")
    assert not joined["genesis"] and joined["step"] >= 5, joined
    first = newcomer.wait_step(0, 20)["step"]
    included = newcomer.wait_for(lambda e: e.get("event") == "step" and e["self_included"], 20,
                                 "first round that includes the newcomer")
    end = included["step"] + 2
    for p in [*peers, newcomer]:
        p.wait_step(end, 20)
    assert newcomer.steps()[end]["overlapped"]
    assert_identical([*peers, newcomer], range(first, end + 1))

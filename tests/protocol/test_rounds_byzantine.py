"""Safety and progress with Byzantine replicas in the simulator (tests/protocol/protocol_byzantine_sim.py).

Safety: no two honest replicas ever apply different lists for a step, whatever up to f of n >= 3f + 1
replicas send. Progress: the honest replicas still train to the end. A soak run raises the seed count
(``DISTRO_BYZANTINE_SIM_SEEDS``, see docs/benchmarks.md for the 10,000-schedule figure).
"""

from __future__ import annotations

import os
import random

import pytest
from protocol_byzantine_sim import BYZANTINE_KINDS, ByzantineSwarm

SEEDS = int(os.environ.get("DISTRO_BYZANTINE_SIM_SEEDS", "12"))


def schedule(seed: int, n: int, f: int, steps: int) -> ByzantineSwarm:
    """A seeded schedule: which peers lie, how (a random non-empty set of kinds each), delays and drops."""
    rng = random.Random(seed)
    peers = [f"p{i}" for i in range(n)]
    liars = rng.sample(peers, f)
    byzantine = {p: tuple(k for k in BYZANTINE_KINDS if rng.random() < 0.5) or ("vote_twice",) for p in liars}
    return ByzantineSwarm(peers, byzantine=byzantine, seed=seed, steps=steps,
                          delay=(0.005, rng.choice((0.03, 0.1, 0.3))), list_drop=rng.choice((0.0, 0.1)))


@pytest.mark.parametrize("seed", range(SEEDS))
@pytest.mark.parametrize(("n", "f"), [(4, 1), (7, 2)])
def test_byzantine_replicas_never_split_the_honest_ones_nor_stop_them(seed: int, n: int, f: int) -> None:
    s = schedule(seed, n, f, steps=5)
    s.run_until_applied(4, limit=120.0, peers=[r.peer_id for r in s.honest()])
    assert s.honest_disagreements() == []
    # Finished: every honest replica is past the last step (one may have resynced past a step, not applying
    # it itself), all on the same weights.
    assert all(r.machine.next_apply_step >= 5 for r in s.honest()), {r.peer_id: sorted(r.applied)
                                                                     for r in s.honest()}
    assert len({r.weights for r in s.honest()}) == 1


def test_every_kind_of_lie_at_once_from_one_of_four() -> None:
    s = ByzantineSwarm(["a", "b", "c", "d"], byzantine={"b": BYZANTINE_KINDS}, seed=3, steps=6)
    s.run_until_applied(5, limit=120.0, peers=["a", "c", "d"])
    assert s.honest_disagreements() == []
    assert all(5 in r.applied for r in s.honest())
    assert any(r.machine.counters["vote_equivocation"] for r in s.honest())  # the lies did arrive

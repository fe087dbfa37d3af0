"""A Byzantine voter in a real 4-process swarm: with every prevote and precommit it also signs and sends a
vote for another list, and with every status one for an epoch 500 later (node/testbed/adversary.py
``double-vote,jump-epochs``; every message correctly signed by its own key). One liar of four is within
what agreement tolerates (n >= 3f + 1): the honest peers count only its first vote per epoch, call the
second equivocation, never follow one peer into a far epoch, and train on bit-identical.
"""

from __future__ import annotations

import pytest
from peer_procs import Procs, assert_identical

pytestmark = [pytest.mark.network, pytest.mark.timeout(300)]

RUN = ["--preset", "tiny", "--batch-size", "4", "--seq-len", "32", "--round-timeout", "5"]
STEPS = 10


def test_a_double_voting_epoch_jumper_changes_nothing(procs: Procs) -> None:
    local = ["--steps", str(STEPS)]
    founder = procs.start([*RUN, *local, "--genesis-peers", "4"], "peer0")
    command = founder.info()["join_command"]
    honest = [founder, *(procs.start_command(command, local, f"peer{i}") for i in (1, 2))]
    procs.start_adversary("double-vote,jump-epochs", command, local, "attacker")
    for p in honest:
        p.wait_for(lambda e: e.get("event") == "left", 200, "leave after the last step")
    assert_identical(honest, range(STEPS))
    for p in honest:
        assert sorted(p.steps()) == list(range(STEPS)), p.name
        epochs = [row["epoch"] for row in p.steps().values()]
        assert max(epochs) < 500, (p.name, epochs)  # nobody followed the liar's jumps
        faults = [e.get("detail", "") for e in p.events if e.get("event") == "fault"]
        assert any("vote_equivocation" in f for f in faults), (p.name, faults[-3:])
        assert not [e for e in p.events if e.get("event") == "banned"], p.name

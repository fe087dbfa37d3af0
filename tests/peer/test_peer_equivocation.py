"""An equivocating peer in a real 4-process swarm: it signs two different payloads for each step; the proof
reaches a decided list and every honest peer bans it after the same step, while the honest replicas stay
bit-identical. The attacker is the real daemon with a second announcement patched in
(node/testbed/adversary.py ``equivocate``): both of its announcements carry valid signatures of its own, as
a real equivocator's would.
"""

from __future__ import annotations

import pytest
from peer_procs import Procs, assert_finished_without, ban_step

pytestmark = [pytest.mark.network, pytest.mark.timeout(300)]

RUN = ["--preset", "tiny", "--batch-size", "4", "--seq-len", "32", "--round-timeout", "5"]
STEPS = 10


def test_equivocator_is_banned_by_every_honest_peer_at_the_same_step(procs: Procs) -> None:
    local = ["--steps", str(STEPS)]
    founder = procs.start([*RUN, *local, "--genesis-peers", "4"], "peer0")
    command = founder.info()["join_command"]
    honest = [founder, *(procs.start_command(command, local, f"peer{i}") for i in (1, 2))]
    attacker = procs.start_adversary("equivocate", command, local, "attacker")
    attacker_id = attacker.info()["peer_id"]
    banned_at = ban_step(honest, attacker_id, "equivocation")
    assert banned_at < STEPS - 2, banned_at
    assert_finished_without(honest, attacker_id, STEPS, banned_at)

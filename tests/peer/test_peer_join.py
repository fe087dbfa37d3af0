"""Mid-run join with real peer processes on loopback: a fifth peer joins a running 4-peer swarm, one of
whose peers is a lying state donor.

The liar (node/testbed/adversary_donor.py, ``lying-donor``) trains honestly but describes every snapshot as
zeroed weights under a roster of itself and four Sybil identities it runs, which answer state requests
alike: counted by the lie's own roster the lie has a majority, and the Sybils outnumber the honest donors.
The newcomer counts descriptions against the roster its bootstrap peer describes, where the lie has one
attester of the two needed, and so ends on the honest weights (threats: "a newcomer is handed the
attacker's weights").

The swarm runs with a step budget far beyond what the test waits for, because a newcomer needs several
seconds to start (torch import, model build, manifest fetch, state sync) while tiny-preset rounds take
~0.2 s: with a budget of 40 steps the swarm used to finish before the newcomer's warm-up ended, which is
what this test failed on. The fixture kills every process by pid when the test is done.
"""

from __future__ import annotations

import pytest
from peer_procs import Procs, assert_identical

pytestmark = [pytest.mark.network, pytest.mark.timeout(300)]

RUN = ["--preset", "tiny", "--batch-size", "4", "--seq-len", "32", "--round-timeout", "5",
       "--leader-timeout", "1", "--liveness-timeout", "3"]
LONG = ["--steps", "100000"]  # never reached: the test ends by killing the processes
WARMUP_ROUNDS = 3  # the manifest default (--warmup-rounds)


def test_fifth_peer_joins_at_round_10_past_a_lying_donor_and_matches_after_warmup(procs: Procs) -> None:
    founder = procs.start([*RUN, *LONG, "--genesis-peers", "4"], "peer0")
    command = founder.info()["join_command"]
    peers = [founder, *(procs.start_command(command, LONG, f"peer{i}") for i in (1, 2))]
    peers.append(procs.start_adversary("lying-donor", command, LONG, "liar"))
    peers[0].wait_step(10, 120)
    newcomer = procs.start_command(command, LONG, "newcomer")
    joined = newcomer.wait_for(lambda e: e.get("event") == "joined", 120, "joined")
    assert not joined["genesis"]
    assert joined["step"] >= 10, joined
    assert "the bootstrap peer's roster" in joined["how"], joined
    first = newcomer.wait_step(0, 60)["step"]
    included = newcomer.wait_for(lambda e: e.get("event") == "step" and e["self_included"], 120,
                                 "first round that includes the newcomer")
    end = included["step"] + 2
    for p in peers:
        p.wait_step(end, 60)
    newcomer.wait_step(end, 60)
    everyone = [*peers, newcomer]
    assert_identical(everyone, range(first, end + 1))
    rows = newcomer.steps()
    assert sorted(rows) == list(range(first, max(rows) + 1)), "the newcomer skipped a step"
    assert included["step"] - first >= WARMUP_ROUNDS - 1, "included before its warm-up"
    for p in everyone:
        assert p.steps()[end]["included"] == 5, (p.name, p.steps()[end])

"""A leader cannot choose the aggregate: an adversary daemon (node/testbed/adversary.py ``forge-list``) puts
hashes of its choosing in every other peer's entry of the lists it leads, signing them itself. Honest peers
refuse those lists at the gossip door (``distro_gossip_rejected_total{reason="signature"}``), so its epochs
pass undecided and the next leader's list is decided; nobody honest is blamed or banned, and the honest
replicas stay bit-identical (threats: "A leader chooses the whole aggregate").
"""

from __future__ import annotations

import pytest
from peer_procs import Procs, assert_identical, gossip_rejected, leader

pytestmark = [pytest.mark.network, pytest.mark.timeout(300)]

RUN = ["--preset", "tiny", "--batch-size", "4", "--seq-len", "32", "--round-timeout", "3"]
LONG = ["--steps", "100000"]  # never reached: the test ends once the attacker led two steps


def test_forged_entries_are_refused_and_the_forger_never_decides_a_step(procs: Procs) -> None:
    local = LONG
    founder = procs.start([*RUN, *local, "--genesis-peers", "4"], "peer0")
    info = founder.info()
    command = info["join_command"]
    honest = [founder, *(procs.start_command(command, local, f"peer{i}") for i in (1, 2))]
    attacker = procs.start_adversary("forge-list", command, local, "attacker")
    attacker_id = str(attacker.info()["peer_id"])
    peers = [str(p.info()["peer_id"]) for p in [*honest, attacker]]
    # The steps whose epoch-0 leader is the attacker (the roster stays these four: its payloads are fine).
    led = [s for s in range(1, 200) if leader(str(info["run_id"]), s, peers) == attacker_id][:2]
    last = led[-1] + 1
    for p in honest:
        p.wait_step(last, 240)
    rejected = [gossip_rejected(str(p.info()["metrics_url"])).get("signature", 0.0) for p in honest]
    assert sum(rejected) >= 1, rejected
    assert_identical(honest, range(last + 1))
    for p in honest:
        rows = p.steps()
        for s in led:  # its epoch-0 list was refused everywhere: a later epoch's leader decided the step
            assert rows[s]["epoch"] >= 1, (p.name, s, rows[s])
        assert all(rows[s]["included"] >= 3 for s in range(last + 1)), p.name
        assert not [e for e in p.events if e.get("event") == "banned"], p.name

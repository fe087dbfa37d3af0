"""threats.md C4: a swarm stopped with SIGTERM checkpoints on the way out and resumes the same run.

Two peers (lean: 2 shared cores) train, all stop, all restart. The founder resumes from its checkpoint (same
run id, the saved step) and the joiner syncs from it, as any joiner does. The held-out loss (a fixed batch
no peer trains on) logged at the exit checkpoint and again right after the resume must agree within 0.5%
(the weights are restored exactly, so in practice they are equal), and training goes on past the stop with
both peers on identical weights.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from peer_procs import PeerProc, Procs, assert_identical

pytestmark = [pytest.mark.network, pytest.mark.slow, pytest.mark.timeout(300)]

RUN = ["--preset", "tiny", "--batch-size", "4", "--seq-len", "32", "--round-timeout", "10",
       "--checkpoint-every", "5"]


def is_event(kind: str):  # type: ignore[no-untyped-def]
    return lambda e: e.get("event") == kind


def test_sigterm_checkpoints_and_the_swarm_resumes_at_the_same_loss(procs: Procs, tmp_path: Path) -> None:
    dirs = [tmp_path / "peer0", tmp_path / "peer1"]
    founder = procs.start([*RUN, "--genesis-peers", "2", "--data-dir", str(dirs[0])], "peer0")
    info = founder.info()
    command = info["join_command"]
    port = info["addrs"][0].split("/tcp/")[1].split("/")[0]
    joiner = procs.start_command(command, ["--data-dir", str(dirs[1])], "peer1")
    for p in (founder, joiner):
        p.wait_step(8, 150)
    for p in (founder, joiner):
        p.signal(signal.SIGTERM)
    for p in (founder, joiner):
        assert p.wait_exit(10) == 0, f"{p.name} did not exit cleanly within 10 s: {p.tail_stderr()}"
    saved = [e for e in founder.events if e.get("event") == "checkpoint"]
    # The newest checkpoint holds the stop step: written at exit, or by the periodic one when SIGTERM landed
    # right after it (the node does not write the same step twice).
    assert saved and saved[-1]["why"] in ("exit", "periodic"), saved
    last = saved[-1]
    assert last["step"] == max(founder.steps()) + 1

    again = procs.start([*RUN, "--genesis-peers", "2", "--data-dir", str(dirs[0]),
                         "--listen", f"/ip4/127.0.0.1/tcp/{port}"], "peer0b")
    assert again.info()["run_id"] == info["run_id"]
    resumed = again.wait_for(is_event("joined"), 60, "resume")
    assert resumed.get("resumed") is True and resumed["step"] == last["step"], resumed
    before, after = last["heldout_loss"], resumed["heldout_loss"]
    assert abs(after - before) <= 0.005 * before, (before, after)
    assert resumed["weights_hash"] == last["weights_hash"]

    rejoin = procs.start_command(command, ["--data-dir", str(dirs[1])], "peer1b")
    joined = rejoin.wait_for(is_event("joined"), 120, "rejoin")
    assert joined["step"] >= last["step"]
    target = joined["step"] + 6
    peers: list[PeerProc] = [again, rejoin]
    for p in peers:
        p.wait_step(target, 150)
    first_train = again.steps()[last["step"]]["loss"]
    assert first_train is not None and abs(first_train - before) < 0.1 * before
    assert_identical(peers, range(joined["step"], target))
    assert min(again.steps()) == last["step"]  # resumed, not restarted from step 0
    for p in peers:
        p.signal(signal.SIGTERM)
    for p in peers:
        assert p.wait_exit(10) == 0

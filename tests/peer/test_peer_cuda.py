"""Real daemons on a CUDA device beside one on the CPU: the run stays bit-identical across devices and
precisions (the replicated update runs on each peer's CPU master copy). Skipped without CUDA; run on a GPU
machine with ``pytest -m gpu``."""

from __future__ import annotations

import pytest
import torch
from peer_procs import Procs, assert_identical

pytestmark = [pytest.mark.gpu, pytest.mark.network, pytest.mark.timeout(180),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

RUN = ["--preset", "tiny", "--batch-size", "4", "--seq-len", "32", "--round-timeout", "5"]


def test_gpu_and_cpu_daemons_train_one_run_identically(procs: Procs) -> None:
    steps = 8
    local = ["--steps", str(steps)]
    founder = procs.start([*RUN, *local, "--device", "cuda", "--genesis-peers", "3"], "gpu-bf16")
    command = str(founder.info()["join_command"])
    peers = [founder,
             procs.start_command(command, [*local, "--device", "cuda", "--precision", "fp32",
                                           "--grad-accum", "2"], "gpu-fp32"),
             procs.start_command(command, [*local, "--device", "cpu"], "cpu")]
    assert [(p.info()["device"], p.info()["precision"]) for p in peers] == [
        ("cuda", "bf16"), ("cuda", "fp32"), ("cpu", "fp32")]
    for p in peers:
        p.wait_for(lambda e: e.get("event") == "left", 120, "leave after the last step")
    assert_identical(peers, range(steps))
    for p in peers:
        rows = p.steps()
        assert sorted(rows) == list(range(steps)), f"{p.name} applied {sorted(rows)}"
        assert sum(rows[s]["included"] == 3 for s in range(steps)) >= steps - 1, p.name

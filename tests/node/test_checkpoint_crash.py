"""threats.md C1: SIGKILL a checkpoint writer at many random moments; after every kill the newest loadable
checkpoint is the old or the new one, checksums valid, and no checkpoint-named directory is ever partial."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from checkpoint_writer import expected_state
from distro_node.node.checkpoint.store import CheckpointStore, load_checkpoint, load_latest

WRITER = Path(__file__).with_name("checkpoint_writer.py")
KILLS = 25
TIME_BUDGET = 45.0


class ForkServer:
    """The writer fork server (see checkpoint_writer.py), driven line by line."""

    def __init__(self, directory: Path, log: Path) -> None:
        self.log_path = log
        self._log = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, str(WRITER), str(directory)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True,
        )

    def _ask(self, line: str) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer:
            pytest.fail(f"writer server died: {self.log_path.read_text()[-2000:]}")
        return int(answer)

    def start(self) -> int:
        return self._ask("start")

    def reap(self, pid: int) -> int:
        return self._ask(f"reap {pid}")

    def close(self) -> None:
        """EOF ends the server; if it does not exit, kill it by pid. Either way it is reaped here."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (subprocess.TimeoutExpired, OSError):
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        finally:
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self._log.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sigkill_at_random_points_never_leaves_a_partial_checkpoint(tmp_path: Path) -> None:
    directory = tmp_path / "ckpt"
    rng = random.Random(20240611)
    server = ForkServer(directory, tmp_path / "server.log")
    child: int | None = None
    last_step = -1
    kills = mid_write = 0
    started = time.monotonic()
    try:
        while kills < KILLS and time.monotonic() - started < TIME_BUDGET:
            child = server.start()
            time.sleep(rng.uniform(0.01, 0.4))
            os.kill(child, signal.SIGKILL)
            status = server.reap(child)
            child = None
            kills += 1
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
                f"writer exited by itself (status {status}): {(tmp_path / 'server.log').read_text()[-2000:]}"
            )

            if any(p.name.startswith(".tmp-") for p in directory.iterdir()) if directory.exists() else False:
                mid_write += 1
            skipped: list = []
            ckpt = load_latest(directory, report=lambda path, error, out=skipped: out.append((path, error)))
            assert not skipped, f"kill {kills}: a checkpoint-named directory is partial: {skipped}"
            if ckpt is None:
                assert last_step == -1, f"kill {kills}: checkpoint of step {last_step} was lost"
                continue
            assert ckpt.step >= last_step, f"kill {kills}: went back from step {last_step} to {ckpt.step}"
            model, strategy = expected_state(ckpt.step)
            assert all(ckpt.model_state[k].equal(v) for k, v in model.items())
            assert ckpt.strategy_state["step"] == ckpt.step
            assert ckpt.strategy_state["delta"]["layers.0.w"].equal(strategy["delta"]["layers.0.w"])
            for path in CheckpointStore(directory).entries():
                load_checkpoint(path)  # raises if any named checkpoint is partial or corrupt
            last_step = ckpt.step
    finally:
        if child is not None:
            os.kill(child, signal.SIGKILL)
            server.reap(child)
        server.close()

    assert kills >= 20, f"only {kills} kills within {TIME_BUDGET} s"
    assert last_step >= kills // 2, f"writers made too little progress (step {last_step})"
    assert mid_write >= 1, "no kill landed inside a save; the test did not exercise the crash window"
    # Leftovers of the last killed save are removed by the next writer (here: an explicit clean-up).
    CheckpointStore(directory).clean_temp()
    assert sorted(p.name for p in directory.iterdir() if p.name.startswith(".")) == [".lock"]
    ckpt = load_latest(directory)
    assert ckpt is not None and ckpt.step == last_step

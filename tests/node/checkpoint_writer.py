"""Fork server for the checkpoint crash test (threats.md C1): ``python checkpoint_writer.py <dir>``.

Why a fork server: importing torch takes seconds on a loaded machine, and the test needs a fresh writer
process for every one of its many kills. This process imports everything once, then for each ``start`` line
on stdin forks a writer and prints its pid; the test SIGKILLs that pid at a random moment and sends
``reap <pid>``, answered with the raw wait status once the child is reaped here (the parent of the child).
EOF on stdin ends the server.

Each writer resumes like a restarted node (from ``load_latest``) and saves checkpoints forever, with content
derived from the step so the test can check that what it loads is exactly what was saved for that step.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

import torch
from distro_node.node.checkpoint.store import CheckpointStore, load_latest

KEEP_LAST = 2
RUN = b"\x07" * 16


def expected_state(step: int) -> tuple[dict[str, torch.Tensor], dict]:
    """(model state, strategy state) for ``step``: ~2 MiB, so a save spans several write calls."""
    gen = torch.Generator().manual_seed(step)
    model = {"w": torch.full((512, 512), float(step)), "b": torch.randn(1000, generator=gen)}
    strategy = {
        "version": 1,
        "step": step,
        "delta": {"layers.0.w": torch.randn(256, 512, generator=gen), "head": torch.full((7,), float(-step))},
        "pending": [None, 0.5, (1, 2)],
    }
    return model, strategy


def _write_forever(directory: Path) -> None:
    store = CheckpointStore(directory, keep_last=KEEP_LAST)
    latest = load_latest(directory, report=lambda path, error: None)
    step = latest.step + 1 if latest is not None else 0
    while True:
        model, strategy = expected_state(step)
        store.save(
            step=step, run_id=RUN, config_digest="crash-test", model_state=model,
            strategy_name="distro", strategy_state=strategy,
        )
        step += 1


def main() -> None:
    directory = Path(sys.argv[1])
    torch.set_num_threads(1)
    for line in sys.stdin:
        command = line.split()
        if command == ["start"]:
            pid = os.fork()
            if pid == 0:
                try:
                    _write_forever(directory)
                except BaseException:
                    traceback.print_exc()
                    sys.stderr.flush()
                os._exit(1)
            print(pid, flush=True)
        elif len(command) == 2 and command[0] == "reap":
            _, status = os.waitpid(int(command[1]), 0)
            print(status, flush=True)
        else:
            print(f"bad command {line!r}", file=sys.stderr, flush=True)
            sys.exit(2)


if __name__ == "__main__":
    main()

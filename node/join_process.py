"""One `distro-node join` child process, read through its ``--log-format json`` stdout lines.

Shared by the multi-process tests (tests/peer/peer_procs.py) and the namespace testbed (node/testbed/swarm.py,
used by tests/testbed/ and the internet and churn benches), so every harness waits for the same *events*
(node/peer/output.py) with a bounded timeout instead of sleeping. A reader thread parses each stdout line
into an event dict and queues it (and copies the line to ``log_dir/<name>.jsonl``, to follow a long run);
:meth:`PeerProc.reap` kills by pid whatever the caller did.
"""

from __future__ import annotations

import json
import os
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

Event = dict[str, Any]

CHILD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
CLI = [sys.executable, "-m", "distro_node.node.cli.main"]


class JoinCommandError(ValueError):
    """The ``join_command`` a founder printed is not a ``distro-node join ...`` command."""


def join_args(command: str) -> list[str]:
    """The arguments after ``distro-node join`` of a founder's printed join command, to run it as a child
    (``[*CLI, "join", *join_args(command)]``)."""
    argv = shlex.split(command)
    if argv[:2] != ["distro-node", "join"]:
        raise JoinCommandError(f"unexpected join command {command!r}")
    return argv[2:]


class PeerWaitError(AssertionError):
    """A peer did not print the awaited event in time, or exited first (an AssertionError, so a test that
    waits fails as an assertion; benches catch it)."""


class PeerProc:
    def __init__(self, argv: Sequence[str], name: str, log_dir: Path) -> None:
        self.name = name
        self.argv = list(argv)
        self.stderr_path = log_dir / f"{name}.stderr"
        self.events_path = log_dir / f"{name}.jsonl"  # every stdout line as read, for a look during a run
        self._stderr = open(self.stderr_path, "w")  # closed in reap()
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=self._stderr, text=True,
                                     env={**os.environ, **CHILD_ENV})
        self.events: list[Event] = []
        self._queue: queue.Queue[Event | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        if self.proc.stdout is None:  # never: Popen(stdout=PIPE)
            return
        with open(self.events_path, "w") as log:
            for line in self.proc.stdout:
                log.write(line)
                log.flush()
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    event = {"event": "text", "line": line.rstrip()}
                self._queue.put(event)
        self._queue.put(None)

    def _drain(self, timeout: float) -> bool:
        """Move one queued event into ``events``; False at end of output."""
        item = self._queue.get(timeout=timeout)
        if item is None:
            self._queue.put(None)
            return False
        self.events.append(item)
        return True

    def wait_for(self, pred: Callable[[Event], bool], timeout: float, what: str = "event") -> Event:
        """The first event (seen before or arriving within ``timeout``) matching ``pred``."""
        deadline = time.monotonic() + timeout
        i = 0
        while True:
            while i < len(self.events):
                if pred(self.events[i]):
                    return self.events[i]
                i += 1
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise PeerWaitError(f"{self.name}: no {what} within {timeout:.0f}s; last events: "
                                    f"{self.events[-3:]}; stderr: {self.tail_stderr()}")
            try:
                if not self._drain(remaining):
                    raise PeerWaitError(f"{self.name}: exited (rc={self.proc.poll()}) before {what}; "
                                        f"last events: {self.events[-3:]}; stderr: {self.tail_stderr()}")
            except queue.Empty:
                continue

    def wait_step(self, step: int, timeout: float) -> Event:
        return self.wait_for(lambda e: e.get("event") == "step" and e["step"] >= step, timeout,
                             f"step {step}")

    def wait_exit(self, timeout: float) -> int:
        rc = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=5)
        self.poll_events()
        return rc

    def poll_events(self) -> list[Event]:
        """Take every event already printed without waiting; returns ``events``."""
        while True:
            try:
                if not self._drain(0.0):
                    break
            except queue.Empty:
                break
        return self.events

    def steps(self) -> dict[int, Event]:
        return {e["step"]: e for e in self.events if e.get("event") == "step"}

    def info(self) -> Event:
        return self.wait_for(lambda e: e.get("event") == "listening", 60, "listening line")

    def tail_stderr(self, n: int = 600) -> str:
        try:
            return self.stderr_path.read_text()[-n:]
        except OSError:
            return ""

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def reap(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        try:
            self.proc.wait(timeout=10)
        finally:
            self._stderr.close()


def stop_all(peers: Sequence[PeerProc], grace_s: float) -> dict[str, int | None]:
    """SIGTERM every live daemon (it finishes its round and says goodbye), wait at most ``grace_s`` for all
    of them, then reap (SIGKILL what is still running). Returns each exit code, None for a killed one."""
    for p in peers:
        p.signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    codes: dict[str, int | None] = {}
    for p in peers:
        try:
            codes[p.name] = p.wait_exit(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:  # still running: the reap below kills it
            codes[p.name] = None
        p.reap()
    return codes

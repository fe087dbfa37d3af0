"""Real `distro-node join` processes for the multi-process tests, read through their JSON stdout lines.

Every process is started with ``--log-format json``; a reader thread parses each stdout line into an event
dict (see node/peer/output.py) and queues it, so tests wait for *events* with a bounded timeout instead of
sleeping. Processes are killed by pid and reaped by the ``procs`` fixture, whatever the test did.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from distro_node.protocol.leader_rank import leader_order

Event = dict[str, Any]

CHILD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
CLI = [sys.executable, "-m", "distro_node.node.cli"]


class PeerProc:
    def __init__(self, argv: list[str], name: str, log_dir: Path) -> None:
        self.name = name
        self.argv = argv
        self.stderr_path = log_dir / f"{name}.stderr"
        self._stderr = open(self.stderr_path, "w")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._stderr, text=True,
                                     env={**os.environ, **CHILD_ENV})
        self.events: list[Event] = []
        self._queue: queue.Queue[Event | None] = queue.Queue()
        self._cursor = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
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
                raise AssertionError(f"{self.name}: no {what} within {timeout:.0f}s; last events: "
                                     f"{self.events[-3:]}; stderr: {self.tail_stderr()}")
            try:
                if not self._drain(remaining):
                    raise AssertionError(f"{self.name}: exited (rc={self.proc.poll()}) before {what}; "
                                         f"last events: {self.events[-3:]}; stderr: {self.tail_stderr()}")
            except queue.Empty:
                continue

    def wait_step(self, step: int, timeout: float) -> Event:
        return self.wait_for(lambda e: e.get("event") == "step" and e["step"] >= step, timeout,
                             f"step {step}")

    def wait_exit(self, timeout: float) -> int:
        rc = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=5)
        while True:
            try:
                if not self._drain(0.01):
                    break
            except queue.Empty:
                break
        return rc

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


class Procs:
    """Starts peers and guarantees they are killed and reaped (the fixture calls :meth:`reap_all`)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.all: list[PeerProc] = []

    def start(self, args: list[str], name: str) -> PeerProc:
        p = PeerProc([*CLI, "join", *args, "--log-format", "json"], name, self.log_dir)
        self.all.append(p)
        return p

    def start_command(self, command: str, extra: list[str], name: str) -> PeerProc:
        """Run a printed ``distro-node join ...`` command exactly, plus ``extra`` flags."""
        argv = shlex.split(command)
        if argv[:2] != ["distro-node", "join"]:
            raise AssertionError(f"unexpected join command {command!r}")
        p = PeerProc([*CLI, *argv[1:], *extra, "--log-format", "json"], name, self.log_dir)
        self.all.append(p)
        return p

    def swarm(self, n: int, run_args: list[str], peer_args: list[str]) -> list[PeerProc]:
        """A founder waiting for ``n`` genesis peers, and ``n - 1`` joiners running its printed command."""
        founder = self.start([*run_args, *peer_args, "--genesis-peers", str(n)], "peer0")
        command = founder.info()["join_command"]
        peers = [founder]
        for i in range(1, n):
            peers.append(self.start_command(command, peer_args, f"peer{i}"))
        return peers

    def reap_all(self) -> None:
        for p in self.all:
            p.reap()


def leader(run_id_hex: str, step: int, peers: list[str]) -> str:
    """Epoch-0 leader of ``step`` for a roster of active ``peers`` (what every replica computes)."""
    return leader_order(bytes.fromhex(run_id_hex), step, tuple(sorted(peers)))[0]


def assert_identical(procs: list[PeerProc], steps: range) -> None:
    """Every process that applied a step has the same weights hash after it."""
    for s in steps:
        hashes = {p.name: p.steps()[s]["weights_hash"] for p in procs if s in p.steps()}
        assert len(set(hashes.values())) == 1, f"weights differ after step {s}: {hashes}"

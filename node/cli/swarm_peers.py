"""The `swarm` launcher's children: one `join` process per peer, a reader thread per stdout, one queue.

Every child gets its own session (Ctrl-C in the terminal reaches only the launcher), and the launcher stops
each by pid: SIGTERM (the daemon leaves gracefully and checkpoints), then SIGKILL after a bounded wait.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from distro_node.node.join_process import CHILD_ENV, CLI

STOP_GRACE_SECONDS = 15.0


@dataclass
class Peer:
    index: int
    process: subprocess.Popen[str]
    stderr: TextIO
    rows: dict[int, dict[str, Any]] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    left: bool = False
    fault: str | None = None  # the --fault SPEC this peer runs with

    @property
    def name(self) -> str:
        return f"peer{self.index}"


class Swarm:
    """The child processes and the one queue their reader threads feed: (peer index, event or None at EOF)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.peers: list[Peer] = []
        self.bans: dict[str, dict[str, int]] = {}  # banned peer name -> reporting peer name -> step
        self.events: queue.Queue[tuple[int, dict[str, Any] | None]] = queue.Queue()

    def honest(self) -> list[Peer]:
        """Peers started without --fault: the ones the summary judges."""
        return [p for p in self.peers if p.fault is None]

    def all_finished(self, finished: set[int]) -> bool:
        """Every peer exited, except peers the others banned: those are cut off and may never finish their
        steps; ``stop`` ends them."""
        return all(p.index in finished or p.name in self.bans for p in self.peers)

    def start(self, join_args: list[str], fault: str | None = None, fault_start: int = 0) -> Peer:
        index = len(self.peers)
        if fault is not None:
            join_args = [*join_args, "--fault", fault, "--fault-start", str(fault_start)]
        data_dir = self.run_dir / f"peer{index}"
        data_dir.mkdir(parents=True, exist_ok=True)
        argv = [*CLI, "join", *join_args, "--data-dir", str(data_dir),
                "--metrics-port", "0", "--log-format", "json"]
        stderr = open(data_dir / "stderr.log", "w")  # closed in stop()
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                   env={**os.environ, **CHILD_ENV}, start_new_session=True)
        peer = Peer(index, process, stderr, fault=fault)
        self.peers.append(peer)
        threading.Thread(target=self._read, args=(peer,), daemon=True).start()
        return peer

    def _read(self, peer: Peer) -> None:
        if peer.process.stdout is None:  # never: Popen(stdout=PIPE)
            return
        with open(self.run_dir / f"{peer.name}.jsonl", "w") as log:
            for line in peer.process.stdout:
                log.write(line)
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(event, dict):
                    self.events.put((peer.index, event))
        self.events.put((peer.index, None))

    def stop(self) -> None:
        """SIGTERM every live peer by pid, wait a bounded time, SIGKILL the rest, reap all."""
        for peer in self.peers:
            if peer.process.poll() is None:
                peer.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for peer in self.peers:
            try:
                peer.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                peer.process.kill()
                peer.process.wait(timeout=10)
            peer.stderr.close()

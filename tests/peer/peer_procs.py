"""Real `distro-node join` processes for the multi-process tests, read through their JSON stdout lines.

The process wrapper itself is node/join_process.py (shared with the namespace testbed). Every process is
started with ``--log-format json``; a reader thread parses each stdout line into an event dict (see
node/peer/output.py) and queues it, so tests wait for *events* with a bounded timeout instead of sleeping.
Processes are killed by pid and reaped by the ``procs`` fixture, whatever the test did.
"""

from __future__ import annotations

from pathlib import Path

from distro_node.node.join_process import CHILD_ENV, CLI, Event, PeerProc, join_args
from distro_node.protocol.consensus import leader_order

__all__ = ["CHILD_ENV", "CLI", "Event", "PeerProc", "Procs", "assert_identical", "leader"]


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
        p = PeerProc([*CLI, "join", *join_args(command), *extra, "--log-format", "json"], name, self.log_dir)
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

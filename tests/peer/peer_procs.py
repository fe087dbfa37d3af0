"""Real `distro-node join` processes for the multi-process tests, read through their JSON stdout lines.

The process wrapper itself is node/join_process.py (shared with the namespace testbed). Every process is
started with ``--log-format json``; a reader thread parses each stdout line into an event dict (see
node/peer/output.py) and queues it, so tests wait for *events* with a bounded timeout instead of sleeping.
Processes are killed by pid and reaped by the ``procs`` fixture, whatever the test did.
"""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

from distro_node.node.join_process import CHILD_ENV, CLI, Event, PeerProc, join_args
from distro_node.protocol.consensus import leader_order
from prometheus_client.parser import text_string_to_metric_families

ADVERSARY = "distro_node.node.testbed.adversary"

__all__ = ["CHILD_ENV", "CLI", "Event", "PeerProc", "Procs", "assert_finished_without", "assert_identical",
           "ban_step", "gossip_rejected", "leader"]


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

    def start_adversary(self, kind: str, command: str, extra: list[str], name: str) -> PeerProc:
        """The real daemon with one attack patched in (node/testbed/adversary.py), joining by ``command``."""
        argv = [sys.executable, "-m", ADVERSARY, kind, "join", *join_args(command), *extra]
        p = PeerProc([*argv, "--log-format", "json"], name, self.log_dir)
        self.all.append(p)
        return p

    def start_raw(self, argv: list[str], name: str) -> PeerProc:
        """Any process printing JSON-line events (e.g. node/testbed/sybils.py), stopped like the daemons."""
        p = PeerProc(argv, name, self.log_dir)
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


def gossip_rejected(metrics_url: str) -> dict[str, float]:
    """A daemon's ``distro_gossip_rejected_total`` by reason, read from its /metrics."""
    with urllib.request.urlopen(metrics_url, timeout=10) as reply:
        text = reply.read().decode()
    return {s.labels["reason"]: s.value for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == "distro_gossip_rejected_total"}


def leader(run_id_hex: str, step: int, peers: list[str]) -> str:
    """Epoch-0 leader of ``step`` for a roster of active ``peers`` (what every replica computes)."""
    return leader_order(bytes.fromhex(run_id_hex), step, tuple(sorted(peers)))[0]


def ban_step(honest: list[PeerProc], attacker_id: str, reason: str) -> int:
    """Wait for every honest peer's ban of ``attacker_id``; they must agree on the step and the reason."""
    bans = {p.name: p.wait_for(lambda e: e.get("event") == "banned" and e.get("peer") == attacker_id, 200,
                               f"ban of {attacker_id[-8:]}") for p in honest}
    assert {e["reason"] for e in bans.values()} == {reason}, bans
    steps = {name: e["step"] for name, e in bans.items()}
    assert len(set(steps.values())) == 1, f"honest peers banned at different steps: {steps}"
    return int(str(next(iter(steps.values()))))


def assert_finished_without(honest: list[PeerProc], attacker_id: str, steps: int, banned_at: int) -> None:
    """The honest peers applied all ``steps`` with identical weights and left; nothing of the attacker's was
    applied after its ban, and no honest peer banned anyone else."""
    for p in honest:
        p.wait_for(lambda e: e.get("event") == "left", 200, "leave after the last step")
    assert_identical(honest, range(steps))
    for p in honest:
        rows = p.steps()
        assert sorted(rows) == list(range(steps)), f"{p.name} applied {sorted(rows)}"
        assert all(rows[s]["included"] <= len(honest) for s in range(banned_at + 1, steps)), p.name
        assert [e["peer"] for e in p.events if e.get("event") == "banned"] == [attacker_id], p.name


def assert_identical(procs: list[PeerProc], steps: range) -> None:
    """Every process that applied a step has the same weights hash after it."""
    for s in steps:
        hashes = {p.name: p.steps()[s]["weights_hash"] for p in procs if s in p.steps()}
        assert len(set(hashes.values())) == 1, f"weights differ after step {s}: {hashes}"

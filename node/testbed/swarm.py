"""N full `distro-node join` daemons, each in its own shaped network namespace (node/testbed/netns.py).

Why a class shared by tests/testbed/ and the benches (bench/internet.py, bench/churn.py): the same peers,
started the same way an operator starts them (the founder's printed join command, run as is), under every
link profile and fault. Peer i listens on its namespace's address; the founder waits for its genesis cohort.
Each peer keeps a data dir (identity, checkpoints) under ``log_dir/peer<i>``, so a restarted peer comes
back with its identity, as a volunteer's node would. :meth:`Testbed.close` kills every process by pid, then
deletes the namespaces; it runs on context exit and (via the network's atexit hook) at interpreter exit.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from distro_node.node.join_process import CLI, JoinCommandError, PeerProc, join_args
from distro_node.node.testbed.links import Link
from distro_node.node.testbed.nat import Nat
from distro_node.node.testbed.netns import Network

LISTEN_PORT = 0  # any free port: each namespace has its own port space, but tests never fix ports


class TestbedError(RuntimeError):
    """A testbed action was asked of a peer that cannot take it (``peer`` names it)."""

    def __init__(self, peer: int, detail: str) -> None:
        super().__init__(f"peer {peer}: {detail}")
        self.peer = peer


class Testbed:
    __test__ = False  # not a pytest class, whatever its name

    def __init__(self, links: Sequence[Link], log_dir: Path, run_args: Sequence[str],
                 peer_args: Sequence[str] = (), nats: Mapping[int, Nat] | None = None) -> None:
        self.log_dir = log_dir
        self.run_args = list(run_args)
        self.peer_args = list(peer_args)
        self.procs: list[PeerProc | None] = [None] * len(links)
        self._restarts = [0] * len(links)
        self.join_command: str | None = None
        self.net = Network(links, nats)  # peers in ``nats`` sit behind a home router (node/testbed/nat.py)

    def __enter__(self) -> Testbed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def n(self) -> int:
        return len(self.procs)

    def listen(self, i: int) -> str:
        return f"/ip4/{self.net.listen_address(i)}/tcp/{LISTEN_PORT}"

    def _spawn(self, i: int, join_args: Sequence[str]) -> PeerProc:
        data_dir = self.log_dir / f"peer{i}"
        data_dir.mkdir(parents=True, exist_ok=True)
        name = f"peer{i}" + (f".{self._restarts[i]}" if self._restarts[i] else "")
        argv = [*self.net.exec_prefix(i), *CLI, "join", *join_args, "--listen", self.listen(i),
                "--data-dir", str(data_dir), *self.peer_args, "--log-format", "json"]
        proc = PeerProc(argv, name, self.log_dir)
        self.procs[i] = proc
        return proc

    def start(self, genesis: int | None = None) -> list[PeerProc]:
        """Found the run in peer 0 and start every other peer with its printed command; the founder waits
        for ``genesis`` peers (default all) before step 0."""
        cohort = self.n if genesis is None else genesis
        founder = self._spawn(0, [*self.run_args, "--genesis-peers", str(cohort)])
        self.join_command = str(founder.info()["join_command"])
        for i in range(1, self.n):
            self._spawn(i, self._joiner_args())
        return [p for p in self.procs if p is not None]

    def _joiner_args(self, bootstrap: str | None = None) -> list[str]:
        if self.join_command is None:
            raise TestbedError(0, "the run has not been founded (call start first)")
        try:
            args = join_args(self.join_command)
        except JoinCommandError as exc:
            raise TestbedError(0, str(exc)) from None
        if bootstrap is not None:
            args[args.index("--bootstrap") + 1] = bootstrap
        return args

    def peer(self, i: int) -> PeerProc:
        proc = self.procs[i]
        if proc is None:
            raise TestbedError(i, "not started")
        return proc

    def alive(self) -> list[int]:
        return [i for i, p in enumerate(self.procs) if p is not None and p.proc.poll() is None]

    # Fault actions (the link ones act on the network; see node/testbed/netns.py).

    def kill(self, i: int, sig: int = signal.SIGKILL) -> None:
        """Stop peer i by pid (SIGKILL: a crash; SIGTERM: a graceful leave) and reap it."""
        proc = self.peer(i)
        proc.signal(sig)
        if sig != signal.SIGKILL:
            with contextlib.suppress(subprocess.TimeoutExpired):  # not gone in time: killed below
                proc.wait_exit(timeout=60)
        proc.reap()
        proc.poll_events()

    def restart(self, i: int, via: int | None = None) -> PeerProc:
        """Start peer i again (same data dir, so the same identity), joining through peer ``via`` (default:
        the first live peer), as a volunteer rejoining after a crash would."""
        proc = self.procs[i]
        if proc is not None and proc.proc.poll() is None:
            raise TestbedError(i, "still running")
        donors = [j for j in self.alive() if j != i] if via is None else [via]
        if not donors:
            raise TestbedError(i, "no live peer to rejoin through")
        addr = str(self.peer(donors[0]).info()["addrs"][0])
        self._restarts[i] += 1
        return self._spawn(i, self._joiner_args(bootstrap=addr))

    def cut(self, i: int) -> None:
        self.net.cut(i)

    def restore(self, i: int) -> None:
        self.net.restore(i)

    def partition(self, side: Sequence[int]) -> None:
        self.net.partition(side)

    def heal(self) -> None:
        self.net.heal()

    def close(self) -> None:
        try:
            for p in self.procs:
                if p is not None:
                    p.reap()
        finally:
            self.net.close()

"""One configuration of bench/exchange.py's all-to-all exchange: start the peers, collect their round times.

Why a module of its own: the loopback run (bench/exchange.py), the shaped-namespace run
(bench/_exchange_netns.py) and hivemind's side (bench/_exchange_hivemind.py, which reads its children's
lines the same way) all need it. Kept in exchange.py, the other two imported the script back while it ran
as ``__main__``, which loaded a second copy of it and with it a second ``BenchError`` class that the
script's ``except`` clauses never caught.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from _common import BenchError
from distro_node.node.testbed.netns import Network

PEER_SCRIPT = Path(__file__).resolve().parent / "_exchange_peer.py"


class JsonLines:
    """JSON lines of one child's stdout, read by a thread into a queue.

    Not ``select`` on the pipe: a text-mode ``readline`` pulls every byte already written into Python's
    buffer, so a second line printed right after the first would sit there unseen by ``select`` until the
    deadline.
    """

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        if proc.stdout is None:
            raise BenchError("child stdout not captured")
        self.pid = proc.pid
        self._proc = proc
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, args=(proc.stdout,), daemon=True).start()

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            if line.startswith("{"):
                self._queue.put(line)
        self._queue.put(None)  # end of output

    def next(self, deadline: float) -> str:
        """The next JSON line before ``deadline`` (monotonic), or BenchError: never blocks forever."""
        try:
            line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise BenchError(f"pid {self.pid}: no output in time") from None
        if line is None:
            raise BenchError(f"pid {self.pid} exited (rc={self._proc.poll()}) without a result")
        return line


def _kill_all(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def run_config(peers: int, rounds: int, size: int, wall_s: float,
               net: Network | None = None, *, extra: tuple[str, ...] = (),
               results: list[dict[str, Any]] | None = None, log_dir: Path | None = None) -> list[list[float]]:
    """Per-peer round times for one configuration, or BenchError; all children killed before returning.
    With ``net`` (bench/_exchange_netns.py) peer i runs in the testbed namespace i, on its address.
    ``extra`` goes to every peer's command line; ``results``, when given, receives each peer's last line;
    with ``log_dir`` peer i's stderr goes to ``log_dir/peer{i}.log`` (else nowhere)."""
    if peers < 2 or rounds < 1 or size < 1:
        raise BenchError("need peers >= 2, rounds >= 1, size >= 1")
    base = [sys.executable, str(PEER_SCRIPT), "--peers", str(peers), "--rounds", str(rounds),
            "--size", str(size), *extra]

    def peer_cmd(i: int) -> list[str]:
        if net is None:
            return base
        return [*net.exec_prefix(i), *base, "--listen", f"/ip4/{net.address(i)}/tcp/0"]

    cmd = peer_cmd(0)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    deadline = time.monotonic() + wall_s
    procs: list[subprocess.Popen[str]] = []
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)

    logs: list[IO[str]] = []

    def stderr(i: int) -> IO[str] | int:
        if log_dir is None:
            return subprocess.DEVNULL
        logs.append(open(log_dir / f"peer{i}.log", "w"))  # the child holds its own copy of the descriptor
        return logs[-1]

    try:
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr(0), text=True, env=env))
        readers = [JsonLines(procs[0])]
        seed = json.loads(readers[0].next(deadline))["addr"]
        for i in range(1, peers):
            procs.append(subprocess.Popen([*peer_cmd(i), "--bootstrap", seed], stdout=subprocess.PIPE,
                                          stderr=stderr(i), text=True, env=env))
            readers.append(JsonLines(procs[-1]))
        per_peer: list[list[float]] = []
        for p, reader in zip(procs, readers, strict=True):
            line = reader.next(deadline)
            if "addr" in line:
                line = reader.next(deadline)
            result = json.loads(line)
            if result.get("timed_out") or len(result["times"]) != rounds:
                raise BenchError(f"pid {p.pid} timed out after {len(result['times'])} of {rounds} rounds")
            per_peer.append(result["times"])
            if results is not None:
                results.append(result)
        return per_peer
    finally:
        _kill_all(procs)
        for log in logs:
            log.close()


def summarize(peers: int, rounds: int, size: int, per_peer: list[list[float]],
              links_mbit: tuple[float, ...]) -> dict[str, Any]:
    steady = sorted(t for times in per_peer for t in (times[1:] if rounds > 1 else times))
    med = statistics.median(steady)
    p90 = steady[min(len(steady) - 1, round(0.9 * (len(steady) - 1)))]
    mb_each_way = (peers - 1) * size / 1e6
    return {
        "peers": peers, "rounds": rounds, "payload_bytes": size,
        "first_round_s": round(statistics.median(t[0] for t in per_peer), 3),
        "median_round_s": round(med, 3),
        "p90_round_s": round(p90, 3),
        # All-to-all: each peer downloads N-1 payloads and (served from its own store) uploads N-1 copies.
        "download_MBps_per_peer": round(mb_each_way / med, 2),
        "upload_MBps_per_peer": round(mb_each_way / med, 2),
        "bound_s": {f"{rate:g}_mbit": round((peers - 1) * size * 8 / (rate * 1e6), 3) for rate in links_mbit},
    }

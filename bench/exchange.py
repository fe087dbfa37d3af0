"""All-to-all exchange of DisTrO-sized payloads among N peer processes on loopback, over the real stack.

Why: the daemon's step time has a network floor, and an all-gather needs (N-1) x payload of upload per peer
per step. This measures what our libp2p stack (Noise + yamux over TCP, gossip announcements, pulls over
``/distro/payload/1.0.0``) achieves when nothing but the stack limits it, and sets it next to that bound at
given link rates. Each peer is a separate process (bench/_exchange_peer.py), as in a real swarm; on a
2-core machine 8 processes share 2 cores, so the 8-peer figures are CPU-bound, not network-bound.

    .venv/bin/python bench/exchange.py                  # 4 and 8 peers, 2.8 MB, 6 rounds, + hivemind
    .venv/bin/python bench/exchange.py --peers 2 --rounds 2 --size 100000 --out /tmp/x.json   # smoke
    .venv/bin/python bench/exchange.py --netns home      # as root: shaped namespaces -> exchange_netns.json

Round 0 includes connection warm-up (yamux window growth) and is reported separately. Every child process
is killed by pid when its configuration ends, whatever happened. The same run then measures hivemind's bulk
path and dense all-reduce on the same peer counts and payload (bench/_exchange_hivemind.py, in its own
venv; ``--no-hivemind`` skips it).
"""

from __future__ import annotations

import argparse
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

from _common import RESULTS_DIR, write_json
from distro_node.node.testbed.netns import Network

PEER_SCRIPT = Path(__file__).resolve().parent / "_exchange_peer.py"
PAYLOAD_BYTES = 2_800_000  # the 1.2B DisTrO payload, see bench/results/payload.json
REFERENCE_LINKS_MBIT = (10.0, 100.0)  # home upload, home download / datacenter-lite


class BenchError(RuntimeError):
    """A configuration did not complete (a peer failed, timed out or printed no result)."""


class _Lines:
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
               net: Network | None = None) -> list[list[float]]:
    """Per-peer round times for one configuration, or BenchError; all children killed before returning.
    With ``net`` (bench/_exchange_netns.py) peer i runs in the testbed namespace i, on its address."""
    if peers < 2 or rounds < 1 or size < 1:
        raise BenchError("need peers >= 2, rounds >= 1, size >= 1")
    base = [sys.executable, str(PEER_SCRIPT), "--peers", str(peers), "--rounds", str(rounds),
            "--size", str(size)]

    def peer_cmd(i: int) -> list[str]:
        if net is None:
            return base
        return [*net.exec_prefix(i), *base, "--listen", f"/ip4/{net.address(i)}/tcp/0"]

    cmd = peer_cmd(0)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    deadline = time.monotonic() + wall_s
    procs: list[subprocess.Popen[str]] = []
    try:
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                      env=env))
        readers = [_Lines(procs[0])]
        seed = json.loads(readers[0].next(deadline))["addr"]
        for i in range(1, peers):
            procs.append(subprocess.Popen([*peer_cmd(i), "--bootstrap", seed], stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL, text=True, env=env))
            readers.append(_Lines(procs[-1]))
        per_peer: list[list[float]] = []
        for p, reader in zip(procs, readers, strict=True):
            line = reader.next(deadline)
            if "addr" in line:
                line = reader.next(deadline)
            result = json.loads(line)
            if result.get("timed_out") or len(result["times"]) != rounds:
                raise BenchError(f"pid {p.pid} timed out after {len(result['times'])} of {rounds} rounds")
            per_peer.append(result["times"])
        return per_peer
    finally:
        _kill_all(procs)


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peers", default="4,8", help="comma-separated peer counts (default 4,8)")
    ap.add_argument("--rounds", type=int, default=6, help="rounds per configuration (default 6)")
    ap.add_argument("--size", type=int, default=PAYLOAD_BYTES, help="payload bytes (default 2.8 MB)")
    ap.add_argument("--link-mbit", default=",".join(f"{r:g}" for r in REFERENCE_LINKS_MBIT),
                    help="comma-separated link rates for the (N-1) x payload / rate bound (default 10,100)")
    ap.add_argument("--wall", type=float, default=600.0, help="seconds allowed per configuration")
    ap.add_argument("--out", type=Path, default=None, help="JSON path (default bench/results/exchange.json)")
    ap.add_argument("--netns", metavar="PROFILE", default=None,
                    help="as root: run each peer in its own network namespace with links shaped by the "
                         "testbed profile (home, gigabit, slow, mixed) and write bench/results/"
                         "exchange_netns.json instead (bench/_exchange_netns.py)")
    ap.add_argument("--hivemind-python", type=Path, default=None, metavar="PATH",
                    help="python with hivemind 1.1.12 for the side-by-side run (default .venv-hivemind/bin/"
                         "python, created when missing; bench/_exchange_hivemind.py)")
    ap.add_argument("--no-hivemind", action="store_true", help="skip the hivemind side-by-side run")
    args = ap.parse_args(argv)
    if args.netns is not None:
        from _exchange_netns import run_netns

        return run_netns(args)
    try:
        counts = [int(x) for x in args.peers.split(",")]
        links = tuple(float(x) for x in args.link_mbit.split(",") if x)
    except ValueError as exc:
        ap.error(f"bad number: {exc}")
    rows: list[dict[str, Any]] = []
    for n in counts:
        try:
            per_peer = run_config(n, args.rounds, args.size, args.wall)
        except BenchError as exc:
            rows.append({"peers": n, "error": str(exc)})
            print(f"{n} peers: FAILED: {exc}")
            continue
        row = summarize(n, args.rounds, args.size, per_peer, links)
        rows.append(row)
        print(f"{n} peers x {args.size / 1e6:.2f} MB: median round {row['median_round_s']:.3f} s, p90 "
              f"{row['p90_round_s']:.3f} s, {row['download_MBps_per_peer']:.1f} MB/s down and up per peer; "
              f"bound {row['bound_s']}")
    hivemind: dict[str, Any] = {"status": "skipped (--no-hivemind)"}
    if not args.no_hivemind:
        from _exchange_hivemind import measure

        hivemind = measure(args.hivemind_python, counts, args.rounds, args.size, args.wall, links,
                           presets=("tiny", "small"))
    doc = {
        "what": "all-to-all exchange over host + gossip announcements + /distro/payload/1.0.0 pulls, "
                "one process per peer, loopback",
        "results": rows,
        "hivemind": hivemind,
        "netns": NETNS,
    }
    path = write_json(args.out or RESULTS_DIR / "exchange.json", doc)
    print(f"wrote {path}")
    return 0 if all("error" not in r for r in rows) else 1


NETNS: dict[str, str] = {
    "status": "measured separately",
    "see": "bench/results/exchange_netns.json, written by `bench/exchange.py --netns PROFILE` (as root: each "
           "peer in its own network namespace, tc tbf links, node/testbed/netns.py)",
}


if __name__ == "__main__":
    sys.exit(main())

"""hivemind's side of bench/exchange.py: its bulk path and its dense all-reduce, measured in the same run.

Why: DESIGN.md leaves hivemind's role open (DHT discovery, bulk-transfer backend, or the dense all-reduce
baseline) until it is measured on the same machine, payload and peer counts as our exchange. hivemind
1.1.12 cannot share .venv (its pins conflict with this project's), so it gets its own venv
(``.venv-hivemind/`` in the repo root, gitignored), created here when missing: torch 2.13.0 first (the CPU
wheel, as in the Makefile), then hivemind. Each hivemind peer is a bench/_hivemind_peer.py process under
that interpreter, started in its own session; its whole process group (p2pd, DHT and averager processes)
is killed when its configuration ends, whatever happened. Rounds are paced by this parent over the
children's stdin, so every peer starts a round together and a slow peer never overlaps the next round.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _common import REPO_ROOT, BenchError
from _exchange_run import JsonLines, summarize

HIVEMIND_VERSION = "1.1.12"
TORCH_VERSION = "2.13.0"
DEFAULT_VENV = REPO_ROOT / ".venv-hivemind"
PEER_SCRIPT = Path(__file__).resolve().parent / "_hivemind_peer.py"
INSTALL_TIMEOUT_S = 1800.0
# A configuration that fails is run once more; every failure is kept in the result ("failed_attempts"), so
# flakiness shows instead of being retried away.
ATTEMPTS = 2
CHILD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
             "HIVEMIND_LOGLEVEL": "WARNING"}


class HivemindEnvError(RuntimeError):
    """No interpreter with hivemind could be found or made; the message says which step failed."""


def _version(python: Path) -> str | None:
    try:
        out = subprocess.run([str(python), "-c", "import hivemind; print(hivemind.__version__)"],
                             capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = out.stdout.strip().splitlines()
    return lines[-1] if out.returncode == 0 and lines else None


def ensure_python(python: Path | None, venv: Path = DEFAULT_VENV) -> tuple[Path, str]:
    """An interpreter with hivemind and how it was obtained ("given", "existing" or "created").

    A given interpreter is used as is (its version is reported, not enforced); the default venv is created
    when it is missing or lacks hivemind.
    """
    if python is not None:
        version = _version(python)
        if version is None:
            raise HivemindEnvError(f"--hivemind-python {python}: cannot import hivemind")
        return python, "given"
    candidate = venv / "bin" / "python"
    if candidate.exists() and _version(candidate) == HIVEMIND_VERSION:
        return candidate, "existing"
    steps = [[sys.executable, "-m", "venv", str(venv)],
             [str(candidate), "-m", "pip", "install", "--quiet", f"torch=={TORCH_VERSION}"],
             [str(candidate), "-m", "pip", "install", "--quiet", f"hivemind=={HIVEMIND_VERSION}"]]
    for cmd in steps:
        print(f"hivemind venv: {' '.join(cmd[1:])}", flush=True)
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise HivemindEnvError(f"{' '.join(cmd)}: {exc}") from None
        if done.returncode != 0:
            raise HivemindEnvError(f"{' '.join(cmd)} failed: {done.stderr.strip()[-800:]}")
    if _version(candidate) != HIVEMIND_VERSION:
        raise HivemindEnvError(f"{candidate} installed but does not import hivemind {HIVEMIND_VERSION}")
    return candidate, "created"


class _Group:
    """The hivemind peer processes of one configuration, each in its own session, talked to by lines."""

    def __init__(self, python: Path, mode: str, peers: int, extra: Sequence[str], wall_s: float) -> None:
        self.deadline = time.monotonic() + wall_s
        self.wait = max(30.0, wall_s / 2)
        self.procs: list[subprocess.Popen[str]] = []
        self.readers: list[JsonLines] = []
        self._logs = tempfile.TemporaryDirectory(prefix="hivemind-bench-")
        self._base = [str(python), str(PEER_SCRIPT), "--mode", mode, "--peers", str(peers),
                      "--wait", f"{self.wait:g}", *extra]
        self.peers = peers

    def start(self) -> list[str]:
        """Start the first peer, then the others bootstrapped from it; their peer ids."""
        ready = [self._spawn(0, [])]
        for i in range(1, self.peers):
            ready.append(self._spawn(i, [a for m in ready[0]["maddrs"] for a in ("--bootstrap", m)]))
        return [r["peer_id"] for r in ready]

    def _spawn(self, index: int, bootstrap: list[str]) -> dict[str, Any]:
        with open(Path(self._logs.name) / f"{index}.stderr", "w") as stderr:
            proc = subprocess.Popen([*self._base, "--index", str(index), *bootstrap], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=stderr, text=True,
                                    env={**os.environ, **CHILD_ENV}, start_new_session=True)
        self.procs.append(proc)
        self.readers.append(JsonLines(proc))
        return self.expect(index, "ready")

    def expect(self, index: int, key: str) -> dict[str, Any]:
        try:
            msg = json.loads(self.readers[index].next(self.deadline))
        except BenchError as exc:
            raise BenchError(f"hivemind peer {index}: {exc}; stderr: {self.tail(index)}") from None
        if "error" in msg:
            raise BenchError(f"hivemind peer {index}: {msg['error']}; stderr: {self.tail(index)}")
        if key not in msg:
            raise BenchError(f"hivemind peer {index}: expected {key!r}, got {msg}")
        return msg

    def all(self, key: str) -> list[dict[str, Any]]:
        return [self.expect(i, key) for i in range(self.peers)]

    def tell(self, **command: Any) -> None:
        line = json.dumps(command) + "\n"
        for proc in self.procs:
            if proc.stdin is None:
                raise BenchError("child stdin not captured")
            proc.stdin.write(line)
            proc.stdin.flush()

    def tail(self, index: int) -> str:
        try:
            return (Path(self._logs.name) / f"{index}.stderr").read_text()[-600:]
        except OSError:
            return ""

    def close(self) -> None:
        """Kill every child's process group (the child, its p2pd, DHT and averager processes), then reap."""
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self._logs.cleanup()


def run_bulk(python: Path, mode: str, peers: int, rounds: int, size: int, wall_s: float) -> list[list[float]]:
    """Per-peer round times of hivemind's ``mode`` ("unary" or "stream") all-to-all; BenchError on failure."""
    group = _Group(python, mode, peers, ["--rounds", str(rounds), "--size", str(size)], wall_s)
    try:
        ids = group.start()
        group.tell(peers=ids)
        group.all("connected")
        times: list[list[float]] = [[] for _ in range(peers)]
        for rnd in range(rounds):
            group.tell(go=rnd)
            for i, msg in enumerate(group.all("round")):
                if msg["round"] != rnd or msg["bad"]:
                    raise BenchError(f"hivemind peer {i}: round {msg['round']}, {msg['bad']} bad payloads")
                times[i].append(msg["s"])
        return times
    finally:
        group.close()


def run_allreduce(python: Path, peers: int, rounds: int, numel: int, fp16: bool,
                  wall_s: float) -> dict[str, list[float]]:
    """All-reduce and matchmaking times (all peers, all rounds) of DecentralizedAverager; BenchError."""
    extra = ["--rounds", str(rounds), "--numel", str(numel), *(["--fp16"] if fp16 else [])]
    group = _Group(python, "allreduce", peers, extra, wall_s)
    out: dict[str, list[float]] = {"allreduce_s": [], "matchmaking_s": [], "first_allreduce_s": []}
    try:
        group.tell(peers=group.start())
        group.all("connected")
        for rnd in range(rounds):
            group.tell(go=rnd)
            group.all("grouped")
            group.tell(trigger=rnd)
            for i, msg in enumerate(group.all("round")):
                if msg["max_abs_error"] > 1e-3:
                    raise BenchError(f"hivemind peer {i}: all-reduce off by {msg['max_abs_error']} (a part "
                                     f"was left out); stderr: {group.tail(i)}")
                out["first_allreduce_s" if rnd == 0 else "allreduce_s"].append(msg["s"])
                out["matchmaking_s"].append(msg["matchmaking_s"])
        return out
    finally:
        group.close()


def _allreduce_row(peers: int, rounds: int, numel: int, fp16: bool, what: str,
                   t: dict[str, list[float]]) -> dict[str, Any]:
    wire = numel * (2 if fp16 else 4)
    steady = t["allreduce_s"] or t["first_allreduce_s"]
    med = statistics.median(steady)
    # Butterfly all-reduce: each peer sends (N-1)/N of its tensor to the part owners and receives (N-1)/N of
    # the averaged tensor back, each way.
    each_way = 2 * (peers - 1) / peers * wire / 1e6
    return {
        "what": what, "peers": peers, "numel": numel, "bytes_per_value_on_wire": 2 if fp16 else 4,
        "tensor_wire_bytes": wire, "rounds": rounds,
        "first_allreduce_s": round(statistics.median(t["first_allreduce_s"]), 3),
        "median_allreduce_s": round(med, 3),
        "median_matchmaking_s": round(statistics.median(t["matchmaking_s"]), 3),
        "MBps_per_peer_each_way": round(each_way / med, 2),
    }


def measure(python: Path | None, counts: Sequence[int], rounds: int, size: int, wall_s: float,
            links_mbit: tuple[float, ...], presets: Sequence[str] = ()) -> dict[str, Any]:
    """The ``hivemind`` section of exchange.json; failures become rows with an ``error`` (or a status).

    Besides the payload-sized tensor, the dense gradient of each of ``presets`` is all-reduced with 16-bit
    values on the wire: the bytes of our AdamW + all-reduce baseline's bf16 gradient.
    """
    from distro_node.node.model import param_count
    from distro_node.node.presets import preset

    try:
        interpreter, how = ensure_python(python)
    except HivemindEnvError as exc:
        print(f"hivemind: not measured: {exc}", flush=True)
        return {"status": "not measured", "why": str(exc)}
    doc: dict[str, Any] = {
        "status": "measured", "version": _version(interpreter), "python": str(interpreter), "venv": how,
        "what": "hivemind P2P (go-libp2p p2pd daemon per peer) carrying the same payloads all-to-all, via "
                "unary RPC and via binary streams; DecentralizedAverager (butterfly all-reduce) of dense "
                "tensors; one process per peer, loopback, rounds paced by the parent",
        "bulk": [], "allreduce": [],
    }
    for n in counts:
        for mode in ("stream", "unary"):
            failed: list[str] = []
            row = {"mode": mode, "peers": n}
            for _ in range(ATTEMPTS):
                try:
                    times = run_bulk(interpreter, mode, n, rounds, size, wall_s)
                except BenchError as exc:
                    failed.append(str(exc))
                    print(f"hivemind {mode} {n} peers: FAILED: {exc}", flush=True)
                    continue
                row |= summarize(n, rounds, size, times, links_mbit)
                print(f"hivemind {mode} {n} peers x {size / 1e6:.2f} MB: median round "
                      f"{row['median_round_s']:.3f} s, {row['download_MBps_per_peer']:.1f} MB/s per peer",
                      flush=True)
                break
            if len(failed) == ATTEMPTS:
                row["error"] = failed[-1]
            doc["bulk"].append({**row, "failed_attempts": failed})
    tensors = [(f"float32 tensor of the payload's size ({size} bytes)", max(1, size // 4), False)]
    tensors += [(f"dense gradient of the {name} preset, 16-bit values on the wire",
                 param_count(preset(name)), True) for name in presets]
    for n in counts:
        for what, numel, fp16 in tensors:
            failed = []
            row = {"what": what, "peers": n, "numel": numel}
            for _ in range(ATTEMPTS):
                try:
                    t = run_allreduce(interpreter, n, max(2, rounds), numel, fp16, wall_s)
                except BenchError as exc:
                    failed.append(str(exc))
                    print(f"hivemind all-reduce {n} peers, {what}: FAILED: {exc}", flush=True)
                    continue
                row = _allreduce_row(n, max(2, rounds), numel, fp16, what, t)
                print(f"hivemind all-reduce {n} peers, {what}: {row['median_allreduce_s']:.3f} s "
                      f"(+ matchmaking {row['median_matchmaking_s']:.2f} s)", flush=True)
                break
            if len(failed) == ATTEMPTS:
                row["error"] = failed[-1]
            doc["allreduce"].append({**row, "failed_attempts": failed})
    return doc

"""Step time of real `join` peers, sequential vs overlapped, with communication as slow as compute.

Why: overlapped DisTrO (DESIGN.md section 3) exists to hide the exchange of step s behind the compute of step
s + 1, so a step should cost about max(compute, communication) instead of their sum. On loopback the exchange
of a small model takes a few milliseconds, far less than compute, so there would be nothing to hide. The
peer's benchmark-only ``--comm-delay SECONDS`` knob holds each peer's own announcement back by a fixed time
after its payload is ready (as if the upload took that long); nothing else changes: the real stack still
carries the announcements, fetches, lists and votes.

Three bounded runs with the same swarm: (1) sequential without delay, to calibrate compute time C and the
bare round time r; the delay is then D = C, so that communication (D + r) is C or a little more (the round
itself also waits for the slowest peer); (2) sequential with D; (3) overlapped (``--overlap``) with D.
Reported per mode: median step time (after warm-up steps), and compute and communication medians; the
reference compute and communication are those of the sequential run with D (where they do not overlap, so
each is measured clean). The figure of merit is overlapped step / max(compute, communication) (target
<= 1.15), next to sequential step / (compute + communication).

    .venv/bin/python bench/overlap.py                          # 3 peers, small preset -> results/overlap.json
    .venv/bin/python bench/overlap.py --peers 2 --steps 6 --warmup 2 --preset tiny --out /tmp/o.json  # smoke

Every peer process is killed by pid when its run ends, whatever happened; each run has a wall-clock bound.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import RESULTS_DIR, BenchError, write_json
from distro_node.node.join_process import CLI, JoinCommandError, PeerProc, PeerWaitError, join_args

TARGET_RATIO = 1.15


def run_swarm(
    args: argparse.Namespace, *, overlap: bool, delay: float, log_dir: Path
) -> list[dict[str, Any]]:
    """One swarm of ``args.peers`` processes for ``args.steps`` steps; returns every peer's step events."""
    run = ["--preset", args.preset, "--batch-size", str(args.batch_size), "--seq-len", str(args.seq_len),
           "--round-timeout", "10", "--no-metrics", *(["--overlap"] if overlap else [])]
    local = ["--steps", str(args.steps), "--comm-delay", str(delay), "--log-format", "json",
             "--device", args.device]
    deadline = time.monotonic() + args.wall
    peers: list[PeerProc] = []

    def left(p: PeerProc) -> None:
        p.wait_for(lambda e: e.get("event") == "left", max(0.0, deadline - time.monotonic()), "left event")

    try:
        founder = PeerProc([*CLI, "join", *run, *local, "--genesis-peers", str(args.peers)], "peer0", log_dir)
        peers.append(founder)
        listening = founder.wait_for(lambda e: e.get("event") == "listening",
                                     max(0.0, deadline - time.monotonic()), "listening line")
        joiner = join_args(str(listening["join_command"]))
        for i in range(1, args.peers):
            peers.append(PeerProc([*CLI, "join", *joiner, *local], f"peer{i}", log_dir))
        for p in peers:
            left(p)
        rows: list[dict[str, Any]] = []
        for p in peers:
            steps = p.steps()
            if sorted(steps) != list(range(args.steps)):
                raise BenchError(f"{p.name} applied steps {sorted(steps)}")
            rows.extend(steps[s] for s in range(args.warmup, args.steps))
        hashes = {s: {p.steps()[s]["weights_hash"] for p in peers} for s in range(args.steps)}
        if any(len(h) != 1 for h in hashes.values()):
            raise BenchError("replicas diverged: weights hashes differ across peers")
        return rows
    except (PeerWaitError, JoinCommandError) as exc:
        raise BenchError(str(exc)) from None
    finally:
        for p in peers:
            p.reap()


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 4)


def summarize(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Medians over every peer's post-warm-up steps: step time, compute, communication."""
    phases = [r["phases"] for r in rows]
    return {
        "step_s": _median([float(r["step_s"]) for r in rows]),
        "compute_s": _median([p.get("compute", 0.0) + p.get("prepare", 0.0) for p in phases]),
        "comm_s": _median([p.get("comm_delay", 0.0) + float(r["round_s"]) for p, r in zip(phases, rows,
                                                                                         strict=True)]),
        "apply_s": _median([p.get("apply", 0.0) for p in phases]),
        "steps_measured": len(rows),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peers", type=int, default=3)
    ap.add_argument("--steps", type=int, default=24, help="steps per run (default 24)")
    ap.add_argument("--warmup", type=int, default=4, help="first steps left out of the medians (default 4)")
    ap.add_argument("--preset", default="small")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--comm-delay", type=float, default=None,
                    help="fixed delay in seconds (default: calibrated so communication ~ compute)")
    ap.add_argument("--device", default="auto", help="every peer's --device (default auto: cuda if present)")
    ap.add_argument("--wall", type=float, default=240.0, help="wall-clock bound per run in seconds")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR / "overlap.json")
    args = ap.parse_args(argv)
    if args.peers < 2 or args.steps <= args.warmup or args.warmup < 0 or not args.wall > 0:
        ap.error("need --peers >= 2, 0 <= --warmup < --steps and --wall > 0")
    log_dir = Path(tempfile.mkdtemp(prefix="overlap_logs_"))  # peer stderr, for diagnosing a failed run
    try:
        calib = summarize(run_swarm(args, overlap=False, delay=0.0, log_dir=log_dir))
        delay = args.comm_delay if args.comm_delay is not None else round(calib["compute_s"], 3)
        seq = summarize(run_swarm(args, overlap=False, delay=delay, log_dir=log_dir))
        ovl = summarize(run_swarm(args, overlap=True, delay=delay, log_dir=log_dir))
    except BenchError as exc:
        print(f"error: {exc} (peer stderr in {log_dir})", file=sys.stderr)
        return 1
    compute, comm = seq["compute_s"], seq["comm_s"]
    ratio = round(ovl["step_s"] / max(compute, comm), 3)
    results = {
        "bench": "overlap",
        "what": "median step time of real join peers on loopback, sequential vs overlapped, with each peer's "
                "own announcement delayed by comm_delay_s (benchmark knob) so communication ~ compute",
        "peers": args.peers, "steps": args.steps, "device": args.device, "warmup_steps": args.warmup,
        "preset": args.preset,
        "batch_size": args.batch_size, "seq_len": args.seq_len,
        "comm_delay_s": delay,
        "calibration_no_delay": calib,
        "sequential": seq,
        "overlapped": ovl,
        "compute_s": compute,
        "communication_s": comm,
        "sequential_sum_s": round(compute + comm, 4),
        "max_compute_comm_s": round(max(compute, comm), 4),
        "overlapped_over_max": ratio,
        "sequential_over_sum": round(seq["step_s"] / (compute + comm), 3),
        "speedup": round(seq["step_s"] / ovl["step_s"], 3),
        "target_overlapped_over_max": TARGET_RATIO,
        "meets_target": ratio <= TARGET_RATIO,
    }
    write_json(args.out, results)
    print(json.dumps({k: results[k] for k in ("comm_delay_s", "compute_s", "communication_s",
                                              "sequential_sum_s", "overlapped_over_max", "speedup")}))
    print(f"sequential step {seq['step_s']:.3f}s, overlapped step {ovl['step_s']:.3f}s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

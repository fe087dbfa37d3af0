"""The GPU figures in one bounded run: the device, the GPU tests, one peer's 1.2B steps with doctor's
predictions beside them, overlap of real daemons sharing the GPU, and convergence of the simulated swarm.

Why one driver: a GPU machine is borrowed for minutes, so every part runs as its own subprocess under its own
time limit, in the order given, and a part that fails or runs out of time is recorded (exit code, seconds,
the end of its output) without losing the others. Each part's JSON lands in --out-dir; the merged document
is --out-dir/gpu.json (copied to bench/results/gpu.json with the figures reported in docs/benchmarks.md).

    python bench/gpu.py --parts env,tests,step,doctor --out-dir $OUT
    python bench/gpu.py --parts overlap,convergence --convergence-steps 300 --out-dir $OUT
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PY = sys.executable
GPU_TESTS = ["tests/gpu", "tests/peer/test_peer_cuda.py", "tests/peer/test_daemon_trainer.py"]
# The DisTrO report's 1.2B at its sequence length; 16 sequences a step in micro-batches of 4.
STEP_SHAPE = {"preset": "1.2b", "batch_size": 16, "seq_len": 2048, "grad_accum": 4}
PARTS = ("env", "tests", "step", "doctor", "overlap", "convergence")


def _run(argv: list[str], limit: float, env: dict[str, str] | None = None) -> dict[str, Any]:
    """The end of the output is kept ("tail"); "output" holds all of it for the caller to parse and drop."""
    start = time.perf_counter()
    try:
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=limit,
                              env={**os.environ, **(env or {})}, check=False)
        rc, out = done.returncode, done.stdout + done.stderr
    except FileNotFoundError as exc:
        rc, out = 127, str(exc)
    except subprocess.TimeoutExpired as exc:
        rc = 124
        raw = exc.stdout or b""
        out = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
    return {"argv": argv, "rc": rc, "seconds": round(time.perf_counter() - start, 1), "tail": out[-3000:],
            "output": out}


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def part_env(args: argparse.Namespace) -> dict[str, Any]:
    smi = _run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version,clocks.max.sm",
                "--format=csv,noheader"], 30)
    probe = ("import json, torch; p = torch.cuda.get_device_properties(0); print(json.dumps({'torch': "
             "torch.__version__, 'cuda': torch.version.cuda, 'name': p.name, 'total_memory': p.total_memory, "
             "'multiprocessors': p.multi_processor_count, 'capability': "
             "list(torch.cuda.get_device_capability()), 'host_cpus': __import__('os').cpu_count()}))")
    info = _run([PY, "-c", probe], 120)
    doc: dict[str, Any] = {"nvidia_smi": smi["tail"].strip(), "rc": info["rc"]}
    try:
        doc.update(json.loads(info["tail"].strip().splitlines()[-1]))
    except (ValueError, IndexError):
        doc["error"] = info["tail"]
    return doc


def part_tests(args: argparse.Namespace) -> dict[str, Any]:
    junit = args.out_dir / "gpu_tests.xml"
    run = _run([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=-ra",
                f"--junitxml={junit}", *GPU_TESTS], args.limit)
    last = [line for line in run["tail"].splitlines() if " in " in line and ("passed" in line or "failed"
                                                                             in line)]
    return {**run, "summary": last[-1] if last else None}


def part_step(args: argparse.Namespace) -> dict[str, Any]:
    out = args.out_dir / "gpu_step.json"
    s = STEP_SHAPE
    run = _run([PY, str(BENCH / "gpu_step.py"), "--preset", str(s["preset"]), "--batch-size",
                str(s["batch_size"]), "--seq-len", str(s["seq_len"]), "--grad-accum", str(s["grad_accum"]),
                "--steps", str(args.step_steps), "--out", str(out)], args.limit)
    return {**run, "result": _json(out)}


def part_doctor(args: argparse.Namespace) -> dict[str, Any]:
    s = STEP_SHAPE
    run = _run([PY, "-m", "distro_node.node.cli.main", "doctor", "--json", "--preset", str(s["preset"]),
                "--device", "cuda", "--batch-size", str(s["batch_size"]), "--seq-len", str(s["seq_len"]),
                "--listen", "/ip4/127.0.0.1/tcp/0"], args.limit,
               env={"DISTRO_NODE_RUN__GRAD_ACCUM": str(s["grad_accum"])})
    out = run["output"]
    try:
        report = json.loads(out[out.index("{"):])
    except ValueError:
        report = None
    return {**run, "report": report}


def part_overlap(args: argparse.Namespace) -> dict[str, Any]:
    out = args.out_dir / "gpu_overlap.json"
    run = _run([PY, str(BENCH / "overlap.py"), "--peers", str(args.overlap_peers), "--preset", "20m",
                "--batch-size", "8", "--seq-len", "512", "--steps", "14", "--warmup", "4", "--device", "cuda",
                "--wall", str(args.limit / 3.2), "--out", str(out)], args.limit)
    return {**run, "result": _json(out)}


def runs_from_log(tail: str) -> list[dict[str, Any]]:
    """The finished runs convergence.py printed (``label lr X seed N: eval L (S s)``): kept when the part
    runs out of time before the JSON is written, which happens after every run has ended."""
    rows = []
    for line in tail.splitlines():
        m = re.match(r"\s*(\S+) lr (\S+)\s+seed (\d+): eval (\S+) \((\d+) s\)", line)
        if m:
            rows.append({"label": m[1], "lr": float(m[2]), "seed": int(m[3]), "final_eval_loss": float(m[4]),
                         "seconds": int(m[5])})
    return rows


def part_convergence(args: argparse.Namespace) -> dict[str, Any]:
    out = args.out_dir / "gpu_convergence.json"
    run = _run([PY, str(BENCH / "convergence.py"), "--device", "cuda", "--preset", "20m", "--only",
                "adamw,distro-sign", "--steps", str(args.convergence_steps), "--peers", "4",
                "--batch-size", "8", "--seq-len", "256", "--seeds", "2", "--together", "--workers", "8",
                "--threads", "2", "--no-scoring",
                "--grid", f"adamw={args.adamw_lrs}", "--grid", f"distro-sign={args.distro_lrs}",
                "--out", str(out)], args.limit)
    return {**run, "result": _json(out), "runs_from_log": runs_from_log(run["output"])}


RUNNERS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "env": part_env, "tests": part_tests, "step": part_step, "doctor": part_doctor, "overlap": part_overlap,
    "convergence": part_convergence,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, in order ({','.join(PARTS)})")
    ap.add_argument("--out-dir", type=Path, required=True)
    ap.add_argument("--limit", type=float, default=240.0, help="seconds each part may run (default 240)")
    ap.add_argument("--step-steps", type=int, default=3, help="timed 1.2B steps (default 3)")
    ap.add_argument("--overlap-peers", type=int, default=4)
    # 125 steps x 4 peers x 8 x 256 tokens: the tiny CPU run's 1.02M tokens (250 x 8 peers x 8 x 64).
    ap.add_argument("--convergence-steps", type=int, default=125)
    ap.add_argument("--adamw-lrs", default="1e-3,3e-3")
    ap.add_argument("--distro-lrs", default="3e-3,6e-3")
    args = ap.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    unknown = [p for p in parts if p not in RUNNERS]
    if unknown:
        ap.error(f"--parts: unknown {unknown}; choose from {', '.join(PARTS)}")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    merged_path = args.out_dir / "gpu.json"
    merged: dict[str, Any] = _json(merged_path) or {"bench": "gpu"}
    for name in parts:
        print(f"== {name}", flush=True)
        merged[name] = RUNNERS[name](args)
        merged[name].pop("output", None)
        merged_path.write_text(json.dumps(merged, indent=1, default=str) + "\n")
        print(f"   rc {merged[name].get('rc')} in {merged[name].get('seconds')} s", flush=True)
    for name in parts:
        tail = str(merged[name].get("tail", "")).strip().splitlines()[-6:]
        print(f"-- {name}: " + " | ".join(tail))
    return 0


if __name__ == "__main__":
    sys.exit(main())

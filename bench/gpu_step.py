"""One peer's real training steps on its device, phase by phase: what a volunteer's GPU and host do per step.

The default shape is the DisTrO report's 1.2B model at its 2048-token sequences, bf16 autocast on cuda,
the step's batch cut into micro-batches (gradient accumulation). Each step goes through the daemon's own
Trainer (node/peer/trainer.py), so the CPU master copy is on the path: the master weights are copied into the
device's working copy, forward+backward runs there, the gradient is copied back, and prepare (DCT, top-k,
error feedback), encode, decode, apply (aggregate and update) and the weights hash run on the host. Each part
is timed on its own (device work waited for) and the peak device memory of the step is read.

Also measured: the peak device memory of one forward+backward for each micro-batch size (what fits a 24 GB
card), and the real encoded payload against bench/payload.py's computed size. Writes
bench/results/gpu_step.json (bench/gpu.py folds it into gpu.json).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from _common import RESULTS_DIR, write_json
from distro_node.compression.payload import Header
from distro_node.compression.wire import encode
from distro_node.node.data.sampling import sample_batch
from distro_node.node.device import autocast, select_device, select_precision, synchronize
from distro_node.node.model import next_token_loss, param_count
from distro_node.node.peer.local import LocalSettings
from distro_node.node.peer.manifest import RunManifest
from distro_node.node.peer.trainer import Trainer

GIB = 1024**3


def _timed(device: str, fn: Any, *args: Any) -> tuple[Any, float]:
    synchronize(device)
    start = time.perf_counter()
    out = fn(*args)
    synchronize(device)
    return out, time.perf_counter() - start


def micro_batch_memory(trainer: Trainer, sizes: list[int]) -> list[dict[str, Any]]:
    """Peak device bytes of one forward+backward of ``size`` sequences on the working copy (weights and
    gradients included), or the out-of-memory error's first line."""
    rows: list[dict[str, Any]] = []
    m = trainer.manifest
    work = trainer.work
    for size in sizes:
        work.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        inputs, targets = sample_batch(trainer.source, run_id=trainer.run_id, step=0, peer=trainer.peer_id,
                                       batch_size=size, seq_len=m.seq_len)
        try:
            start = time.perf_counter()
            with autocast(trainer.device.type, trainer.local.precision)():
                loss = next_token_loss(work(inputs.to(trainer.device)), targets.to(trainer.device))
            loss.backward()
            del loss
            synchronize(trainer.device.type)
            rows.append({"micro_batch": size, "tokens": size * m.seq_len,
                         "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                         "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
                         "forward_backward_s": time.perf_counter() - start})
        except torch.cuda.OutOfMemoryError as exc:
            rows.append({"micro_batch": size, "oom": str(exc).splitlines()[0]})
        finally:
            work.zero_grad(set_to_none=True)
    return rows


def one_step(trainer: Trainer, step: int, apply_peers: int) -> dict[str, Any]:
    """Every part of one step, in the daemon's order, each timed on its own."""
    device = trainer.device.type
    m = trainer.manifest
    on_cuda = device == "cuda"
    if on_cuda:
        torch.cuda.reset_peak_memory_stats()
    strategy = trainer.strategy
    start = time.perf_counter()
    strategy.pre_forward(step)
    trainer.model.zero_grad(set_to_none=True)
    inputs, targets = sample_batch(trainer.source, run_id=trainer.run_id, step=step, peer=trainer.peer_id,
                                   batch_size=m.batch_size, seq_len=m.seq_len)
    loss = trainer.forward_backward(inputs, targets)
    strategy.post_backward(step)
    row: dict[str, Any] = {"step": step, "loss": loss, **trainer.last_phases}
    payload, row["prepare"] = _timed(device, strategy.prepare, step)
    header = Header.of(trainer.spec, trainer.run_id, step, trainer.peer_id)
    data, row["encode"] = _timed(device, encode, header, payload, trainer.spec)
    decoded, row["decode"] = _timed(device, trainer.decode, data, trainer.peer_id, step)
    # The same decoded payload under several peer ids: the aggregation cost of a step with that many.
    included = {trainer.peer_id: decoded} | {f"peer-{i}": decoded for i in range(1, apply_peers)}
    _, row["apply"] = _timed(device, strategy.apply, step, included)
    _, row["hash"] = _timed(device, trainer.refresh_hash)
    row["step_total"] = time.perf_counter() - start
    row["payload_bytes"] = len(data)
    if on_cuda:
        row["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
        row["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
    row["host_max_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="1.2b")
    ap.add_argument("--batch-size", type=int, default=16, help="sequences per peer step (default 16)")
    ap.add_argument("--seq-len", type=int, default=2048, help="tokens per sequence (default 2048)")
    ap.add_argument("--grad-accum", type=int, default=4, help="micro-batches per step (default 4)")
    ap.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up step (default 3)")
    ap.add_argument("--apply-peers", type=int, default=4, help="payloads aggregated per apply (default 4)")
    ap.add_argument("--micro-sweep", default="1,2,4,8",
                    help="micro-batch sizes whose peak device memory is read (cuda only; default 1,2,4,8)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR / "gpu_step.json")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.apply_peers < 1:
        ap.error("--steps and --apply-peers must be >= 1")
    device = select_device(args.device)
    local = LocalSettings(device=device, precision=select_precision(args.precision, device),
                          grad_accum=args.grad_accum)
    manifest = RunManifest(preset=args.preset, batch_size=args.batch_size, seq_len=args.seq_len,
                           nonce="gpu-step")
    t0 = time.perf_counter()
    trainer = Trainer(manifest, "peer-0", local)
    setup_s = time.perf_counter() - t0
    print(f"{args.preset} on {device} ({local.precision}): trainer built in {setup_s:.1f} s", flush=True)
    steps = []
    for s in range(args.steps + 1):
        row = one_step(trainer, s, args.apply_peers)
        steps.append(row)
        times = " ".join(f"{k} {v:.3f}" for k, v in row.items() if isinstance(v, float))
        print(f"  step {times}", flush=True)
        write_json(args.out, {"bench": "gpu_step", "partial": True, "steps": steps})  # kept if cut off
    timed = steps[1:]
    phases = [k for k, v in timed[0].items() if isinstance(v, float) and k != "loss"]
    doc: dict[str, Any] = {
        "bench": "gpu_step",
        "preset": args.preset, "params": param_count(manifest.model_config()),
        "device": device, "device_name": torch.cuda.get_device_name(0) if device == "cuda" else device,
        "torch": torch.__version__, "precision": local.precision,
        "batch_size": args.batch_size, "seq_len": args.seq_len, "grad_accum": args.grad_accum,
        "micro_batch": trainer.micro_batch, "tokens_per_step": args.batch_size * args.seq_len,
        "apply_peers": args.apply_peers, "host_threads": torch.get_num_threads(),
        "trainer_setup_s": setup_s,
        "median_s": {k: statistics.median(float(r[k]) for r in timed) for k in phases},
        "payload_bytes": timed[-1]["payload_bytes"],
        "steps": steps,
    }
    doc["cpu_master_copy_s"] = doc["median_s"].get("copy_in", 0.0) + doc["median_s"].get("copy_out", 0.0)
    if device == "cuda":
        doc["peak_allocated_bytes"] = max(int(r["peak_allocated_bytes"]) for r in timed)
        sizes = [int(x) for x in args.micro_sweep.split(",") if x]
        doc["micro_batch_memory"] = micro_batch_memory(trainer, sizes)
        doc["device_total_bytes"] = torch.cuda.get_device_properties(0).total_memory
    write_json(args.out, doc)
    med = doc["median_s"]
    print("median " + " ".join(f"{k} {v:.3f}s" for k, v in med.items()))
    peak = doc.get("peak_allocated_bytes", 0) / GIB
    print(f"payload {doc['payload_bytes']} bytes; peak device {peak:.2f} GiB -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

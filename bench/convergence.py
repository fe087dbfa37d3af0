"""Does DisTrO train as well as AdamW with a dense all-reduce, at a fraction of the bytes?

8 simulated peers (codec on the path), the embedded Markov data with its known loss floor, the same model
init, data and token budget for every strategy. Each strategy gets its own learning rate from a small sweep
(seed 0, recorded in the JSON); the chosen rate is then rerun on further seeds. Reported per strategy: final
held-out loss (mean and per seed), loss above the floor, bytes one peer sends per step, and the reduction
against a dense bf16 gradient. Writes bench/results/convergence.json and convergence.png.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import torch
from _common import RESULTS_DIR, write_json
from distro_node.node.plots import plot_losses
from distro_node.node.sim.experiment import ExperimentConfig, run_experiment

# label -> (strategy, settings without the schedule, learning-rate grid)
STRATEGIES: dict[str, tuple[str, dict[str, Any], tuple[float, ...]]] = {
    "adamw": ("adamw", {}, (3e-3, 6e-3, 1.2e-2, 2.4e-2)),
    # DistroConfig() defaults: chunk 64, k=4, 1-bit values, enum indices (the 1.2B setting, 1.77 MB/step).
    "distro-sign": ("distro", {}, (4e-3, 8e-3, 1.6e-2, 3.2e-2)),
    "distro-adam": ("distro", {"update": "adam"}, (2e-3, 4e-3, 8e-3)),
    # Best variant of a quick sweep that still sends >= 500x less than dense bf16 on this small model.
    "distro-adam-c32k2": (
        "distro",
        {"update": "adam", "chunk": 32, "topk": 2},
        (4e-3, 8e-3, 1.6e-2, 3.2e-2),
    ),
    "diloco": ("diloco", {"inner_steps": 16}, (5e-3, 1e-2, 2e-2)),
    "cocktail": ("cocktail", {}, (1e-2, 3e-2, 1e-1)),
}


def _config(label: str, lr: float, seed: int, args: argparse.Namespace) -> ExperimentConfig:
    strategy, settings, _ = STRATEGIES[label]
    warmup = max(args.steps // 10, 1)
    schedule = {"kind": "cosine", "lr": lr, "warmup_steps": warmup, "total_steps": args.steps}
    return ExperimentConfig(
        preset=args.preset,
        strategy=strategy,
        settings={**settings, "schedule": schedule},
        peers=args.peers,
        steps=args.steps,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        seed=seed,
        eval_batches=args.eval_batches,
        eval_every=max(args.steps // 10, 1),
        device=args.device,
        precision=args.precision,
        exclusion=not args.no_scoring,
    )


def _run(job: tuple[str, float, int, argparse.Namespace]) -> dict[str, Any]:
    label, lr, seed, args = job
    torch.set_num_threads(args.threads)  # default one run per core: small models gain little from threads
    result = run_experiment(_config(label, lr, seed, args)).to_dict()
    result.update(label=label, lr=lr, seed=seed)
    print(
        f"  {label:>12} lr {lr:<7g} seed {seed}: eval {result['final_eval_loss']:.4f} "
        f"({result['seconds']:.0f} s)",
        flush=True,
    )
    return result


def _grids(specs: list[str], labels: list[str]) -> dict[str, tuple[float, ...]]:
    """``LABEL=LR,LR`` options as a grid per label."""
    out: dict[str, tuple[float, ...]] = {}
    for spec in specs:
        label, _, rates = spec.partition("=")
        if label not in labels:
            raise ValueError(f"{label!r} is not among the strategies run ({', '.join(labels)})")
        try:
            out[label] = tuple(float(r) for r in rates.split(","))
        except ValueError:
            raise ValueError(f"{spec!r}: rates must be numbers, e.g. adamw=1e-3,3e-3") from None
        if not out[label] or any(not r > 0 for r in out[label]):
            raise ValueError(f"{spec!r}: rates must be positive")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="tiny", help="model preset (default tiny)")
    parser.add_argument("--peers", type=int, default=8, help="simulated peers (default 8)")
    parser.add_argument("--steps", type=int, default=250, help="steps per run (default 250)")
    parser.add_argument("--batch-size", type=int, default=8, help="sequences per peer per step (default 8)")
    parser.add_argument("--seq-len", type=int, default=64, help="tokens per sequence (default 64)")
    parser.add_argument("--eval-batches", type=int, default=16, help="held-out batches (default 16)")
    parser.add_argument("--seeds", type=int, default=2, help="seeds for the chosen rate (default 2)")
    parser.add_argument("--workers", type=int, default=2, help="parallel runs (default 2: one per core)")
    parser.add_argument("--only", default=None, help="comma-separated subset of " + ",".join(STRATEGIES))
    parser.add_argument("--device", default="cpu", help="where the simulated peers train: cpu | cuda | mps")
    parser.add_argument("--precision", default="auto", help="auto (bf16 autocast on cuda) | fp32 | bf16")
    parser.add_argument("--no-scoring", action="store_true",
                        help="skip per-peer scoring (all peers are honest here; it costs a dense baseline "
                             "a leave-one-out pass over every payload each step)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run (default 1)")
    parser.add_argument("--grid", action="append", default=[], metavar="LABEL=LR,LR",
                        help="learning rates to sweep for LABEL instead of its built-in grid; repeatable")
    parser.add_argument("--together", action="store_true",
                        help="run every seed of every rate at once (the best rate is still chosen on seed "
                             "0): one round of runs instead of two, for a device with room for all of them")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "convergence.json", help="JSON path")
    args = parser.parse_args(argv)
    labels = args.only.split(",") if args.only else list(STRATEGIES)
    unknown = [x for x in labels if x not in STRATEGIES]
    if unknown:
        parser.error(f"--only: unknown strategies {unknown}; choose from {list(STRATEGIES)}")
    try:
        grids = {label: STRATEGIES[label][2] for label in labels} | _grids(args.grid, labels)
    except ValueError as exc:
        parser.error(f"--grid: {exc}")

    start = time.perf_counter()
    sweep_jobs = [(label, lr, 0, args) for label in labels for lr in grids[label]]
    print(f"sweep: {len(sweep_jobs)} runs, {args.peers} peers, {args.steps} steps", flush=True)
    # A CUDA context does not survive fork: children on a GPU start fresh interpreters.
    context = multiprocessing.get_context("spawn" if args.device == "cuda" else None)
    with ProcessPoolExecutor(max_workers=args.workers, mp_context=context) as pool:
        seeds = range(1, args.seeds)
        ahead = [(label, lr, s, args) for label in labels for lr in grids[label] for s in seeds]
        pending = [pool.submit(_run, job) for job in ahead] if args.together else []
        sweep = list(pool.map(_run, sweep_jobs))
        best = {
            label: min((r for r in sweep if r["label"] == label), key=lambda r: r["final_eval_loss"])
            for label in labels
        }
        print("seeds: " + ", ".join(f"{k} lr {v['lr']:g}" for k, v in best.items()), flush=True)
        if args.together:
            others = [f.result() for f in pending]
            extra = [r for r in others if r["lr"] == best[r["label"]]["lr"]]
        else:
            seed_jobs = [(label, best[label]["lr"], s, args) for label in labels for s in seeds]
            others, extra = [], list(pool.map(_run, seed_jobs))

    summary: dict[str, Any] = {}
    for label in labels:
        runs = [best[label]] + [r for r in extra if r["label"] == label]
        losses = [r["final_eval_loss"] for r in runs]
        floor = runs[0]["loss_floor"]
        summary[label] = {
            "lr": best[label]["lr"],
            "settings": runs[0]["config"]["settings"],
            "final_eval_loss_mean": statistics.fmean(losses),
            "final_eval_loss_per_seed": losses,
            "loss_above_floor_mean": statistics.fmean(losses) - floor,
            "payload_bytes_per_step": runs[0]["payload_bytes_per_step"],
            "reduction_vs_dense_bf16": runs[0]["reduction_vs_dense_bf16"],
            "replicas_identical": all(r["replicas_identical"] for r in runs),
        }
    if "adamw" in summary:
        ref = summary["adamw"]
        for row in summary.values():
            row["loss_ratio_vs_adamw"] = row["final_eval_loss_mean"] / ref["final_eval_loss_mean"]
            row["above_floor_ratio_vs_adamw"] = row["loss_above_floor_mean"] / ref["loss_above_floor_mean"]

    floor = sweep[0]["loss_floor"]
    curves = {
        f"{label} (lr {best[label]['lr']:g})": [
            (int(h["step"]), h["eval_loss"]) for h in best[label]["history"] if "eval_loss" in h
        ]
        for label in labels
    }
    png = plot_losses(
        curves,
        args.out.with_suffix(".png"),
        title=f"{args.peers} peers, preset {args.preset} on {args.device}, held-out loss (seed 0)",
        floor=floor,
    )
    for r in sweep + others + extra:
        r["history"] = [h for h in r["history"] if "eval_loss" in h]  # keep the JSON readable
    doc = {
        "settings": {k: v for k, v in vars(args).items() if k != "out"} | {"out": str(args.out)},
        "loss_floor": floor,
        "summary": summary,
        "sweep": sweep,
        "extra_seeds": extra,
        "other_seed_runs": [r for r in others if r not in extra],
        "plot": str(png),
        "seconds": time.perf_counter() - start,
    }
    path = write_json(args.out, doc)
    print(f"{'strategy':>12}  {'lr':>7}  {'eval loss':>9}  {'vs adamw':>8}  {'bytes/step':>10}  reduction")
    for label, row in summary.items():
        ratio = row.get("loss_ratio_vs_adamw", float("nan"))
        print(
            f"{label:>12}  {row['lr']:>7g}  {row['final_eval_loss_mean']:>9.4f}  {ratio:>8.3f}  "
            f"{row['payload_bytes_per_step']:>10.0f}  {row['reduction_vs_dense_bf16']:,.0f}x"
        )
    print(f"wrote {path} and {png} in {doc['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Bounded inclusion: does a swarm that aggregates at most K payloads a step train as well as one that
aggregates all of them, and what does a peer fetch?

N simulated peers (codec on the path, node/sim/), the same model init, tokens and schedule for every K (K
is not part of the simulator's run id, so each peer draws the same batches). The included payloads are
chosen by the round machine's own rule (protocol/consensus/inclusion_bound.py). Reported per K: final
held-out loss and its ratio to K = all; the longest a peer went between two lists including it, against
ceil(N / K) + 1; and the payload bytes one peer fetches a step, against K x payload. Writes
bench/results/bounded_inclusion.json.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import torch
from _common import RESULTS_DIR, write_json
from distro_node.node.sim.experiment import ExperimentConfig, run_experiment


def _config(k: int, args: argparse.Namespace) -> ExperimentConfig:
    warmup = max(args.steps // 10, 1)
    schedule = {"kind": "cosine", "lr": args.lr, "warmup_steps": warmup, "total_steps": args.steps}
    settings: dict[str, Any] = {"schedule": schedule}
    if args.overlapped:
        settings["overlapped"] = True
    if args.topk:
        settings["topk"] = args.topk
    return ExperimentConfig(
        preset=args.preset, strategy="distro", settings=settings, peers=args.peers, steps=args.steps,
        batch_size=args.batch_size, seq_len=args.seq_len, seed=args.seed, eval_batches=args.eval_batches,
        eval_every=max(args.steps // 10, 1), exclusion=False, max_included=k, device=args.device,
    )


def _run(job: tuple[int, argparse.Namespace]) -> dict[str, Any]:
    k, args = job
    torch.set_num_threads(args.threads)
    result = run_experiment(_config(k, args)).to_dict()
    result["history"] = [h for h in result["history"] if "eval_loss" in h]  # keep the JSON readable
    print(f"  K={k or 'all'}: eval {result['final_eval_loss']:.4f}, gap {result['max_inclusion_gap']}, "
          f"fetched {result['fetched_bytes_per_step']:.0f} B/step ({result['seconds']:.0f} s)", flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ks", default="0,8", help="bounds to run, 0 meaning all (default 0,8)")
    parser.add_argument("--preset", default="tiny", help="model preset (default tiny)")
    parser.add_argument("--peers", type=int, default=32, help="simulated peers (default 32)")
    parser.add_argument("--steps", type=int, default=150, help="steps per run (default 150)")
    parser.add_argument("--batch-size", type=int, default=8, help="sequences per peer per step (default 8)")
    parser.add_argument("--seq-len", type=int, default=64, help="tokens per sequence (default 64)")
    parser.add_argument("--lr", type=float, default=8e-3,
                        help="peak lr, cosine with 10%% warmup (default 8e-3: convergence.json's best for "
                             "DisTrO's default)")
    parser.add_argument("--topk", type=int, default=0,
                        help="DisTrO coefficients kept per chunk (default 0: the strategy's own default)")
    parser.add_argument("--overlapped", action="store_true", help="DisTrO's overlapped order")
    parser.add_argument("--seed", type=int, default=0, help="model init and run seed (default 0)")
    parser.add_argument("--eval-batches", type=int, default=16, help="held-out batches (default 16)")
    parser.add_argument("--workers", type=int, default=2, help="parallel runs (default 2: one per core)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run (default 1)")
    parser.add_argument("--device", default="cpu", help="where the simulated peers train: cpu | cuda")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "bounded_inclusion.json", help="JSON path")
    args = parser.parse_args(argv)
    try:
        ks = [int(k) for k in args.ks.split(",")]
    except ValueError:
        parser.error(f"--ks: expected integers, got {args.ks!r}")
    if 0 not in ks:
        ks = [0, *ks]  # the reference every ratio is taken against
    start = time.perf_counter()
    print(f"{args.peers} peers, preset {args.preset}, {args.steps} steps, K in {ks}", flush=True)
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        runs = dict(zip(ks, pool.map(_run, [(k, args) for k in ks]), strict=True))
    ref = runs[0]
    summary: dict[str, Any] = {}
    for k, r in runs.items():
        payload = r["payload_bytes_per_step"]
        bound = math.ceil(args.peers / k) + 1 if k else 1
        budget = 1.5 * min(k or args.peers, args.peers) * payload
        summary[str(k)] = {
            "final_eval_loss": r["final_eval_loss"],
            "loss_ratio_vs_all": r["final_eval_loss"] / ref["final_eval_loss"],
            "max_inclusion_gap": r["max_inclusion_gap"],
            "gap_bound": bound,
            "payload_bytes_per_step": payload,
            "fetched_bytes_per_step": r["fetched_bytes_per_step"],
            "fetched_over_k_payloads": r["fetched_bytes_per_step"] / (budget / 1.5),
            "fetched_vs_all": r["fetched_bytes_per_step"] / ref["fetched_bytes_per_step"],
            "replicas_identical": r["replicas_identical"],
            "acceptance": {
                "loss_ratio_le_1_02": r["final_eval_loss"] / ref["final_eval_loss"] <= 1.02,
                "gap_le_ceil_n_over_k_plus_1": r["max_inclusion_gap"] <= bound,
                "fetched_le_1_5_k_payload": r["fetched_bytes_per_step"] <= budget,
            },
        }
    doc = {"settings": {**vars(args), "out": str(args.out)}, "summary": summary,
           "runs": [runs[k] for k in ks], "seconds": time.perf_counter() - start}
    path = write_json(args.out, doc)
    print(f"{'K':>4}  {'eval loss':>9}  {'vs all':>7}  {'gap':>3}/{'bound':<5}  {'fetched B/step':>14}  "
          f"{'/K payloads':>11}")
    for label, row in summary.items():
        print(f"{label:>4}  {row['final_eval_loss']:>9.4f}  {row['loss_ratio_vs_all']:>7.4f}  "
              f"{row['max_inclusion_gap']:>3}/{row['gap_bound']:<5}  {row['fetched_bytes_per_step']:>14.0f}  "
              f"{row['fetched_over_k_payloads']:>11.3f}")
    print(f"wrote {path} in {doc['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

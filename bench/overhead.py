"""Compute overhead of DisTrO against the forward and backward pass it rides on.

Answers: does compressing (prepare) and aggregating eight peers' payloads (apply) cost little next to the
gradient computation itself? Same model, same batch, one process; medians over repeats. prepare and apply
cost the same whatever the batch, while forward and backward grow with the tokens per step, so the ratio is
reported for several batch sizes (the report's runs used ~131k tokens per GPU per step).
Also times the apply of a peer that a bounded list left out (it clears what the others applied from its
momentum: optimizer/distro.py, ``withheld``). Writes bench/results/overhead.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from _common import RESULTS_DIR, write_json
from distro_node.compression.payload import Header
from distro_node.compression.wire import decode, encode
from distro_node.node.data.embedded import markov_source
from distro_node.node.data.sampling import sample_batch
from distro_node.node.model import Llama, next_token_loss, param_count
from distro_node.node.presets import preset
from distro_node.optimizer.config import DistroConfig
from distro_node.optimizer.distro import DisTrO


def _median_seconds(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(preset_name: str, peers: int, batch: int, repeats: int, threads: int) -> dict[str, Any]:
    torch.set_num_threads(threads)
    cfg = preset(preset_name)
    source = markov_source(0)
    run_id = b"\x01" * 32
    models = [Llama(cfg, seed=0) for _ in range(peers)]
    strategies = [DisTrO(m, DistroConfig()) for m in models]
    spec = strategies[0].spec()
    inputs, targets = sample_batch(
        source, run_id=run_id, step=0, peer="p0", batch_size=batch, seq_len=cfg.seq_len
    )

    def fwd_bwd(model: torch.nn.Module) -> None:
        model.zero_grad(set_to_none=True)
        next_token_loss(model(inputs), targets).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)

    for m in models:  # every peer holds a gradient so every peer has a payload to send
        fwd_bwd(m)
    fwd_bwd_s = _median_seconds(lambda: fwd_bwd(models[0]), repeats)

    step = 0
    prepare_s: list[float] = []
    codec_s: list[float] = []
    apply_s: list[float] = []
    left_out_s: list[float] = []
    for step in range(repeats):
        blobs = {}
        t0 = time.perf_counter()
        payload = strategies[0].prepare(step)
        prepare_s.append(time.perf_counter() - t0)
        for i, s in enumerate(strategies):
            p = payload if i == 0 else s.prepare(step)
            header = Header.of(spec, run_id, step, f"p{i}")
            blobs[f"p{i}"] = encode(header, p, spec)
        t0 = time.perf_counter()
        decoded = {pid: decode(b, spec, run_id=run_id, sender=pid, step=step)[1] for pid, b in blobs.items()}
        codec_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        strategies[0].apply(step, decoded)
        apply_s.append(time.perf_counter() - t0)
        # Peer 1 is left out of this step's list: told first, it also clears what the others applied.
        others = {pid: p for pid, p in decoded.items() if pid != "p1"}
        t0 = time.perf_counter()
        strategies[1].withheld(step)
        strategies[1].apply(step, others)
        left_out_s.append(time.perf_counter() - t0)
        for s in strategies[2:]:
            s.apply(step, decoded)
    prep, app, dec = statistics.median(prepare_s), statistics.median(apply_s), statistics.median(codec_s)
    n = param_count(cfg)
    return {
        "preset": preset_name,
        "params": n,
        "peers": peers,
        "batch": [batch, cfg.seq_len],
        "tokens_per_peer_step": batch * cfg.seq_len,
        "threads": threads,
        "repeats": repeats,
        "forward_backward_s": fwd_bwd_s,
        "prepare_s": prep,
        "apply_s": app,
        "apply_left_out_s": statistics.median(left_out_s),  # peers - 1 payloads, none of them its own
        "decode_all_payloads_s": dec,
        "prepare_plus_apply_s": prep + app,
        "prepare_plus_apply_fraction": (prep + app) / fwd_bwd_s,
        "with_decode_fraction": (prep + app + dec) / fwd_bwd_s,
        "compress_params_per_s": n / prep,
        "target_fraction": 0.10,
        "meets_target": (prep + app) / fwd_bwd_s <= 0.10,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--presets", default="small", help="comma-separated presets (default: small)")
    parser.add_argument("--peers", type=int, default=8, help="payloads aggregated per apply (default 8)")
    parser.add_argument(
        "--batches",
        default="8,32",
        help="comma-separated sequences per peer per step (default 8,32: 1k and 4k tokens of seq 128)",
    )
    parser.add_argument("--repeats", type=int, default=7, help="repeats per measurement (default 7)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2: the CI machine)")
    parser.add_argument("--out", type=Path, default=None, help="JSON path (default: bench/results/)")
    args = parser.parse_args(argv)
    rows = [
        measure(p, args.peers, int(b), args.repeats, args.threads)
        for p in args.presets.split(",")
        for b in args.batches.split(",")
    ]
    for r in rows:
        pct = 100 * r["prepare_plus_apply_fraction"]
        print(
            f"{r['preset']:>6} batch {r['batch'][0]:>3}x{r['batch'][1]}: "
            f"fwd+bwd {r['forward_backward_s'] * 1e3:.1f} ms, "
            f"prepare {r['prepare_s'] * 1e3:.1f} ms, apply({r['peers']}) {r['apply_s'] * 1e3:.1f} ms "
            f"(left out {r['apply_left_out_s'] * 1e3:.1f} ms) "
            f"-> {pct:.1f}% (target <= 10%); decode {r['decode_all_payloads_s'] * 1e3:.1f} ms; "
            f"compress {r['compress_params_per_s'] / 1e6:.1f} M params/s"
        )
    path = write_json(args.out or RESULTS_DIR / "overhead.json", {"results": rows})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

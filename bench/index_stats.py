"""Which DCT coefficients DisTrO selects on real momentum, and what a coder that knew it would save.

The default index codec (``enum``) spends log2 C(4096, 4) / 4 = 10.9 bits (44 bits per chunk) on each selected
position of a 64 x 64 chunk: the bound for positions drawn uniformly. If momentum's top-k concentrates on
some frequencies (low ones, by the DCT's energy compaction), a coder every peer derives identically (a table
fixed in the manifest, or one adapted from the swarm's decided payloads) could spend less. This measures, on
the simulated swarm (node/sim/, ``small`` preset by default, DisTrO defaults), over the last steps of a run:

- the empirical entropy of the selected positions (bits per index, positions treated as independent), per
  tensor kind and overall; an ideal coder with a table spends its cross-entropy less log2(k!)/k (a chunk's
  positions are a set, coded in one canonical order);
- the cross-entropy under a table measured on *another seed's* run (what a table fixed in advance would cost
  on data it was not fitted to) and under a table of the first half of the steps applied to the second half
  (an adaptive coder that lags);
- sign agreement: for a position several peers selected in the same chunk at the same step, how often
  their signs agree (1-bit values), and how often peers select the same positions at all.

Writes bench/results/index_stats.json. Run: ``.venv/bin/python bench/index_stats.py``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from _common import RESULTS_DIR, write_json
from distro_node.compression.payload import Payload
from distro_node.node.sim.experiment import ExperimentConfig, build_swarm

BLOCK = 64 * 64  # tensors chunked in 64 x 64 blocks only (vectors are chunked by 64 and few)
K = 4
ENUM_BITS = 44 / K  # the enum codec's bits per index at k = 4 of 4096 (whole bits per chunk)
# A chunk's k positions are a set: coding them in a canonical order saves log2(k!) bits per chunk against
# coding each position on its own, so a table's per-index cost is its cross-entropy less this.
SET_DISCOUNT = math.log2(math.factorial(K)) / K


def _kind(name: str) -> str:
    for part in ("attn", "mlp", "embed", "lm_head", "norm"):
        if part in name:
            return part
    return "other"


def collect(seed: int, args: argparse.Namespace) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Per tensor kind, counts of each position over the recorded steps (two halves); and sign stats."""
    cfg = ExperimentConfig(preset=args.preset, peers=args.peers, steps=args.steps, seed=seed,
                           data_seed=seed, batch_size=args.batch_size)
    swarm, _ = build_swarm(cfg)
    record_from = args.steps - args.record
    halves: dict[str, np.ndarray] = defaultdict(lambda: np.zeros((2, BLOCK), dtype=np.int64))
    same_pos = agree = pairs = picks = 0
    captured: dict[str, Payload] = {}
    layouts = swarm.peers[0].strategy._layouts  # type: ignore[attr-defined]
    full_blocks = {name for name, layout in layouts.items() if layout.block == (64, 64)}
    for peer in swarm.peers:
        original = peer.strategy.prepare

        def capture(step: int, _orig: Any = original, _id: str = peer.peer_id) -> Payload:
            payload: Payload = _orig(step)
            captured[_id] = payload
            return payload

        peer.strategy.prepare = capture  # type: ignore[method-assign]
    for step in range(args.steps):
        captured.clear()
        swarm.step()
        if (step + 1) % 25 == 0:
            print(f"[index_stats] seed {seed}: step {step + 1}/{args.steps}", flush=True)
        if step < record_from:
            continue
        half = 0 if step < record_from + args.record // 2 else 1
        by_tensor: dict[str, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
        for payload in captured.values():
            for name, entry in payload.tensors.items():
                if entry.indices is None or name not in full_blocks:
                    continue
                idx, val = entry.indices.numpy(), entry.values.numpy()
                by_tensor[name].append((idx, val))
                np.add.at(halves[_kind(name)][half], idx.ravel(), 1)
        for entries in by_tensor.values():
            for a in range(len(entries)):
                for b in range(a + 1, len(entries)):
                    (ia, va), (ib, vb) = entries[a], entries[b]
                    match = ia[:, :, None] == ib[:, None, :]  # (chunks, k, k)
                    same_pos += int(match.sum())
                    picks += ia.size
                    sa = np.sign(va)[:, :, None]
                    sb = np.sign(vb)[:, None, :]
                    agree += int((match & (sa == sb)).sum())
                    pairs += int(match.sum())
    signs = {"position_overlap": same_pos / picks if picks else 0.0,
             "sign_agreement_where_same": agree / pairs if pairs else float("nan")}
    return dict(halves), signs


def entropy_bits(counts: np.ndarray) -> float:
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log2(p)).sum())


def cross_entropy_bits(counts: np.ndarray, table: np.ndarray) -> float:
    """Bits per index coding ``counts`` with the table's frequencies (add-one smoothed)."""
    q = (table + 1) / (table + 1).sum()
    return float(-(counts * np.log2(q)).sum() / counts.sum())


def band_table(counts: np.ndarray, key: np.ndarray) -> np.ndarray:
    """``counts`` averaged over the positions sharing a ``key`` (a DCT band): a table of a few dozen numbers
    that could be fixed in the code, and that over-fits one run less than a count per position."""
    table = np.zeros(BLOCK, dtype=np.float64)
    for value in np.unique(key):
        members = key == value
        table[members] = counts[members].sum() / members.sum()
    return table


def uniform_entropy_bits(count: int) -> float:
    """In-sample entropy of ``count`` positions drawn uniformly (fixed seed): the estimator's bias."""
    rng = np.random.default_rng(0)
    return entropy_bits(np.bincount(rng.integers(0, BLOCK, count), minlength=BLOCK))


def payload_saving(bits_per_index: float) -> float:
    """Saving on the whole payload against enum: per index, its code plus one sign bit (the envelope's ~200
    bytes of 1.77 MB are left out)."""
    return 1 - (bits_per_index + 1) / (ENUM_BITS + 1)


def table_costs(
    recorded: np.ndarray, other: np.ndarray, by_kind: dict[str, Any]
) -> dict[str, float]:
    """What static tables would cost on the recorded selections, as coded bits per index (set discount
    taken off) and as the saving on the whole payload; the in-sample entropy bounds every static table that
    treats positions as independent, fitted or not."""
    row, col = np.divmod(np.arange(BLOCK), 64)
    tables = {
        "position_table_other_seed": other.astype(np.float64),
        "band_table_other_seed": band_table(other, row + col),  # 127 bands of equal frequency sum
        "row_col_table_other_seed": band_table(other, np.minimum(row, 2) * 3 + np.minimum(col, 2)),
    }
    out: dict[str, float] = {}
    for name, table in tables.items():
        coded = cross_entropy_bits(recorded, table) - SET_DISCOUNT
        out[f"{name}_coded_bits"] = round(coded, 3)
        out[f"{name}_saving"] = round(payload_saving(coded), 4)
    bound = entropy_bits(recorded) - SET_DISCOUNT
    out["in_sample_entropy_coded_bits"] = round(bound, 3)
    out["in_sample_entropy_saving_bound"] = round(payload_saving(bound), 4)
    # One table per tensor kind (attention, MLP, embedding...): the index-weighted mean of their entropies.
    n = sum(k["indices"] for k in by_kind.values())
    per_kind = sum(k["indices"] * k["entropy_bits"] for k in by_kind.values()) / n - SET_DISCOUNT
    out["in_sample_per_kind_entropy_coded_bits"] = round(per_kind, 3)
    out["in_sample_per_kind_entropy_saving_bound"] = round(payload_saving(per_kind), 4)
    # The same estimates on as many uniformly drawn positions: how far below 12 bits sampling alone puts them.
    out["uniform_same_count_entropy_bits"] = round(uniform_entropy_bits(int(recorded.sum())), 3)
    for name, kind in sorted(by_kind.items()):
        out[f"uniform_same_count_entropy_bits_{name}"] = round(uniform_entropy_bits(kind["indices"]), 3)
    # The cross-entropy a table needs for a 15% saving on the payload: 0.85 * 12 - 1 bits coded per index.
    out["cross_entropy_needed_for_15pct"] = round(0.85 * (ENUM_BITS + 1) - 1 + SET_DISCOUNT, 3)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--peers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--record", type=int, default=100, help="last steps whose selections are counted")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "index_stats.json")
    parser.add_argument(
        "--costs-from", type=Path, default=None,
        help="no simulation: add the static-table costs to the counts of an earlier run's JSON, into --out",
    )
    args = parser.parse_args(argv)
    if args.costs_from is not None:
        return add_costs(args.costs_from, args.out)
    if not 2 <= args.record <= args.steps:
        parser.error("need 2 <= --record <= --steps")
    t0 = time.monotonic()
    runs = {seed: collect(seed, args) for seed in (0, 1)}
    (halves, signs), (other, _) = runs[0], runs[1]
    kinds: dict[str, Any] = {}
    total = np.zeros(BLOCK, dtype=np.int64)
    other_total = np.zeros(BLOCK, dtype=np.int64)
    for kind, counts in sorted(halves.items()):
        both = counts.sum(axis=0)
        total += both
        other_total += other.get(kind, np.zeros((2, BLOCK), np.int64)).sum(axis=0)
        kinds[kind] = {"indices": int(both.sum()), "entropy_bits": round(entropy_bits(both), 3)}
    first, second = sum(c[0] for c in halves.values()), sum(c[1] for c in halves.values())
    result = {
        "bench": "index_stats", "preset": args.preset, "peers": args.peers, "steps": args.steps,
        "recorded_steps": args.record, "enum_bits_per_index": ENUM_BITS,
        "uniform_bits_per_index": round(math.log2(BLOCK), 3),
        "entropy_bits_per_index": round(entropy_bits(total), 3),
        "fixed_table_other_seed_bits": round(cross_entropy_bits(total, other_total), 3),
        "lagging_table_bits": round(cross_entropy_bits(second, first), 3),
        "by_kind": kinds,
        "low_frequency_share": round(float(total.reshape(64, 64)[:16, :16].sum() / total.sum()), 4),
        **{k: round(v, 4) for k, v in signs.items()},
        # Raw counts per position (row-major in the 64 x 64 block), so other coders can be costed offline.
        "counts": {"recorded": total.tolist(), "other_seed": other_total.tolist()},
        "seconds": round(time.monotonic() - t0, 1),
    }
    best = min(result["fixed_table_other_seed_bits"], result["lagging_table_bits"]) - SET_DISCOUNT
    result["set_discount_bits"] = round(SET_DISCOUNT, 3)
    result["best_table_coded_bits"] = round(best, 3)
    result["saving_vs_enum"] = round(payload_saving(best), 4)
    result["table_costs"] = table_costs(total, other_total, kinds)
    path = write_json(args.out, result)
    print(f"[index_stats] entropy {result['entropy_bits_per_index']} bits/index (enum {ENUM_BITS}), fixed "
          f"table {result['fixed_table_other_seed_bits']}, lagging {result['lagging_table_bits']}; payload "
          f"saving {result['saving_vs_enum']:.1%}; wrote {path}", flush=True)
    return 0


def add_costs(source: Path, out: Path) -> int:
    """Cost the static tables on a finished run's counts (simulating again takes most of an hour here)."""
    doc = json.loads(source.read_text())
    recorded = np.asarray(doc["counts"]["recorded"], dtype=np.int64)
    other = np.asarray(doc["counts"]["other_seed"], dtype=np.int64)
    if recorded.shape != (BLOCK,) or other.shape != (BLOCK,):
        raise SystemExit(f"{source}: counts must hold {BLOCK} positions each")
    doc["table_costs"] = table_costs(recorded, other, doc["by_kind"])
    doc["simulated_by"] = doc.pop("machine", None)
    path = write_json(out, doc)
    costs = doc["table_costs"]
    best = max(v for k, v in costs.items() if k.endswith("_saving"))
    print(f"[index_stats] static tables: best saving {best:.1%}, in-sample bound "
          f"{costs['in_sample_entropy_saving_bound']:.1%}; wrote {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

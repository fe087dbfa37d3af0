"""threats.md W1 at scale: mutated payloads must only ever be accepted or rejected with a PayloadError.

Why: ``compression.wire.decode`` is the one path by which peer bytes become tensors, so a crash, a leak or a
slow path there is a remote denial of service. The unit test (tests/compression/test_fuzz.py) runs 10^4
mutations of a toy spec on every CI run; this bench runs 10^5 (default) against the spec the DisTrO
optimizer builds for a real preset, adds the mutations W1 names that need structure (missing and duplicate
keys, wrong types, value fields sized for another dtype, 2**32 length headers at every kind of field, deep
nesting), and measures what the test cannot: RSS growth and decode-time percentiles.

The mutation generator (bench/_fuzz_mutations.py) is self-contained on purpose: the test's generator lives in
a test module (importing it would mean putting tests/ on sys.path and importing pytest), and this one is a
superset built around the decoded document rather than raw bytes alone. Byte-level kinds (truncate, flip,
insert, delete) mirror the test's; if both should ever share one generator, it belongs in a non-test module
both can import.

Run: ``.venv/bin/python bench/decode_fuzz.py`` (about 20 s per 10^5 on one free core)
-> bench/results/decode_fuzz.json.
"""

from __future__ import annotations

import argparse
import gc
import math
import random
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import torch
from _common import (
    PEER_ID,
    RESULTS_DIR,
    RUN_ID,
    STEP,
    distro_spec,
    header_for,
    meta_model,
    percentile,
    random_payload,
    rss_mb,
    write_json,
)
from _fuzz_mutations import MUTATORS, mutate
from distro_node.compression.errors import PayloadError
from distro_node.compression.layout import model_layout
from distro_node.compression.payload import Payload, PayloadSpec, TensorSpec
from distro_node.compression.wire import decode, encode, max_encoded_nbytes

RSS_TARGET_MB = 64.0
P99_TARGET_MS = 50.0
# -- spec ------------------------------------------------------------------------------------------------


def fuzz_spec(preset_name: str) -> tuple[PayloadSpec, str]:
    """The DisTrO default spec of a preset; a hand-built Llama-like spec if the model code is unavailable."""
    try:
        return distro_spec(meta_model(preset_name)), f"optimizer DisTrO defaults, preset {preset_name!r}"
    except ImportError as exc:  # node/ or optimizer/ mid-rewrite: keep the codec fuzzable regardless
        shapes: list[tuple[str, tuple[int, ...]]] = [("embed", (256, 64))]
        for i in range(2):
            p = f"layers.{i}."
            shapes += [(p + "attn_norm.weight", (64,)), (p + "attn.q_proj", (64, 64))]
            shapes += [
                (p + "attn.k_proj", (32, 64)),
                (p + "attn.v_proj", (32, 64)),
                (p + "attn.o_proj", (64, 64)),
            ]
            shapes += [(p + "mlp_norm.weight", (64,)), (p + "mlp.gate_proj", (256, 64))]
            shapes += [(p + "mlp.up_proj", (256, 64)), (p + "mlp.down_proj", (64, 256))]
        shapes += [("norm.weight", (64,)), ("head", (256, 64))]
        layout = model_layout(shapes, chunk=64)
        spec = PayloadSpec(
            strategy="distro",
            tensors=tuple(
                TensorSpec(t.name, t.n_chunks, t.chunk_numel, min(4, t.chunk_numel)) for t in layout.tensors
            ),
            layout_digest=layout.digest(),
            settings={"topk": 4, "chunk": 64},
            index_codec="enum",
            value_codec="1bit",
        )
        return spec, f"hand-built tiny-like spec (import failed: {exc})"


# -- checks on accepted payloads -------------------------------------------------------------------------


def invariant_violation(payload: Payload, spec: PayloadSpec) -> str | None:
    """What an accepted payload must satisfy (threats.md W2, B8); anything else here is a decoder bug."""
    if set(payload.tensors) != {t.name for t in spec.tensors}:
        return "tensor set"
    for t in spec.tensors:
        entry = payload.tensors[t.name]
        if tuple(entry.values.shape) != (t.n_chunks, t.k) or not bool(torch.isfinite(entry.values).all()):
            return f"{t.name}: values shape or finiteness"
        if entry.indices is None:
            if not t.dense:
                return f"{t.name}: missing indices"
            continue
        idx = entry.indices
        if tuple(idx.shape) != (t.n_chunks, t.k) or int(idx.min()) < 0 or int(idx.max()) >= t.chunk_numel:
            return f"{t.name}: indices shape or range"
        if t.k > 1 and not bool((idx[:, 1:] > idx[:, :-1]).all()):
            return f"{t.name}: indices not strictly increasing"
    return None


# -- run -------------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    spec, spec_source = fuzz_spec(args.preset)
    rng = random.Random(args.seed)
    np_rng = np.random.default_rng(args.seed)
    header = header_for(spec, step=STEP, peer_id=PEER_ID)
    originals = [encode(header, random_payload(spec, np_rng), spec) for _ in range(args.originals)]
    docs = [msgpack.unpackb(o, raw=False) for o in originals]  # our own bytes: trusted
    norm_bound = 2.0 * math.sqrt(sum(t.count for t in spec.tensors))

    def attempt(data: bytes) -> Payload:
        return decode(data, spec, run_id=RUN_ID, sender=PEER_ID, step=STEP, max_value_norm=norm_bound)[1]

    for o in originals:  # warm caches (plans, binomial tables) so they do not count as growth
        attempt(o)
    # Timings go to arrays filled now (pages touched before the baseline): 10^5 Python floats in lists
    # would add ~10 MB of the bench's own bookkeeping to the decoder's RSS growth.
    kind_names = list(MUTATORS)
    times = np.full(args.count, np.nan)
    cpu_times = np.full(args.count, np.nan)
    kind_ids = np.full(args.count, -1, dtype=np.int16)
    gc.collect()
    rss_before = rss_mb()

    outcomes: Counter[str] = Counter()
    by_kind: dict[str, Counter[str]] = defaultdict(Counter)
    crashes: list[dict[str, Any]] = []
    violations: list[dict[str, Any]] = []
    rss_trace: list[tuple[int, float]] = [(0, rss_before)]
    max_input = 0
    started = time.perf_counter()
    done = 0
    checkpoint = max(1, args.count // 10)
    for i in range(args.count):
        which = i % len(originals)
        kind, data = mutate(originals[which], docs[which], rng)
        max_input = max(max_input, len(data))
        base_kind = kind.split("+", 1)[0]
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            payload = attempt(data)
            outcome = "accepted_unchanged" if data == originals[which] else "accepted_changed"
        except PayloadError as exc:
            payload, outcome = None, "rejected:" + exc.reason
        except Exception as exc:  # the property under test: nothing but PayloadError may escape
            payload, outcome = None, "crash:" + type(exc).__name__
            if len(crashes) < 20:
                crashes.append(
                    {"i": i, "kind": kind, "error": repr(exc)[:300], "input_head": data[:64].hex()}
                )
        times[i] = time.perf_counter() - t0
        cpu_times[i] = time.thread_time() - c0
        kind_ids[i] = kind_names.index(base_kind)
        outcomes[outcome] += 1
        by_kind[kind if "+" not in kind else "stacked"][outcome] += 1
        if payload is not None and outcome == "accepted_changed":
            bad = invariant_violation(payload, spec)
            if bad is not None:
                outcomes["accepted_invalid"] += 1
                if len(violations) < 20:
                    violations.append({"i": i, "kind": kind, "violation": bad})
        done = i + 1
        if done % checkpoint == 0:
            rss_trace.append((done, rss_mb()))
        if time.perf_counter() - started > args.max_seconds:
            break
    wall = time.perf_counter() - started
    gc.collect()
    rss_after = rss_mb()

    times, cpu_times, kind_ids = times[:done], cpu_times[:done], kind_ids[:done]
    times_by_kind = {name: np.sort(times[kind_ids == j]) for j, name in enumerate(kind_names)}
    times, cpu_times = np.sort(times), np.sort(cpu_times)
    crash_total = sum(n for o, n in outcomes.items() if o.startswith("crash:"))
    rejected = {o.split(":", 1)[1]: n for o, n in sorted(outcomes.items()) if o.startswith("rejected:")}
    per_kind_ms = {
        k: {
            "n": len(v),
            "p50_ms": percentile(v, 50) * 1e3,
            "p99_ms": percentile(v, 99) * 1e3,
            "max_ms": float(v[-1]) * 1e3,
        }
        for k, v in sorted(times_by_kind.items())
        if len(v)
    }
    p99_ms = percentile(times, 99) * 1e3
    growth = rss_after - rss_before
    return {
        "bench": "decode_fuzz",
        "threat": "W1",
        "spec": {
            "source": spec_source,
            "strategy": spec.strategy,
            "index_codec": spec.index_codec,
            "value_codec": spec.value_codec,
            "n_tensors": len(spec.tensors),
            "selected_coefficients": sum(t.count for t in spec.tensors),
            "valid_payload_bytes": [len(o) for o in originals],
            "cap_bytes": max_encoded_nbytes(spec),
        },
        "requested": args.count,
        "completed": done,
        "stopped_by_time_limit": done < args.count,
        "seed": args.seed,
        "outcomes": {
            "accepted_unchanged": outcomes["accepted_unchanged"],
            "accepted_changed": outcomes["accepted_changed"],
            "accepted_invalid": outcomes["accepted_invalid"],
            "rejected_total": sum(rejected.values()),
            "rejected_by_reason": rejected,
            "crashes": crash_total,
            "crashes_by_type": {o.split(":", 1)[1]: n for o, n in outcomes.items() if o.startswith("crash:")},
        },
        "by_mutation": {k: dict(sorted(c.items())) for k, c in sorted(by_kind.items())},
        "crash_examples": crashes,
        "invariant_violations": violations,
        "rss_mb": {
            "before": rss_before,
            "after": rss_after,
            "growth": growth,
            "trace": rss_trace,
            "target_growth": RSS_TARGET_MB,
        },
        "decode_ms": {
            "p50": percentile(times, 50) * 1e3,
            "p90": percentile(times, 90) * 1e3,
            "p99": p99_ms,
            "max": float(times[-1]) * 1e3 if len(times) else math.nan,
            "mean": float(times.mean()) * 1e3 if len(times) else math.nan,
            "target_p99": P99_TARGET_MS,
            # Wall time includes waiting for a core on a shared machine; thread CPU time is the decoder's own.
            "cpu_p50": percentile(cpu_times, 50) * 1e3,
            "cpu_p99": percentile(cpu_times, 99) * 1e3,
            "cpu_max": float(cpu_times[-1]) * 1e3 if len(cpu_times) else math.nan,
            "by_mutation": per_kind_ms,
        },
        "max_input_bytes": max_input,
        "wall_s": wall,
        "pass": {
            "no_crashes": crash_total == 0,
            "no_invalid_accepted": outcomes["accepted_invalid"] == 0,
            "rss_growth_under_target": growth < RSS_TARGET_MB,
            "p99_under_target": p99_ms < P99_TARGET_MS,
            "completed_all": done == args.count,
        },
    }


def _print_summary(r: dict[str, Any], path: Path) -> None:
    o, t, m = r["outcomes"], r["decode_ms"], r["rss_mb"]
    print(f"spec: {r['spec']['source']}, {r['spec']['valid_payload_bytes'][0]:,} B valid payload")
    print(f"{r['completed']:,} of {r['requested']:,} mutated payloads in {r['wall_s']:.1f} s")
    print(
        f"accepted: {o['accepted_unchanged']} unchanged + {o['accepted_changed']} changed "
        f"({o['accepted_invalid']} violating invariants); rejected: {o['rejected_total']:,}; "
        f"crashes: {o['crashes']}"
    )
    for reason, n in o["rejected_by_reason"].items():
        print(f"  {reason:<16} {n:>7,}")
    print(
        f"RSS {m['before']:.1f} -> {m['after']:.1f} MB "
        f"(growth {m['growth']:+.1f} MB, target < {RSS_TARGET_MB})"
    )
    print(
        f"decode ms: p50 {t['p50']:.3f}  p99 {t['p99']:.3f}  max {t['max']:.3f} "
        f"(target p99 < {P99_TARGET_MS}); thread CPU p99 {t['cpu_p99']:.3f} max {t['cpu_max']:.3f}"
    )
    print(f"pass: {r['pass']}")
    print(f"wrote {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=100_000, help="mutated payloads (default 100000)")
    parser.add_argument("--preset", default="small", help="model preset for the spec (default small)")
    parser.add_argument(
        "--originals", type=int, default=8, help="distinct valid payloads to mutate (default 8)"
    )
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument(
        "--max-seconds", type=float, default=600.0, help="stop early after this many seconds (default 600)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "decode_fuzz.json", help="result JSON path")
    args = parser.parse_args(argv)
    if args.count < 1 or args.originals < 1 or args.max_seconds <= 0:
        parser.error("--count, --originals and --max-seconds must be positive")
    results = run(args)
    path = write_json(args.out, results)
    _print_summary(results, path)
    # A crash or an accepted invalid payload is a failure of the property, not just a number: exit non-zero.
    return 0 if results["pass"]["no_crashes"] and results["pass"]["no_invalid_accepted"] else 1


if __name__ == "__main__":
    sys.exit(main())

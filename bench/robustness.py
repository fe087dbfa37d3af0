"""Degraded and malicious peers in the simulated swarm: threats.md scenarios B1-B4, B7 and the honest
false-positive rate, with the default robust aggregation and per-peer scoring.

Why: the pass figures of threats.md compare an attacked run with H_n, the same run with only its n honest
peers. Every scenario here is an 8-peer swarm of the tiny preset on the embedded data with faulty peers at
the highest indices (evaluation uses peer 0, always honest), run for several seeds; H_5..H_8 are run with the
same settings. Faults come from node/faults.py, exactly what the daemon's ``--fault`` flag will use.

B4 sign agreement: per step, the share of parameters whose update sign (sign of the IDCT of the aggregate)
matches the update the six honest peers 0-5 alone would produce. Its reference is the same share in the
all-honest 8-peer run (there peers 6 and 7 are honest), so the ratio says how much two attackers move the
update compared with two more honest peers.

Run: ``.venv/bin/python bench/robustness.py`` (3 seeds x 120 steps, ~20 min on 2 busy cores)
-> bench/results/robustness.json; ``--quick`` is a smoke mode (1 seed, 30 steps, fewer scenarios).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from _common import RESULTS_DIR, write_json
from distro_node.compression.dct import from_chunks
from distro_node.compression.layout import TensorLayout
from distro_node.compression.payload import Payload, TensorSpec
from distro_node.node.faults import FaultSpec
from distro_node.node.model import Llama
from distro_node.node.presets import preset
from distro_node.node.sim.experiment import ExperimentConfig, run_experiment
from distro_node.optimizer.aggregate import entries_for
from distro_node.optimizer.config import DistroConfig
from distro_node.optimizer.distro import DisTrO
from distro_node.optimizer.params import layout_of, trainable
from distro_node.optimizer.robust import make_aggregator

PEERS = 8
HONEST_REF = tuple(f"peer-{i:03d}" for i in range(6))  # the honest peers of the 2-attacker scenarios


@dataclass(frozen=True)
class Scenario:
    name: str
    peers: int
    faults: dict[int, str] = field(default_factory=dict)
    exclusion: bool = True
    reference: str | None = None  # H_n scenario name to compare the final loss with
    loss_ratio_max: float | None = None
    exclude_within: int | None = None  # attackers must be banned by this step (or their payloads rejected)
    sign_agreement: bool = False


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("H8", 8, sign_agreement=True),
    Scenario("H7", 7),
    Scenario("H6", 6),
    Scenario("H5", 5),
    Scenario("B1", 8, {6: "sign-flip=100", 7: "sign-flip=100"}, True, "H6", 1.02, 50),
    Scenario("B2", 8, {6: "random=100", 7: "random=100"}, True, "H6", 1.02, 50),
    Scenario("B3", 8, {5: "sign-flip=100", 6: "sign-flip=100", 7: "sign-flip=100"}, True, "H5", 1.03, None),
    Scenario("B4", 8, {6: "sign-flip=100", 7: "sign-flip=100"}, False, None, None, None, True),
    Scenario("B7-random-scale", 8, {7: "random-scale=3"}, True, "H7", 1.01, 50),
    Scenario("B7-bitflip", 8, {7: "bitflip=1e-3"}, True, "H7", 1.01, 50),
)
QUICK = ("H8", "H6", "H7", "B1", "B4", "B7-bitflip")


class SignAgreement:
    """Observer: per step, sign agreement of the applied update with the honest peers' own update."""

    def __init__(self, settings: Mapping[str, Any], model_preset: str) -> None:
        config = DistroConfig(**{k: v for k, v in settings.items() if k != "schedule"})
        with torch.device("meta"):
            model = Llama(preset(model_preset), seed=None)
        params = trainable(model)
        self._layouts: dict[str, TensorLayout] = layout_of(params, config.chunk).by_name()
        self._specs: tuple[TensorSpec, ...] = DisTrO(model, config).spec().tensors
        self._aggregation = config.aggregation
        self.values: list[float] = []

    def _signs(self, payloads: Mapping[str, Payload]) -> list[torch.Tensor]:
        aggregator = make_aggregator(self._aggregation)
        aggregator.begin(self._specs, payloads)
        out = []
        for spec in self._specs:
            coeffs = aggregator.combine(spec, entries_for(spec.name, payloads), torch.device("cpu"))
            out.append(torch.sign(from_chunks(coeffs, self._layouts[spec.name])).reshape(-1))
        return out

    def __call__(self, step: int, payloads: Mapping[str, Payload]) -> None:
        honest = {p: payloads[p] for p in HONEST_REF if p in payloads}
        if len(honest) < len(HONEST_REF) or not payloads:
            return
        applied, reference = self._signs(payloads), self._signs(honest)
        same = sum(int((a == b).sum()) for a, b in zip(applied, reference, strict=True))
        total = sum(a.numel() for a in applied)
        self.values.append(same / total)


def run_scenario(sc: Scenario, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    settings: dict[str, Any] = {"schedule": {"lr": args.lr}}
    faults = {i: FaultSpec.parse(text) for i, text in sc.faults.items()}
    cfg = ExperimentConfig(
        preset=args.preset,
        strategy="distro",
        settings=settings,
        peers=sc.peers,
        steps=args.steps,
        batch_size=args.batch,
        seq_len=args.seq,
        seed=seed,
        data_seed=0,
        eval_batches=args.eval_batches,
        faults=faults,
        exclusion=sc.exclusion,
    )
    observer = SignAgreement(settings, args.preset) if sc.sign_agreement else None
    result = run_experiment(cfg, observer=observer)
    attackers = sorted(f"peer-{i:03d}" for i in sc.faults)
    honest_banned = sorted(p for p in result.ban_steps if p not in attackers)
    losses = [h["loss"] for h in result.history]
    row: dict[str, Any] = {
        "seed": seed,
        "final_eval_loss": result.final_eval_loss,
        "first_train_loss": losses[0],
        "last_train_loss": statistics.fmean(losses[-10:]),
        "attackers": attackers,
        "attacker_ban_step": {p: result.ban_steps.get(p) for p in attackers},
        "honest_banned": honest_banned,
        "rejected_messages": result.rejected,
        "replicas_identical": result.replicas_identical,
        "seconds": round(result.seconds, 1),
    }
    if observer is not None:
        row["sign_agreement_mean"] = statistics.fmean(observer.values) if observer.values else math.nan
        row["sign_agreement_min"] = min(observer.values) if observer.values else math.nan
    return row


def summarize(sc: Scenario, rows: list[dict[str, Any]], by_name: Mapping[str, list[dict[str, Any]]]) -> dict:
    out: dict[str, Any] = {
        "faults": sc.faults,
        "peers": sc.peers,
        "exclusion": sc.exclusion,
        "runs": rows,
        "final_eval_loss_mean": statistics.fmean(r["final_eval_loss"] for r in rows),
        "honest_banned_total": sum(len(r["honest_banned"]) for r in rows),
    }
    checks: dict[str, bool] = {"no_honest_banned": out["honest_banned_total"] == 0}
    if sc.reference is not None and sc.reference in by_name:
        ref = {r["seed"]: r["final_eval_loss"] for r in by_name[sc.reference]}
        ratios = [r["final_eval_loss"] / ref[r["seed"]] for r in rows if r["seed"] in ref]
        ref_mean = statistics.fmean(ref.values())
        out["reference"] = sc.reference
        out["reference_loss_mean"] = ref_mean
        out["ratio_per_seed"] = ratios
        out["ratio_of_means"] = out["final_eval_loss_mean"] / ref_mean
        out["ratio_target"] = sc.loss_ratio_max
        checks["loss_ratio"] = out["ratio_of_means"] <= (sc.loss_ratio_max or math.inf)
    if sc.exclude_within is not None:
        handled = []
        for r in rows:
            for _, step in r["attacker_ban_step"].items():
                banned_in_time = step is not None and step <= sc.exclude_within
                handled.append(banned_in_time or r["rejected_messages"] > 0)
        out["exclude_within_steps"] = sc.exclude_within
        # With 1-bit values a positive scale is erased by encoding: the "degraded" peer sends honest bytes.
        # Shown by the run being bit-identical to the all-honest H8 run of the same seed (same batches).
        honest8 = {r["seed"]: r["final_eval_loss"] for r in by_name.get("H8", [])}
        neutral = bool(honest8) and all(honest8.get(r["seed"]) == r["final_eval_loss"] for r in rows)
        out["neutralized_on_wire"] = neutral
        checks["attackers_excluded_or_rejected_in_time"] = all(handled) or neutral
    if sc.sign_agreement or sc.name == "B4":
        finite = all(math.isfinite(r["final_eval_loss"]) for r in rows)
        falling = all(r["last_train_loss"] < r["first_train_loss"] for r in rows)
        checks["finite_no_divergence"] = finite and falling
    if sc.name == "B4" and "H8" in by_name:
        honest = {r["seed"]: r["sign_agreement_mean"] for r in by_name["H8"]}
        ratios = [r["sign_agreement_mean"] / honest[r["seed"]] for r in rows if r["seed"] in honest]
        out["sign_agreement_all_honest"] = statistics.fmean(honest.values())
        out["sign_agreement_ratio_per_seed"] = ratios
        out["sign_agreement_ratio"] = min(ratios) if ratios else math.nan
        checks["sign_agreement_ratio_ge_0.9"] = bool(ratios) and min(ratios) >= 0.9
    out["checks"] = checks
    out["pass"] = all(checks.values())
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke mode: 1 seed, 30 steps, 6 scenarios")
    parser.add_argument("--seeds", type=int, default=None, help="default 3 (1 with --quick)")
    parser.add_argument("--steps", type=int, default=None, help="default 120 (30 with --quick)")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--eval-batches", type=int, default=4)
    parser.add_argument("--only", nargs="*", default=None, help="scenario names to run (default: all)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "robustness.json")
    args = parser.parse_args(argv)
    args.seeds = args.seeds or (1 if args.quick else 3)
    args.steps = args.steps or (30 if args.quick else 120)
    torch.set_num_threads(1)  # 2 shared cores: one simulated swarm per process, no intra-op threads
    names = set(args.only or (QUICK if args.quick else [s.name for s in SCENARIOS]))
    chosen = [s for s in SCENARIOS if s.name in names]
    start = time.perf_counter()
    by_name: dict[str, list[dict[str, Any]]] = {}
    for sc in chosen:
        for seed in range(args.seeds):
            row = run_scenario(sc, seed, args)
            by_name.setdefault(sc.name, []).append(row)
            print(
                f"{sc.name:16s} seed {seed}: loss {row['final_eval_loss']:.4f} "
                f"bans {row['attacker_ban_step']} honest banned {row['honest_banned']} "
                f"rejected {row['rejected_messages']} ({row['seconds']} s)",
                flush=True,
            )
    results = {sc.name: summarize(sc, by_name[sc.name], by_name) for sc in chosen}
    doc = {
        "settings": {
            "preset": args.preset,
            "peers": PEERS,
            "steps": args.steps,
            "seeds": args.seeds,
            "batch_size": args.batch,
            "seq_len": args.seq,
            "lr": args.lr,
            "strategy": "distro (defaults: 1-bit values, aggregation=clipped)",
            "eval_batches": args.eval_batches,
            "quick": args.quick,
        },
        "scenarios": results,
        "honest_false_positives": sum(r["honest_banned_total"] for r in results.values()),
        "all_pass": all(r["pass"] for r in results.values()),
        "seconds": round(time.perf_counter() - start, 1),
    }
    for name, r in results.items():
        ratio = r.get("ratio_of_means", r.get("sign_agreement_ratio"))
        print(f"{name:16s} pass={r['pass']} ratio={ratio} checks={r['checks']}")
    path = write_json(args.out, doc)
    print(f"wrote {path} in {doc['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

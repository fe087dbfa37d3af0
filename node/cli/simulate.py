"""`distro-node simulate`: N peers in one process with the codec on the path; summary and loss plot."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from distro_node.node.cli.common import config_default, config_help
from distro_node.node.plots import plot_losses
from distro_node.node.presets import PRESETS
from distro_node.node.sim.experiment import ExperimentConfig, ExperimentResult, run_experiment
from distro_node.node.sim.swarm import StepReport

STRATEGIES = ("distro", "adamw", "diloco", "cocktail")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "simulate",
        help="train N simulated peers in one process (no network) and report loss and bytes",
        description=(
            "Train N peers in this process on the embedded dataset. Every payload is encoded to bytes and "
            "decoded with full validation, exactly as it would cross the network, so the bytes reported are "
            "the bytes a networked peer sends. Ends with a summary, a JSON result and a loss plot (PNG)."
        ),
    )
    p.add_argument("--peers", type=int, default=4, help="number of simulated peers (default 4)")
    p.add_argument("--steps", type=int, default=150, help="training steps (default 150)")
    p.add_argument("--preset", default="tiny", choices=list(PRESETS), help="model preset (default tiny)")
    p.add_argument("--strategy", default="distro", choices=STRATEGIES, help="optimizer (default distro)")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default: the strategy's)")
    p.add_argument("--topk", type=int, default=None, help="DisTrO: coefficients kept per chunk (default 4)")
    p.add_argument(
        "--values", default=None, choices=("fp32", "bf16", "int8", "1bit"), help="DisTrO value coding"
    )
    p.add_argument("--overlap", action="store_true", help="DisTrO: apply step s during step s+1's compute")
    p.add_argument("--batch-size", type=int, default=8, help="sequences per peer per step (default 8)")
    p.add_argument("--seq-len", type=int, default=None, help="tokens per sequence (default: the preset's)")
    p.add_argument("--seed", type=int, default=0, help="model init and run seed (default 0)")
    p.add_argument(
        "--max-included", type=int, default=config_default("run.rounds.max_included"), metavar="K",
        help=config_help("at most K payloads per step, chosen by the daemon's rule; 0: all",
                         "run.rounds.max_included"),
    )
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: small models)")
    p.add_argument(
        "--out", type=Path, default=Path("runs/simulate"), help="where result.json and loss.png go"
    )
    p.set_defaults(func=run)


def settings_from_args(args: argparse.Namespace) -> dict[str, object]:
    settings: dict[str, object] = {}
    if args.lr is not None:
        settings["schedule"] = {"lr": args.lr}
    elif args.strategy == "distro":
        settings["schedule"] = {"lr": DEMO_DISTRO_LR}
    if args.strategy == "distro":
        if args.topk is not None:
            settings["topk"] = args.topk
        if args.values is not None:
            settings["value_codec"] = args.values
        if args.overlap:
            settings["overlapped"] = True
    elif args.topk is not None or args.values is not None or args.overlap:
        raise SystemExit("error: --topk, --values and --overlap apply to --strategy distro only")
    return settings


# Sign updates move every weight by lr each step; this is the best of a sweep on the tiny preset
# (see docs/benchmarks.md), far above the 1.2B runs' 4e-4 because the model is 5000x smaller.
DEMO_DISTRO_LR = 3e-3


def _status(report: StepReport, steps: int, start: float, dense: int) -> str:
    mb = report.payload_bytes / 1e6
    reduction = f"{dense / report.payload_bytes:,.0f}x" if report.payload_bytes else "-"
    phases = " ".join(f"{k} {v * 1000:.0f}ms" for k, v in report.seconds.items())
    return (
        f"step {report.step + 1:>4}/{steps}  loss {report.loss:.3f}  sent {mb:.4f} MB/peer  "
        f"vs dense bf16 {reduction}  [{phases}]  {time.perf_counter() - start:.0f}s"
    )


def run(args: argparse.Namespace) -> int:
    torch.set_num_threads(max(1, args.threads))
    cfg = ExperimentConfig(
        preset=args.preset,
        strategy=args.strategy,
        settings=settings_from_args(args),
        peers=args.peers,
        steps=args.steps,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        seed=args.seed,
        max_included=args.max_included,
        eval_every=max(args.steps // 10, 1),
    )
    from distro_node.node.model import param_count
    from distro_node.node.presets import preset

    dense = 2 * param_count(preset(cfg.preset))
    print(
        f"distro-node simulate: {cfg.peers} peers, preset {cfg.preset}, strategy {cfg.strategy} "
        f"{dict(cfg.settings)}, {cfg.steps} steps",
        flush=True,
    )
    start = time.perf_counter()
    interactive = sys.stdout.isatty()
    every = max(cfg.steps // 15, 1)

    def on_step(report: StepReport) -> None:
        line = _status(report, cfg.steps, start, dense)
        if interactive:
            print("\r" + line, end="", flush=True)
        elif (report.step + 1) % every == 0 or report.step == 0:
            print(line, flush=True)

    result = run_experiment(cfg, on_step=on_step)
    if interactive:
        print()
    _summary(result, args.out)
    return 0 if result.replicas_identical else 1


def _summary(result: ExperimentResult, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(result.to_dict(), indent=1))
    train = [(int(h["step"]), h["loss"]) for h in result.history]
    evals = [(int(h["step"]), h["eval_loss"]) for h in result.history if "eval_loss" in h]
    png = plot_losses(
        {"train loss (mean over peers)": train, "held-out loss": evals},
        out / "loss.png",
        title=f"{result.config.peers} peers, {result.config.strategy}, preset {result.config.preset}",
        floor=result.loss_floor,
    )
    first = sum(h["loss"] for h in result.history[:5]) / min(5, len(result.history))
    floor = f"{result.loss_floor:.3f}" if result.loss_floor is not None else "unknown"
    print("summary")
    print(f"  train loss        {first:.3f} -> {result.history[-1]['loss']:.3f}")
    print(f"  held-out loss     {result.final_eval_loss:.3f} (data floor {floor})")
    print(f"  sent per peer     {result.payload_bytes_per_step / 1e3:.2f} kB/step "
          f"(dense bf16 gradient {result.dense_bf16_bytes / 1e3:.0f} kB: {result.reduction:,.0f}x less)")
    print(f"  fetched per peer  {result.fetched_bytes_per_step / 1e3:.2f} kB/step (the others' payloads it "
          f"needs); longest gap between a peer's inclusions {result.max_inclusion_gap} steps")
    print(f"  replicas          {'bit-identical' if result.replicas_identical else 'DIVERGED'}")
    print(f"  wall time         {result.seconds:.1f} s")
    print(f"  result            {out / 'result.json'}")
    print(f"  loss plot         {png}")

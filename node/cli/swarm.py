"""`distro-node swarm`: N real `join` processes on this machine, watched live, summarised at the end.

Why processes and not the in-process simulator: this is the demo of the daemon itself. Every peer is the
same `distro-node join` an operator would run on another machine (libp2p over loopback, its own identity,
data dir and /metrics), the first founds the run and the others run the join command it prints. The
launcher only reads their ``--log-format json`` lines (node/peer/output.py), so what it shows is what the
peers report.

The children, their reader threads and how they are stopped (by pid, SIGTERM then SIGKILL) are in
swarm_peers.py.

``--fault INDEX:SPEC`` makes peer INDEX run ``join --fault SPEC`` (node/faults.py), to watch the swarm score
and ban it: every ban a peer reports is printed as it happens, and the summary judges the honest peers only.
"""

from __future__ import annotations

import argparse
import json
import queue
import time
from pathlib import Path
from statistics import fmean
from typing import Any

from distro_node.node.cli.common import UsageError, config_default, config_help
from distro_node.node.cli.swarm_peers import Peer, Swarm
from distro_node.node.faults import FaultSpec, FaultSpecError, fault_usage
from distro_node.node.join_process import join_args
from distro_node.node.presets import PRESETS

# 4 peers x 200 steps of the tiny preset take ~2 minutes on 2 busy CPU cores (150 steps: 85 s measured)
# and the loss falls visibly from ~5.5 toward the embedded corpus' floor.
DEFAULT_STEPS = 200


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "swarm",
        help="run N training peers on this machine as separate `join` processes, with live progress",
        description=(
            "Launch N `distro-node join` processes on loopback: the first founds a run, the others join it "
            "with the command it prints. Shows step, loss, peers, MB sent and received per step, the "
            "reduction vs a dense bf16 all-reduce and the step time by phase; at the end stops every peer, "
            "prints a summary and writes summary.json and loss.png into the run folder."
        ),
    )
    p.add_argument("--peers", type=int, default=4, help="number of peer processes (default 4)")
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS,
                   help=f"training steps (default {DEFAULT_STEPS})")
    p.add_argument("--preset", default=None, choices=list(PRESETS),
                   help=config_help("model preset", "run.model"))
    p.add_argument("--init-from", type=Path, default=None, metavar="DIR",
                   help=config_help("start from this local Hugging Face LlamaForCausalLM checkpoint "
                                    "directory instead of the seed init: every peer loads it (its "
                                    "config.json sets the model, so no --preset)", "run.init_from"))
    p.add_argument("--lr", type=float, default=None, help="learning rate (default: join's DisTrO default)")
    p.add_argument("--batch-size", type=int, default=config_default("run.batch_size"),
                   help=config_help("sequences per peer per step", "run.batch_size"))
    p.add_argument("--seq-len", type=int, default=config_default("run.seq_len"),
                   help=config_help("tokens per sequence", "run.seq_len"))
    p.add_argument("--round-timeout", type=float, default=config_default("run.rounds.round_timeout_seconds"),
                   help=config_help("seconds a round waits for a slow peer",
                                    "run.rounds.round_timeout_seconds"))
    p.add_argument("--values", default=None, choices=("fp32", "bf16", "int8", "1bit"),
                   help="DisTrO value coding on the wire (default: join's, 1bit)")
    p.add_argument("--fault", action="append", default=None, metavar="INDEX:SPEC",
                   help="make peer INDEX (0 founds the run) degraded or malicious with `join --fault SPEC`; "
                        f"repeatable. SPEC: {fault_usage()}. E.g. 3:scale=100 with --values bf16")
    p.add_argument("--fault-start", type=int, default=0, metavar="STEP",
                   help="faulty peers behave honestly before this step (default 0)")
    p.add_argument("--run-dir", type=Path, default=None,
                   help="folder for the peers' data dirs, logs, summary.json and loss.png "
                        "(default ./swarm-runs/<time>)")
    p.add_argument("--timeout", type=float, default=None,
                   help="give up after this many seconds (default 60 + 5 s per step)")
    p.set_defaults(func=run_swarm)


def _progress(step: int, steps: int, rows: list[dict[str, Any]], dense: int, start: float) -> str:
    losses = [r["loss"] for r in rows if r.get("loss") is not None]
    loss = f"{fmean(losses):.4f}" if losses else "  -   "
    payload = [r["payload_bytes"] for r in rows if r.get("payload_bytes")]
    reduction = f"{dense / fmean(payload):,.0f}x" if payload else "-"
    phases: dict[str, list[float]] = {}
    for r in rows:
        for k, v in r.get("phases", {}).items():
            phases.setdefault(k, []).append(v)
    shown = " ".join(f"{k} {fmean(v) * 1000:.0f}ms" for k, v in phases.items())
    sent = fmean(r.get("_sent_delta", 0) for r in rows) / 1e6
    recv = fmean(r.get("_recv_delta", 0) for r in rows) / 1e6
    r0 = rows[0]
    return (f"step {step + 1:>4}/{steps}  loss {loss}  peers {r0['included']}/{r0['roster']}  "
            f"sent {sent:.4f} MB  recv {recv:.4f} MB /peer/step  vs dense bf16 {reduction}  "
            f"[{shown}]  {time.monotonic() - start:.0f}s")


def _deltas(peer: Peer, row: dict[str, Any]) -> None:
    previous = peer.rows.get(row["step"] - 1)
    row["_sent_delta"] = row["sent_bytes"] - (previous["sent_bytes"] if previous else 0)
    row["_recv_delta"] = row["recv_bytes"] - (previous["recv_bytes"] if previous else 0)


def _check(args: argparse.Namespace) -> dict[int, str]:
    """Checks the flags; returns the faults as peer index -> SPEC."""
    for name in ("peers", "steps", "batch_size", "seq_len"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')}", f"must be >= 1, got {getattr(args, name)}")
    for name in ("round_timeout", "timeout", "lr"):
        value = getattr(args, name)
        if value is not None and not value > 0:
            raise UsageError(f"--{name.replace('_', '-')}", f"must be > 0, got {value}")
    if args.fault_start < 0:
        raise UsageError("--fault-start", f"must be >= 0, got {args.fault_start}")
    faults: dict[int, str] = {}
    for text in args.fault or []:
        index, sep, spec = text.partition(":")
        if not sep or not index.strip().isdigit():
            raise UsageError("--fault", f"expected INDEX:SPEC (e.g. 3:scale=100), got {text!r}")
        i = int(index)
        if not 0 <= i < args.peers:
            raise UsageError("--fault", f"peer index must be in [0, {args.peers}), got {i}")
        if i in faults:
            raise UsageError("--fault", f"peer {i} has two faults")
        try:
            FaultSpec.parse(spec)
        except FaultSpecError as exc:
            raise UsageError("--fault", str(exc)) from None
        faults[i] = spec.strip()
    if len(faults) >= args.peers:
        raise UsageError("--fault", "at least one peer must be honest")
    if args.init_from is not None and args.preset is not None:
        raise UsageError("--preset", "cannot be combined with --init-from: its config.json sets the model")
    return faults


def _model(args: argparse.Namespace) -> tuple[str, int]:
    """(how to name the model, dense bf16 bytes of one gradient): the preset, or the imported checkpoint's
    config.json (read alone; every peer reads and checks the weights itself)."""
    from distro_node.node.hf.convert import read_model_config
    from distro_node.node.model import param_count
    from distro_node.node.presets import preset

    if args.init_from is not None:
        return f"imported {args.init_from}", 2 * param_count(read_model_config(args.init_from)[0])
    name = args.preset or config_default("run.model")
    return f"preset {name}", 2 * param_count(preset(name))


def run_swarm(args: argparse.Namespace) -> int:
    faults = _check(args)
    run_dir: Path = args.run_dir or Path("swarm-runs") / time.strftime("%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    model, dense = _model(args)
    timeout = args.timeout if args.timeout is not None else 60.0 + 5.0 * args.steps
    run_args = ["--batch-size", str(args.batch_size), "--seq-len", str(args.seq_len),
                "--round-timeout", str(args.round_timeout), "--genesis-peers", str(args.peers)]
    if args.init_from is not None:
        run_args += ["--init-from", str(args.init_from)]
    else:
        run_args += ["--preset", args.preset or config_default("run.model")]
    if args.lr is not None:
        run_args += ["--lr", str(args.lr)]
    if args.values is not None:
        run_args += ["--values", args.values]
    # Joiners run the founder's printed command, which names no local paths: each gets its own copy's.
    local = ["--steps", str(args.steps)]
    joiner_local = [*local, "--init-from", str(args.init_from)] if args.init_from is not None else local
    swarm = Swarm(run_dir)
    start = time.monotonic()
    interrupted = False
    try:
        _run(swarm, args, run_args, (local, joiner_local), model, dense, start, start + timeout, faults)
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted: stopping every peer", flush=True)
    except TimeoutError:
        interrupted = True
        print(f"\ngave up after {timeout:.0f}s (--timeout): stopping every peer", flush=True)
    finally:
        swarm.stop()
    return _summarise(swarm, args, model, dense, time.monotonic() - start, run_dir, interrupted)


def _run(swarm: Swarm, args: argparse.Namespace, run_args: list[str], local: tuple[list[str], list[str]],
         model: str, dense: int, start: float, deadline: float, faults: dict[int, str]) -> None:
    founder_local, joiner_local = local
    founder = swarm.start([*run_args, *founder_local], faults.get(0), args.fault_start)
    command = ""
    while not command:
        index, event = _next(swarm, deadline)
        if event is None:
            log = swarm.run_dir / "peer0" / "stderr.log"
            raise SystemExit(f"error: the founding peer exited (see {log})")
        if event.get("event") == "listening":
            founder.info = event
            command = str(event["join_command"])
    print(f"run {founder.info['run_id'][:16]}: {args.peers} peers, {args.steps} steps, {model}; "
          f"logs in {swarm.run_dir}", flush=True)
    joiner = join_args(command)
    for i in range(1, args.peers):
        swarm.start([*joiner, *joiner_local], faults.get(i), args.fault_start)
    if faults:
        print("faulty: " + ", ".join(f"peer{i} {spec}" for i, spec in sorted(faults.items())), flush=True)
    every = max(1, args.steps // 25)
    shown = -1
    finished: set[int] = set()
    while not swarm.all_finished(finished):
        index, event = _next(swarm, deadline)
        peer = swarm.peers[index]
        if event is None:
            finished.add(index)
            continue
        kind = event.get("event")
        if kind == "listening":
            peer.info = event
        elif kind == "left":
            peer.left = True
        elif kind == "error":
            print(f"{peer.name}: {event.get('reason')}", flush=True)
        elif kind == "banned":
            print(_ban_line(swarm, peer, event), flush=True)
        elif kind == "step":
            _deltas(peer, event)
            peer.rows[event["step"]] = event
            step = event["step"]
            rows = [p.rows[step] for p in swarm.peers if step in p.rows]
            ready = all(step in p.rows for p in swarm.honest())
            if step > shown and ready and (step % every == 0 or step == args.steps - 1):
                shown = step
                print(_progress(step, args.steps, rows, dense, start), flush=True)


def _ban_line(swarm: Swarm, reporter: Peer, event: dict[str, Any]) -> str:
    """One console line per ban a peer reports; the first report of a peer's ban says why."""
    banned_id = str(event.get("peer", ""))
    name = next((p.name for p in swarm.peers if p.info.get("peer_id") == banned_id), "an unknown peer")
    swarm.bans.setdefault(name, {})[reporter.name] = int(event.get("step", -1))
    if len(swarm.bans[name]) > 1:
        itself = " (itself)" if reporter.name == name else ""
        return f"ban: {name} also banned by {reporter.name}{itself} after step {event.get('step')}"
    score = event.get("score")
    score_text = f", score {score:.2f}" if isinstance(score, int | float) else ""
    return (f"ban: {name} (...{banned_id[-8:]}) banned by {reporter.name} after step {event.get('step')} "
            f"({event.get('reason')}{score_text}); excluded from step {event.get('from_step')}")


def _next(swarm: Swarm, deadline: float) -> tuple[int, dict[str, Any] | None]:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("swarm deadline passed")
    try:
        return swarm.events.get(timeout=remaining)
    except queue.Empty:
        raise TimeoutError("swarm deadline passed") from None


def _summarise(swarm: Swarm, args: argparse.Namespace, model: str, dense: int, wall: float, run_dir: Path,
               interrupted: bool) -> int:
    from distro_node.node.data.embedded import markov_source
    from distro_node.node.plots import plot_losses

    peers = swarm.honest()  # faulty peers (--fault) are shown, not judged
    last = {p.name: max(p.rows) if p.rows else None for p in swarm.peers}
    final_hash = {p.name: p.rows[s]["weights_hash"] if s is not None else None
                  for p, s in zip(swarm.peers, last.values(), strict=True)}
    honest_hash = {p.name: final_hash[p.name] for p in peers}
    common = [s for s in range(args.steps) if all(s in p.rows for p in peers)]
    mean_loss = {s: fmean(ls) for s in common
                 if (ls := [p.rows[s]["loss"] for p in peers if p.rows[s].get("loss") is not None])}
    payload = [r["payload_bytes"] for p in peers for r in p.rows.values() if r.get("payload_bytes")]
    all_rows = [r for p in peers for r in p.rows.values()]
    phases: dict[str, list[float]] = {}
    for r in all_rows:
        for k, v in r.get("phases", {}).items():
            phases.setdefault(k, []).append(v)
    head = [mean_loss[s] for s in sorted(mean_loss)[:5]]
    tail = [mean_loss[s] for s in sorted(mean_loss)[-5:]]
    agreed = len(set(honest_hash.values())) == 1 and None not in honest_hash.values()
    summary: dict[str, Any] = {
        "peers": args.peers, "steps": args.steps, "model": model, "wall_seconds": round(wall, 1),
        "preset": None if args.init_from is not None else args.preset or config_default("run.model"),
        "interrupted": interrupted, "steps_completed": {n: (s + 1 if s is not None else 0)
                                                        for n, s in last.items()},
        "final_weights_hash": final_hash, "weights_agree": agreed,
        "loss_first": fmean(head) if head else None, "loss_last": fmean(tail) if tail else None,
        "payload_bytes_per_step": fmean(payload) if payload else None,
        "dense_bf16_bytes_per_step": dense,
        "reduction_vs_dense": dense / fmean(payload) if payload else None,
        "sent_bytes_per_peer_step": fmean(r["_sent_delta"] for r in all_rows) if all_rows else None,
        "recv_bytes_per_peer_step": fmean(r["_recv_delta"] for r in all_rows) if all_rows else None,
        "phase_seconds_mean": {k: fmean(v) for k, v in phases.items()},
        "exit_codes": {p.name: p.process.returncode for p in swarm.peers},
        "faults": {p.name: p.fault for p in swarm.peers if p.fault is not None},
        "bans": swarm.bans,
        "mean_loss_by_step": {str(s): v for s, v in sorted(mean_loss.items())},
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    curves = {p.name: [(s, r["loss"]) for s, r in sorted(p.rows.items()) if r.get("loss") is not None]
              for p in swarm.peers}
    floor = markov_source(0).loss_floor
    plot_losses(curves, run_dir / "loss.png", title=f"distro-node swarm: {args.peers} peers, {model}",
                floor=floor)
    fmt = (lambda v: "-" if v is None else f"{v:.4f}")  # noqa: E731
    reduction = summary["reduction_vs_dense"]
    who = f"all {args.peers} peers" if len(peers) == args.peers else f"the {len(peers)} honest peers"
    print(f"\nsummary: {len(common)}/{args.steps} steps on {who} in {wall:.0f}s; "
          f"loss {fmt(summary['loss_first'])} -> {fmt(summary['loss_last'])}"
          + (f" (floor {floor:.3f})" if floor else ""), flush=True)
    if payload:
        print(f"  payload {summary['payload_bytes_per_step']:,.0f} B/peer/step vs dense bf16 {dense:,} B: "
              f"{reduction:,.0f}x smaller", flush=True)
    print("  step time by phase: " + " ".join(f"{k} {v * 1000:.0f}ms"
                                              for k, v in summary["phase_seconds_mean"].items()), flush=True)
    hashes = sorted({(h or "-")[:16] for h in honest_hash.values()})
    every = "every peer" if len(peers) == args.peers else "every honest peer"
    print(f"  weights identical on {every}: {'yes' if agreed else 'NO'} ({', '.join(hashes)})", flush=True)
    for name, spec in summary["faults"].items():
        by = swarm.bans.get(name, {})
        verdict = (f"banned by {len(by)} peer(s) after step(s) {sorted(set(by.values()))}" if by
                   else "never banned")
        print(f"  {name} ({spec}): {verdict}; final weights {(final_hash[name] or '-')[:16]}", flush=True)
    print(f"  wrote {run_dir / 'summary.json'} and {run_dir / 'loss.png'}", flush=True)
    ok = agreed and not interrupted and len(common) == args.steps
    return 0 if ok else 1

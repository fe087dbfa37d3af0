"""`distro-node doctor`: can this machine take part in the configured run, and how fast would it step?

Runs before ``join`` so that a machine that cannot hold the model, cannot bind its address or would spend
every round waiting on its uplink is found in seconds, with the setting to change, instead of hours into a
run. Nothing here allocates the model unless a real step is cheap (see ``doctor_compute``): the 1.2B preset
is sized on the meta device. The network is touched only to bind the listen addresses, to ask the home router
for a test port mapping (UPnP, a second at most when there is none), with ``--bootstrap`` to have those peers
dial this machine back, and with ``--measure-bandwidth`` for a loopback transfer between two in-process hosts.

Exit code 0 when no check FAILs, 1 otherwise, 2 for bad flags (named like config errors).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from distro_node.node.cli.common import UsageError, config_path, positive
from distro_node.node.config.load import ConfigFieldError, ConfigLoadError, NodeConfig, load_config
from distro_node.node.config.schema import DEVICES
from distro_node.node.device import select_precision
from distro_node.node.doctor.bandwidth import MAX_BYTES, BandwidthError, LoopbackRate, check_bandwidth
from distro_node.node.doctor.compute import MEASURE_MAX_BYTES, check_compute, compute_time
from distro_node.node.doctor.device import available_memory, check_device, device_info
from distro_node.node.doctor.host import host_time
from distro_node.node.doctor.listen import check_listen
from distro_node.node.doctor.memory import (
    check_accelerator_memory,
    check_memory,
    estimate,
    split_for_accelerator,
)
from distro_node.node.doctor.payload import budget, check_payload, check_step_time
from distro_node.node.doctor.reachability import PROBE_TIMEOUT_S, check_reachability
from distro_node.node.doctor.report import FAIL, PASS, Check, render_text, report_dict
from distro_node.node.hf.convert import read_model_config
from distro_node.node.model import param_count
from distro_node.node.presets import PRESETS, preset

DEFAULT_PEERS = 8
DEFAULT_UPLINK_MBIT = 10.0
DEFAULT_BANDWIDTH_MB = 8


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "doctor",
        help="check this machine against the run config: device, memory, payload budget, step time, address",
        description=(
            "Pre-flight checks, each PASS, WARN or FAIL with what to change: the config loads; the device "
            "(cuda, mps, cpu; which one device=auto picks); whether the preset fits in memory (weights, "
            "gradients, optimizer state, activations, held payloads); compute seconds per step (measured "
            "when cheap, else estimated from this device's matmul rate); the exact payload bytes per step "
            "for the strategy and their upload time to every other peer; the projected step time (compute "
            "and communication added, or overlapped); whether the listen addresses can be bound; and "
            "reachability: who could dial them, whether the home router maps the port by UPnP (a test "
            "mapping, deleted at once) and, with --bootstrap, whether peers can dial this machine back, with "
            "the addresses it would advertise and why. Exit code 0 when nothing FAILs, 1 otherwise. Config: "
            "--config, else $DISTRO_NODE_CONFIG, else "
            "./distro-node.toml if present, else defaults; DISTRO_NODE_* variables and the flags below apply"
            " on top."
        ),
    )
    p.add_argument("--config", type=Path, default=None, metavar="PATH", help="config file to check")
    p.add_argument(
        "--preset", default=None, metavar="NAME",
        help=f"run.model to check instead of the config's ({' | '.join(PRESETS)})",
    )
    p.add_argument(
        "--strategy", default=None, metavar="NAME",
        help="run.strategy to check instead of the config's (distro | adamw | diloco | cocktail)",
    )
    p.add_argument(
        "--device", default=None, metavar="DEVICE",
        help=f"device instead of the config's ({' | '.join(DEVICES)})",
    )
    p.add_argument(
        "--batch-size", type=int, default=None, metavar="N",
        help="run.batch_size instead of the config's: sequences per peer step (split into run.grad_accum "
             "micro-batches)",
    )
    p.add_argument(
        "--seq-len", type=int, default=None, metavar="N",
        help="run.seq_len instead of the config's: tokens per sequence",
    )
    p.add_argument(
        "--listen", action="append", default=None, metavar="MULTIADDR",
        help="network.listen address to check instead of the config's; repeatable",
    )
    p.add_argument(
        "--bootstrap", action="append", default=None, metavar="MULTIADDR",
        help="network.bootstrap peer to ask to dial this machine back (repeatable): the reachability "
             f"verdict (public / NAT / relay only); bounded to {PROBE_TIMEOUT_S:g} s. Without it the check "
             "stays offline",
    )
    p.add_argument(
        "--peers", type=int, default=DEFAULT_PEERS, metavar="N",
        help=f"swarm size to cost the exchange for, this node included (default {DEFAULT_PEERS})",
    )
    p.add_argument(
        "--uplink-mbit", type=float, default=DEFAULT_UPLINK_MBIT, metavar="MBIT",
        help=f"this node's upload bandwidth in Mbit/s (default {DEFAULT_UPLINK_MBIT:g}: a home uplink)",
    )
    p.add_argument(
        "--compute-seconds", type=float, default=None, metavar="S",
        help="compute seconds per step to assume instead of measuring or estimating them",
    )
    p.add_argument(
        "--memory-gb", type=float, default=None, metavar="GB",
        help="memory to check the fit against, in GB of 10^9 bytes (default: what the device has free)",
    )
    p.add_argument(
        "--measure-bandwidth", action="store_true",
        help="also time a transfer between two libp2p hosts in this process over loopback: the ceiling of "
        "the stack on this CPU (a few seconds; off by default to keep doctor fast)",
    )
    p.add_argument(
        "--bandwidth-mb", type=int, default=DEFAULT_BANDWIDTH_MB, metavar="MB",
        help=f"bytes to send for --measure-bandwidth, in MB (default {DEFAULT_BANDWIDTH_MB}, at most "
        f"{MAX_BYTES // 1_000_000})",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of text")
    p.set_defaults(func=run)


def _check_args(args: argparse.Namespace) -> None:
    if args.peers < 1:
        raise UsageError("--peers", f"must be >= 1, got {args.peers}")
    positive("--uplink-mbit", args.uplink_mbit)
    positive("--compute-seconds", args.compute_seconds)
    positive("--memory-gb", args.memory_gb)
    if not 1 <= args.bandwidth_mb <= MAX_BYTES // 1_000_000:
        raise UsageError("--bandwidth-mb", f"must be in 1..{MAX_BYTES // 1_000_000}, got {args.bandwidth_mb}")


def _flags(args: argparse.Namespace) -> dict[str, object]:
    return {
        "run.model": args.preset,
        "run.strategy": args.strategy,
        "device": args.device,
        "run.batch_size": args.batch_size,
        "run.seq_len": args.seq_len,
        "network.listen": tuple(args.listen) if args.listen else None,
        "network.bootstrap": tuple(args.bootstrap) if args.bootstrap else None,
    }


def load_checked(args: argparse.Namespace) -> tuple[NodeConfig, Check, str]:
    """The config to check and the verdict on loading it. A bad flag raises (exit 2: the command line is
    wrong); a bad file or environment is a FAIL, and the other checks then run on the defaults plus the
    flags (or the bare defaults, when the flags only make sense with the file's other settings)."""
    flags = _flags(args)
    path = config_path(args.config)
    where = str(path) if path is not None else "built-in defaults (no config file)"
    env_vars = sorted(k for k in os.environ if k.startswith("DISTRO_NODE_"))
    try:
        config = load_config(path, env=os.environ, flags=flags)
    except ConfigLoadError as exc:
        if isinstance(exc, ConfigFieldError) and (exc.source or "").startswith("flag "):
            raise
        try:
            fallback, used = load_config(None, env={}, flags=flags), "the defaults plus the flags"
        except ConfigLoadError:
            fallback, used = NodeConfig(), "the defaults"
        hint = f"fix the setting named above; the checks below use {used}"
        return fallback, Check("config", FAIL, str(exc), hint=hint, details={"path": where}), where
    env_note = f"; environment: {', '.join(env_vars)}" if env_vars else ""
    details = {"path": where, "env": env_vars, "run_digest": config.run.digest()}
    return config, Check("config", PASS, f"{where} loads{env_note}", details=details), where


def diagnose(args: argparse.Namespace) -> tuple[dict[str, Any], list[Check]]:
    """Every check, in the order they are printed, and the context the JSON report carries."""
    _check_args(args)
    config, config_check, where = load_checked(args)
    run_cfg = config.run
    model_name = run_cfg.model
    if run_cfg.init_from is not None:  # an imported model: its config.json has the shape (no weights read)
        model, model_name = read_model_config(run_cfg.init_from)[0], f"imported {run_cfg.init_from}"
    else:
        model = preset(run_cfg.model)
    settings = run_cfg.strategy_config
    checks = [config_check]

    info = device_info(config.device)
    checks.append(check_device(info))
    device = info.chosen or "cpu"

    b = budget(model, run_cfg.strategy, settings, peers=args.peers, uplink_mbit=args.uplink_mbit)
    # Memory and compute are those of one micro-batch: the step's batch is cut run.grad_accum ways.
    sizes = {"batch": max(1, run_cfg.batch_size // run_cfg.grad_accum), "seq": run_cfg.seq_len}
    common = {"peers": args.peers, "payload_bytes": b.wire_bytes, **sizes}
    fp32 = estimate(model, run_cfg.strategy, settings, dtype="fp32", **common)
    bf16 = estimate(model, run_cfg.strategy, settings, dtype="bf16", **common)
    available: int | None
    if args.memory_gb is not None:
        available, source = int(args.memory_gb * 1e9), "--memory-gb"
    else:
        available, source = available_memory(device)
    precision = select_precision(config.precision, device)
    footprint = fp32.weights + fp32.gradients + fp32.activations
    if device == "cpu":
        checks.append(check_memory(model_name, fp32, bf16, available, source, **sizes))
    else:  # the working copy trains on the device, the CPU master copy and the optimizer stay on the host
        on_device, on_host = split_for_accelerator(fp32, model, precision=precision, **sizes)
        checks.append(check_accelerator_memory(model_name, on_device, on_host, (available, source),
                                               available_memory("cpu"), device=device, **sizes))
        footprint = on_device.total

    # A real step is timed only when it would use a small share of the memory there is.
    room = MEASURE_MAX_BYTES if available is None else min(MEASURE_MAX_BYTES, available // 4)
    ct = compute_time(
        model, device=device, given=args.compute_seconds, grad_accum=run_cfg.grad_accum,
        may_measure=footprint <= room, precision=precision, **sizes,
    )
    host = host_time(param_count(model), run_cfg.strategy, settings, peers=args.peers, device=device,
                     given=args.compute_seconds is not None)
    checks.append(check_compute(ct, host, device, grad_accum=run_cfg.grad_accum, **sizes))
    compute_s = ct.seconds + host.seconds
    checks.append(check_payload(b, compute_s, config.run.rounds.round_timeout_seconds))

    rate: LoopbackRate | BandwidthError | None = None
    if args.measure_bandwidth:
        from distro_node.node.doctor.loopback import (
            measure_loopback,  # imports libp2p's host stack: only when asked
        )

        try:
            rate = measure_loopback(args.bandwidth_mb * 1_000_000)
        except BandwidthError as exc:
            rate = exc
    measured = rate.bits_per_second if isinstance(rate, LoopbackRate) else None
    needed = b.upload_bytes * 8 / b.every_steps / compute_s
    checks.append(check_bandwidth(rate, needed))
    checks.append(check_step_time(b, compute_s, settings, measured))
    net = config.network
    checks.append(check_listen(net.listen, net.announce_addrs))
    checks.append(check_reachability(net.listen, net.announce_addrs, net.bootstrap, net.upnp))

    context = {
        "config": where,
        "preset": run_cfg.model if run_cfg.init_from is None else None,
        "model": f"preset {model_name}" if run_cfg.init_from is None else model_name,
        "params": param_count(model),
        "strategy": run_cfg.strategy,
        "device": device,
        "batch_size": run_cfg.batch_size,
        "seq_len": run_cfg.seq_len,
        "grad_accum": run_cfg.grad_accum,
        "peers": args.peers,
        "uplink_mbit": args.uplink_mbit,
    }
    return context, checks


def run(args: argparse.Namespace) -> int:
    context, checks = diagnose(args)
    if args.json:
        print(json.dumps(report_dict(context, checks), indent=1))
    else:
        title = (
            f"distro-node doctor: {context['model']} ({context['params']:,} params), strategy "
            f"{context['strategy']}, {context['peers']} peers, uplink {context['uplink_mbit']:g} Mbit/s"
        )
        print(render_text(title, checks))
    return 0 if all(c.status != FAIL for c in checks) else 1


"""`distro-node join`: run one networked training peer (found a run, or join one through a bootstrap peer)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from distro_node.node.cli.common import UsageError, config_help
from distro_node.node.cli.simulate import STRATEGIES
from distro_node.node.config.run import ADMISSION_MODES
from distro_node.node.config.schema import DATA_KINDS, LOG_LEVELS, PAYLOAD_FETCHES, TOKEN_DTYPES
from distro_node.node.device import DEVICES, PRECISIONS
from distro_node.node.faults import FaultSpec, FaultSpecError, fault_usage
from distro_node.node.logs import configure_logging
from distro_node.node.peer.local import LocalSettings
from distro_node.node.peer.output import FORMATS
from distro_node.node.peer.reach_addrs import ALL_INTERFACES_LISTEN, LOOPBACK_LISTEN
from distro_node.node.peer.settings import DEMO_DISTRO_LR, founder_manifest, load_join_settings
from distro_node.node.presets import PRESETS
from distro_node.optimizer.config import SCHEDULE_KINDS


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "join",
        help="run a training peer: found a new run, or join one with --bootstrap",
        description=(
            "Run one training peer over libp2p. Without --bootstrap this process founds a new run from the "
            "model and optimizer flags below and prints the exact command other machines run to join it. "
            "With --bootstrap it fetches the run's manifest, weights and round state from the swarm, warms "
            "up for a few rounds and then trains with everyone else. Ctrl-C (or SIGTERM) leaves gracefully: "
            "the current round is finished and a goodbye is sent so nobody waits for this peer."
        ),
    )
    p.add_argument("--config", type=Path, default=None,
                   help="node config file (TOML, see `distro-node init`); default $DISTRO_NODE_CONFIG. "
                        "Layers: file < DISTRO_NODE_* environment < these flags")
    net = p.add_argument_group("network")
    net.add_argument("--bootstrap", action="append", default=None, metavar="MULTIADDR",
                     help="a peer of the run to join, e.g. /ip4/10.0.0.5/tcp/4001/p2p/12D3Koo... "
                          "(repeat for fallbacks); omit to found a new run [network.bootstrap]")
    net.add_argument("--run-id", default=None, metavar="HEX",
                     help="expected run id (sha256 of the manifest, printed by the founder): refuse a "
                          "bootstrap peer that serves another run")
    net.add_argument("--listen", action="append", default=None, metavar="MULTIADDR",
                     help=f"listen address, repeatable (when no config sets one: {ALL_INTERFACES_LISTEN}, "
                          "all interfaces, any free port, when a --bootstrap peer is on another machine; "
                          f"else {LOOPBACK_LISTEN}, loopback: a founder whose run others join from other "
                          "machines sets e.g. /ip4/0.0.0.0/tcp/4747) [network.listen]")
    net.add_argument("--announce", action="append", default=None, metavar="MULTIADDR",
                     help="address to advertise instead of the listen ones (NAT, containers); repeatable "
                          "[network.announce_addrs]")
    net.add_argument("--no-upnp", action="store_true",
                     help=config_help("sets network.upnp false: do not ask the home router (UPnP "
                                      "IGD) to forward the listen port (a node listening beyond loopback "
                                      "asks when it is true, and advertises the mapped address once peers "
                                      "confirm they can dial it)", "network.upnp"))
    net.add_argument("--payload-fetch", default=None, choices=PAYLOAD_FETCHES,
                     help=config_help("how to download peers' payloads: pieces, in verified 128 KiB pieces "
                                      "from every holder at once (each piece served on as soon as it is in); "
                                      "whole, each payload from one holder at a time, its origin first",
                                      "network.payload_fetch"))
    net.add_argument("--key-file", type=Path, default=None,
                     help="ed25519 identity key file, created if missing (default: DATA_DIR/identity.key "
                          "with a data dir, else a fresh identity per process) [network.key_file]")
    net.add_argument("--ticket", type=Path, default=None, metavar="FILE",
                     help="admission ticket for a permissioned run: the file the founder's `distro-node "
                          "ticket issue` wrote for this peer's id (`distro-node ticket id`) [network.ticket]")
    net.add_argument("--data-dir", type=Path, default=None,
                     help="directory for this node's persistent files: identity key, checkpoints "
                          "(default: none when no config sets data_dir) [data_dir]")
    obs = p.add_argument_group("metrics and checkpoints")
    obs.add_argument("--metrics-host", default=None,
                     help=config_help("bind address of /metrics", "metrics.host"))
    obs.add_argument("--metrics-port", type=int, default=None,
                     help="port of /metrics; 0 = any free port, printed at start (default 0 when no config "
                          "sets one) [metrics.port]")
    obs.add_argument("--no-metrics", action="store_true", help="do not serve /metrics [metrics.enabled]")
    obs.add_argument("--checkpoint-every", type=int, default=None, metavar="STEPS",
                     help=config_help("save a checkpoint every N steps (and on exit) under "
                                      "DATA_DIR/checkpoints", "checkpoint.every_steps"))
    run = p.add_argument_group("run (founders only; joiners take these from the run manifest)")
    run.add_argument("--admission", default=None, choices=ADMISSION_MODES,
                     help=config_help("who may join: anyone, or only peers holding a ticket signed by this "
                                      "founder's key (needs --key-file or --data-dir)", "run.admission"))
    run.add_argument("--preset", default=None, choices=list(PRESETS),
                     help=config_help("model preset", "run.model"))
    run.add_argument("--strategy", default=None, choices=STRATEGIES,
                     help=config_help("optimizer", "run.strategy"))
    run.add_argument("--lr", type=float, default=None, help="peak learning rate (default: the strategy's; "
                                                            f"DisTrO: {DEMO_DISTRO_LR}) "
                                                            "[run.strategy_settings.schedule.lr]")
    run.add_argument("--topk", type=int, default=None, help="DisTrO: coefficients kept per chunk")
    run.add_argument("--values", default=None, choices=("fp32", "bf16", "int8", "1bit"),
                     help="DisTrO: value coding on the wire")
    run.add_argument("--overlap", action="store_true", default=None,
                     help="DisTrO: overlapped order: compute step s+1 while step s's payloads are exchanged "
                          "and apply s one step late, so a step costs about max(compute, communication) "
                          "instead of their sum; stored in the run manifest, so every peer follows it "
                          "[run.strategy_settings.overlapped]")
    run.add_argument("--batch-size", type=int, default=None,
                     help=config_help("sequences per peer per step", "run.batch_size"))
    run.add_argument("--seq-len", type=int, default=None,
                     help=config_help("tokens per sequence", "run.seq_len"))
    run.add_argument("--seed", type=int, default=None, help=config_help("model init seed", "run.seed"))
    run.add_argument("--data-seed", type=int, default=None,
                     help=config_help("embedded dataset seed", "run.data.seed"))
    run.add_argument("--data-kind", default=None, choices=DATA_KINDS,
                     help="training data: embedded (default; offline Markov corpus), text (a file of bytes, "
                          "vocab 256), tokens (flat little-endian uint16/uint32 ids) or shards (a folder "
                          "from `distro-node data prepare`; the model takes its tokenizer's vocabulary "
                          "size); a file's sha256 and size go into the run manifest, its path never does "
                          "(see --data-path) [run.data.kind]")
    run.add_argument("--token-dtype", default=None, choices=TOKEN_DTYPES,
                     help="token files: id width (default auto: from a .u16/.u32 name) "
                          "[run.data.token_dtype]")
    run.add_argument("--schedule", default=None, choices=SCHEDULE_KINDS,
                     help="learning-rate schedule after warmup: constant (default), cosine (down to "
                          "lr x --min-lr-ratio at --total-steps) or wsd (its decay_steps from the config) "
                          "[run.strategy_settings.schedule.kind]")
    run.add_argument("--warmup-steps", type=int, default=None,
                     help=config_help("linear warmup from lr/N at step 0 to lr at step N",
                                      "run.strategy_settings.schedule.warmup_steps"))
    run.add_argument("--total-steps", type=int, default=None,
                     help="horizon of the cosine/wsd decay: the step where lr reaches its floor (must exceed "
                          "--warmup-steps) [run.strategy_settings.schedule.total_steps]")
    run.add_argument("--min-lr-ratio", type=float, default=None,
                     help=config_help("floor of the decay as a fraction of lr",
                                      "run.strategy_settings.schedule.min_lr_ratio"))
    run.add_argument("--grad-clip", type=float, default=None,
                     help=config_help("clip each peer's gradient to this global L2 norm before compression; "
                                      "0 turns clipping off", "run.grad_clip"))
    run.add_argument("--round-timeout", type=float, default=None,
                     help=config_help("seconds a round collects payloads before closing without the missing "
                                      "peers",
                                      "run.rounds.round_timeout_seconds"))
    run.add_argument("--leader-timeout", type=float, default=None,
                     help=config_help("seconds before the next leader takes over a round whose leader is "
                                      "silent", "run.rounds.leader_timeout_seconds"))
    run.add_argument("--liveness-timeout", type=float, default=None,
                     help=config_help("seconds without a heartbeat after which a peer is no longer waited "
                                      "for; a peer whose connections all closed (a crash) is not waited for "
                                      "at all until it is heard from again",
                                      "run.rounds.liveness_timeout_seconds"))
    run.add_argument("--warmup-rounds", type=int, default=None,
                     help=config_help("rounds a newcomer trains without being included",
                                      "run.rounds.warmup_rounds"))
    run.add_argument("--max-included", type=int, default=None, metavar="K",
                     help=config_help("at most K payloads per step, the peers that waited longest first; "
                                      "0: all", "run.rounds.max_included"))
    run.add_argument("--genesis-peers", type=int, default=1,
                     help="start step 0 once this many peers (the founder included) have joined "
                          "(default %(default)s: start at once; later peers join mid-run)")
    local = p.add_argument_group("this process")
    local.add_argument("--steps", type=int, default=None,
                       help="leave gracefully after the swarm's step N is applied (default: run until "
                            "interrupted)")
    local.add_argument("--log-format", default="text", choices=FORMATS,
                       help="text: one readable line per step; json: one JSON object per line (for tools); "
                            "log records (stderr) follow the same format (default %(default)s)")
    local.add_argument("--log-level", default=None, choices=LOG_LEVELS,
                       help=config_help("log verbosity of stderr, third-party libraries included",
                                        "log_level"))
    local.add_argument("--threads", type=int, default=1, help="torch CPU threads (default %(default)s)")
    local.add_argument("--device", default=None, choices=DEVICES,
                       help="where this peer's forward/backward runs: auto (default: cuda, else mps, else "
                            "cpu), cpu, cuda or mps; the weights update runs on CPU everywhere, so peers "
                            "with different devices train one run [device]")
    local.add_argument("--precision", default=None, choices=PRECISIONS,
                       help="forward pass precision: auto (default: bf16 autocast on cuda, fp32 elsewhere), "
                            "fp32 or bf16 (autocast; weights and gradients stay fp32) [precision]")
    local.add_argument("--grad-accum", type=int, default=None, metavar="N",
                       help=config_help("split the run's per-peer batch into N micro-batches and average "
                                        "their gradients: less memory, the same run (N must divide the batch "
                                        "size)", "run.grad_accum"))
    local.add_argument("--data-path", type=Path, default=None,
                       help="this machine's copy of the run's data file or prepared folder (founders: the "
                            "data to train on, with --data-kind); joiners must hold a file with the "
                            "manifest's sha256 and size, except on prepared data, which a joiner fetches "
                            "from its peers when this is unset or an empty folder [run.data.path]")
    local.add_argument("--data-cache-bytes", type=int, default=None, metavar="BYTES",
                       help=config_help("prepared data: a joiner without a local copy (no --data-path, or "
                                        "an empty folder) fetches data.json, the tokenizer and then only the "
                                        "shards its own next batches read from the run's peers, each "
                                        "verified by sha256, into <data_dir>/data-cache (or the empty "
                                        "--data-path folder); this caps that cache's size, least recently "
                                        "used shards going first; it must hold the largest shard",
                                        "run.data.cache_bytes"))
    local.add_argument("--init-from", type=Path, default=None, metavar="DIR",
                       help=config_help("start from a local Hugging Face LlamaForCausalLM checkpoint "
                                        "directory (config.json + model.safetensors) instead of the seed "
                                        "init. Founders: its config.json sets the model (no --preset) and "
                                        "the manifest names its weights and files by sha256. Joiners may "
                                        "omit it: the files are then fetched from the bootstrap peer into "
                                        "<data_dir>/init (a temporary folder without a data dir), verified; "
                                        "or pass their own copy, checked against the weights hash",
                                        "run.init_from"))
    local.add_argument("--comm-delay", type=float, default=0.0, metavar="SECONDS",
                       help="BENCHMARK KNOB, not for real runs: hold this peer's own announcement back by "
                            "SECONDS after its payload is ready, as if the upload took that long, to emulate "
                            "a slow link on loopback (bench/overlap.py) (default 0)")
    bad = p.add_argument_group("fault injection (demos and tests of peer scoring; never in real runs)")
    bad.add_argument("--fault", default=None, metavar="SPEC",
                     help="make this peer degraded or malicious: what it announces and serves is its honest "
                          f"payload rewritten by node/faults.py. SPEC is one of: {fault_usage()}. E.g. "
                          "sign-flip=100, scale=100 (needs --values bf16/fp32/int8: 1-bit values erase "
                          "magnitudes on the wire), silent, equivocate")
    bad.add_argument("--fault-start", type=int, default=0, metavar="STEP",
                     help="behave honestly before this step (default 0)")
    p.set_defaults(func=run_join)


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    """The flags as dotted config fields (None: not given, so lower layers show through)."""
    def tup(values: list[str] | None) -> tuple[str, ...] | None:
        return tuple(values) if values else None

    return {
        "data_dir": args.data_dir,
        "network.bootstrap": tup(args.bootstrap),
        "network.listen": tup(args.listen),
        "network.announce_addrs": tup(args.announce),
        "network.upnp": False if args.no_upnp else None,
        "network.payload_fetch": args.payload_fetch,
        "network.key_file": args.key_file,
        "network.ticket": args.ticket,
        "run.admission": args.admission,
        "run.rounds.round_timeout_seconds": args.round_timeout,
        "run.rounds.leader_timeout_seconds": args.leader_timeout,
        "run.rounds.liveness_timeout_seconds": args.liveness_timeout,
        "run.rounds.warmup_rounds": args.warmup_rounds,
        "run.rounds.max_included": args.max_included,
        "log_level": args.log_level,
        "metrics.host": args.metrics_host,
        "metrics.port": args.metrics_port,
        "metrics.enabled": False if args.no_metrics else None,
        "checkpoint.every_steps": args.checkpoint_every,
        "run.model": args.preset,
        "run.strategy": args.strategy,
        "run.batch_size": args.batch_size,
        "run.seq_len": args.seq_len,
        "run.seed": args.seed,
        "run.data.seed": args.data_seed,
        "run.data.kind": args.data_kind,
        "run.data.path": args.data_path,
        "run.data.cache_bytes": args.data_cache_bytes,
        "run.init_from": args.init_from,
        "run.data.token_dtype": args.token_dtype,
        "run.grad_clip": args.grad_clip,
        "run.grad_accum": args.grad_accum,
        "device": args.device,
        "precision": args.precision,
        "run.strategy_settings.schedule.kind": args.schedule,
        "run.strategy_settings.schedule.warmup_steps": args.warmup_steps,
        "run.strategy_settings.schedule.total_steps": args.total_steps,
        "run.strategy_settings.schedule.min_lr_ratio": args.min_lr_ratio,
        "run.strategy_settings.schedule.lr": args.lr,
        "run.strategy_settings.topk": args.topk,
        "run.strategy_settings.value_codec": args.values,
        "run.strategy_settings.overlapped": True if args.overlap else None,
    }


def _check(args: argparse.Namespace) -> bytes | None:
    for name in ("steps", "genesis_peers", "threads"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')}", f"must be >= 1, got {value}")
    if not args.comm_delay >= 0:
        raise UsageError("--comm-delay", f"must be >= 0 seconds, got {args.comm_delay}")
    if args.run_id is None:
        return None
    try:
        run_id = bytes.fromhex(args.run_id)
    except ValueError:
        raise UsageError("--run-id", "must be 64 hex characters") from None
    if len(run_id) != 32:
        raise UsageError("--run-id", "must be 64 hex characters")
    return run_id


def _fault(args: argparse.Namespace) -> FaultSpec | None:
    if args.fault is None:
        if args.fault_start != 0:
            raise UsageError("--fault-start", "needs --fault")
        return None
    try:
        return FaultSpec.parse(args.fault, start_step=args.fault_start)
    except FaultSpecError as exc:
        raise UsageError("--fault" if args.fault_start >= 0 else "--fault-start", str(exc)) from None


def run_join(args: argparse.Namespace) -> int:
    expected = _check(args)
    fault = _fault(args)
    settings = load_join_settings(args.config, _flags(args))
    cfg = settings.config
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    configure_logging(cfg.log_level, args.log_format)
    import torch
    import trio
    from distro_node.node.peer.node import PeerError, PeerNode, PeerOptions

    torch.set_num_threads(args.threads)
    for directory in (settings.data_dir, settings.key_file.parent if settings.key_file else None):
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
    bootstrap = cfg.network.bootstrap
    local = LocalSettings.from_config(cfg)
    manifest = None if bootstrap else founder_manifest(settings)
    if manifest is not None:
        local.micro_batch(manifest.batch_size)  # a founder's bad --grad-accum stops it before the network
    options = PeerOptions(
        manifest=manifest,
        local=local,
        expected_run_id=expected,
        network=cfg.network,
        metrics=cfg.metrics,
        checkpoint=cfg.checkpoint,
        key_file=settings.key_file,
        data_dir=settings.data_dir,
        steps=args.steps,
        genesis_peers=args.genesis_peers,
        log_format=args.log_format,
        checkpoint_dir=settings.checkpoint_dir,
        comm_delay=args.comm_delay,
        fault=fault,
    )
    try:
        return trio.run(PeerNode(options).run)
    except PeerError as exc:
        print(f"error: {exc}", flush=True)
        return 1

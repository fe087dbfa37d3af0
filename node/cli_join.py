"""`distro-node join`: run one networked training peer (found a run, or join one through a bootstrap peer)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from distro_node.protocol.addrs import split_peer_addr
from distro_node.protocol.errors import TransportError

from .cli_simulate import DEMO_DISTRO_LR, STRATEGIES
from .peer.manifest import RoundSettings, RunManifest
from .peer.output import FORMATS
from .presets import PRESETS


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
    net = p.add_argument_group("network")
    net.add_argument("--bootstrap", action="append", default=[], metavar="MULTIADDR",
                     help="a peer of the run to join, e.g. /ip4/10.0.0.5/tcp/4001/p2p/12D3Koo... "
                          "(repeat for fallbacks); omit to found a new run")
    net.add_argument("--run-id", default=None, metavar="HEX",
                     help="expected run id (sha256 of the manifest, printed by the founder): refuse a "
                          "bootstrap peer that serves another run")
    net.add_argument("--listen", action="append", default=[], metavar="MULTIADDR",
                     help="listen address (default /ip4/127.0.0.1/tcp/0: loopback, any free port; use "
                          "/ip4/0.0.0.0/tcp/4001 to accept peers from other machines); repeatable")
    net.add_argument("--key-file", type=Path, default=None,
                     help="ed25519 identity key file, created if missing (default: DATA_DIR/node.key with "
                          "--data-dir, else a fresh identity per process)")
    net.add_argument("--data-dir", type=Path, default=None,
                     help="directory for this node's persistent files (identity key)")
    run = p.add_argument_group("run (founders only; joiners take these from the run manifest)")
    run.add_argument("--preset", default="tiny", choices=list(PRESETS), help="model preset (default tiny)")
    run.add_argument("--strategy", default="distro", choices=STRATEGIES, help="optimizer (default distro)")
    run.add_argument("--lr", type=float, default=None, help="peak learning rate (default: the strategy's; "
                                                            f"DisTrO on presets: {DEMO_DISTRO_LR})")
    run.add_argument("--topk", type=int, default=None, help="DisTrO: coefficients kept per chunk")
    run.add_argument("--values", default=None, choices=("fp32", "bf16", "int8", "1bit"),
                     help="DisTrO: value coding on the wire")
    run.add_argument("--batch-size", type=int, default=4, help="sequences per peer per step (default 4)")
    run.add_argument("--seq-len", type=int, default=32, help="tokens per sequence (default 32)")
    run.add_argument("--seed", type=int, default=0, help="model init seed (default 0)")
    run.add_argument("--data-seed", type=int, default=0, help="embedded dataset seed (default 0)")
    run.add_argument("--round-timeout", type=float, default=10.0,
                     help="seconds a round collects payloads before closing without missing peers "
                          "(default 10)")
    run.add_argument("--leader-timeout", type=float, default=2.0,
                     help="seconds before the next leader takes over a round whose leader is silent "
                          "(default 2)")
    run.add_argument("--liveness-timeout", type=float, default=5.0,
                     help="seconds without a heartbeat after which a peer is no longer waited for "
                          "(default 5)")
    run.add_argument("--warmup-rounds", type=int, default=3,
                     help="rounds a newcomer trains without being included (default 3)")
    run.add_argument("--genesis-peers", type=int, default=1,
                     help="start step 0 once this many peers (the founder included) have joined "
                          "(default 1: start at once; later peers join mid-run)")
    local = p.add_argument_group("this process")
    local.add_argument("--steps", type=int, default=None,
                       help="leave gracefully after the swarm's step N is applied (default: run until "
                            "interrupted)")
    local.add_argument("--log-format", default="text", choices=FORMATS,
                       help="text: one readable line per step; json: one JSON object per line (for tools)")
    local.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p.set_defaults(func=run_join)


def _manifest(args: argparse.Namespace) -> RunManifest:
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
    elif args.topk is not None or args.values is not None:
        raise ValueError("--topk and --values apply to --strategy distro only")
    rounds = RoundSettings(round_timeout=args.round_timeout, leader_timeout=args.leader_timeout,
                           liveness_timeout=args.liveness_timeout, warmup_rounds=args.warmup_rounds)
    return RunManifest.found(preset=args.preset, strategy=args.strategy, settings=settings,
                             batch_size=args.batch_size, seq_len=args.seq_len, seed=args.seed,
                             data_seed=args.data_seed, rounds=rounds)


def _check(args: argparse.Namespace) -> bytes | None:
    for name in ("steps", "genesis_peers", "threads", "warmup_rounds"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    for name in ("round_timeout", "leader_timeout", "liveness_timeout"):
        if not getattr(args, name) > 0:
            raise ValueError(f"--{name.replace('_', '-')} must be > 0")
    for addr in args.bootstrap:
        try:
            split_peer_addr(addr)
        except TransportError as exc:
            raise ValueError(f"--bootstrap: {exc}") from None
    if args.run_id is None:
        return None
    try:
        run_id = bytes.fromhex(args.run_id)
    except ValueError:
        raise ValueError("--run-id must be 64 hex characters") from None
    if len(run_id) != 32:
        raise ValueError("--run-id must be 64 hex characters")
    return run_id


def run_join(args: argparse.Namespace) -> int:
    expected = _check(args)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import logging

    import torch
    import trio

    from .peer.node import PeerError, PeerNode, PeerOptions

    torch.set_num_threads(args.threads)
    logging.getLogger("libp2p").setLevel(logging.ERROR)
    key_file = args.key_file
    if key_file is None and args.data_dir is not None:
        args.data_dir.mkdir(parents=True, exist_ok=True)
        key_file = args.data_dir / "node.key"
    options = PeerOptions(
        manifest=None if args.bootstrap else _manifest(args),
        bootstrap=tuple(args.bootstrap),
        expected_run_id=expected,
        listen=tuple(args.listen) or ("/ip4/127.0.0.1/tcp/0",),
        key_file=key_file,
        data_dir=args.data_dir,
        steps=args.steps,
        genesis_peers=args.genesis_peers,
        log_format=args.log_format,
    )
    try:
        return trio.run(PeerNode(options).run)
    except PeerError as exc:
        print(f"error: {exc}", flush=True)
        return 1

"""All-to-all exchange of DisTrO-sized payloads among N peer processes on loopback, over the real stack.

Why: the daemon's step time has a network floor, and an all-gather needs (N-1) x payload of upload per peer
per step. This measures what our libp2p stack (Noise + yamux over TCP, gossip announcements, pulls over
``/distro/payload/1.0.0``) achieves when nothing but the stack limits it, and sets it next to that bound at
given link rates. Each peer is a separate process (bench/_exchange_peer.py), as in a real swarm; on a
2-core machine 8 processes share 2 cores, so the 8-peer figures are CPU-bound, not network-bound.

    .venv/bin/python bench/exchange.py                  # 4 and 8 peers, 2.8 MB, 6 rounds, + hivemind
    .venv/bin/python bench/exchange.py --peers 2 --rounds 2 --size 100000 --out /tmp/x.json   # smoke
    .venv/bin/python bench/exchange.py --netns home      # as root: shaped namespaces -> exchange_netns.json
    .venv/bin/python bench/exchange.py --netns mixed --pieces   # piece swarm -> exchange_netns_pieces.json
    .venv/bin/python bench/exchange.py --netns mixed --pieces --rate-scale 0.25 --dilate   # the same swarm
                                                 # 4x slower: links, queues and protocol timers alike

Round 0 includes connection warm-up (yamux window growth) and is reported separately. Every child process
is killed by pid when its configuration ends, whatever happened. The same run then measures hivemind's bulk
path and dense all-reduce on the same peer counts and payload (bench/_exchange_hivemind.py, in its own
venv; ``--no-hivemind`` skips it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from _common import RESULTS_DIR, BenchError, write_json
from _exchange_hivemind import measure
from _exchange_netns import run_netns
from _exchange_run import run_config, summarize
from distro_node.protocol.pieces_wire import PIECES_PROTOCOL

PAYLOAD_BYTES = 2_800_000  # the 1.2B DisTrO payload, see bench/results/payload.json
REFERENCE_LINKS_MBIT = (10.0, 100.0)  # home upload, home download / datacenter-lite


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peers", default="4,8", help="comma-separated peer counts (default 4,8)")
    ap.add_argument("--rounds", type=int, default=6, help="rounds per configuration (default 6)")
    ap.add_argument("--size", type=int, default=PAYLOAD_BYTES, help="payload bytes (default 2.8 MB)")
    ap.add_argument("--link-mbit", default=",".join(f"{r:g}" for r in REFERENCE_LINKS_MBIT),
                    help="comma-separated link rates for the (N-1) x payload / rate bound (default 10,100)")
    ap.add_argument("--wall", type=float, default=600.0, help="seconds allowed per configuration")
    ap.add_argument("--out", type=Path, default=None, help="JSON path (default bench/results/exchange.json)")
    ap.add_argument("--netns", metavar="PROFILE", default=None,
                    help="as root: run each peer in its own network namespace with links shaped by the "
                         "testbed profile (home, gigabit, slow, mixed) and write bench/results/"
                         "exchange_netns.json instead (bench/_exchange_netns.py)")
    ap.add_argument("--pieces", action="store_true",
                    help=f"with --netns: fetch in pieces from every peer ({PIECES_PROTOCOL}, the piece "
                         "swarm) and write bench/results/exchange_netns_pieces.json")
    ap.add_argument("--no-turns", action="store_true",
                    help="with --pieces: fetchers ignore busy holders' retry-after and ask each holder per "
                         "payload (the swarm before protocol/swarm_turns.py), to compare; written to "
                         "exchange_netns_pieces_noturns.json")
    ap.add_argument("--rate-scale", type=float, default=1.0, metavar="F",
                    help="with --netns: every link at F times the profile's rates (0 < F <= 1; results "
                         "under PROFILE@F): a machine with fewer cores than peers measures the schedule, "
                         "not its CPU (node/testbed/links.py, profile_links)")
    ap.add_argument("--tcp-congestion", default=None, metavar="NAME",
                    help="with --netns: every peer's namespace sends with this TCP congestion control "
                         "(e.g. cubic; results under PROFILE+NAME), one the kernel offers and allows in "
                         "namespaces (net.ipv4.tcp_allowed_congestion_control); default: what namespaces "
                         "inherit from the host, recorded in the JSON's machine section")
    ap.add_argument("--dilate", action="store_true",
                    help="with --pieces and --rate-scale F: the same swarm in slower time, not only slower "
                         "links: every peer's pieces-protocol durations times 1/F and its prior rate times F "
                         "(PiecesConfig.dilated) and the bench's re-publishing times 1/F, every link's queue "
                         "and burst the bytes they hold at the profile's rates; results under "
                         "PROFILE@F+dilated")
    ap.add_argument("--capture-uplink", type=int, default=None, metavar="I",
                    help="with --netns, as root with tcpdump: capture peer I's outbound frames during each "
                         "configuration and report them by kind (bulk, control, acknowledgement; "
                         "node/testbed/capture.py) as the row's uplink_capture")
    ap.add_argument("--keep-logs", type=Path, default=None, metavar="DIR",
                    help="with --netns: each peer's stderr (DEBUG for the piece fetch) in DIR/N/peerI.log")
    ap.add_argument("--hivemind-python", type=Path, default=None, metavar="PATH",
                    help="python with hivemind 1.1.12 for the side-by-side run (default .venv-hivemind/bin/"
                         "python, created when missing; bench/_exchange_hivemind.py)")
    ap.add_argument("--no-hivemind", action="store_true", help="skip the hivemind side-by-side run")
    args = ap.parse_args(argv)
    if args.no_turns and not args.pieces:
        ap.error("--no-turns needs --pieces")
    if args.rate_scale != 1.0 and args.netns is None:
        ap.error("--rate-scale needs --netns PROFILE")
    if args.tcp_congestion is not None and args.netns is None:
        ap.error("--tcp-congestion needs --netns PROFILE")
    if args.capture_uplink is not None and args.netns is None:
        ap.error("--capture-uplink needs --netns PROFILE")
    if args.dilate and (not args.pieces or not 0 < args.rate_scale < 1):
        ap.error("--dilate needs --pieces and a --rate-scale below 1")
    if args.netns is not None:
        return run_netns(args)
    if args.pieces:
        ap.error("--pieces needs --netns PROFILE")
    try:
        counts = [int(x) for x in args.peers.split(",")]
        links = tuple(float(x) for x in args.link_mbit.split(",") if x)
    except ValueError as exc:
        ap.error(f"bad number: {exc}")
    rows: list[dict[str, Any]] = []
    for n in counts:
        try:
            per_peer = run_config(n, args.rounds, args.size, args.wall)
        except BenchError as exc:
            rows.append({"peers": n, "error": str(exc)})
            print(f"{n} peers: FAILED: {exc}")
            continue
        row = summarize(n, args.rounds, args.size, per_peer, links)
        rows.append(row)
        print(f"{n} peers x {args.size / 1e6:.2f} MB: median round {row['median_round_s']:.3f} s, p90 "
              f"{row['p90_round_s']:.3f} s, {row['download_MBps_per_peer']:.1f} MB/s down and up per peer; "
              f"bound {row['bound_s']}")
    hivemind: dict[str, Any] = {"status": "skipped (--no-hivemind)"}
    if not args.no_hivemind:
        hivemind = measure(args.hivemind_python, counts, args.rounds, args.size, args.wall, links,
                           presets=("tiny", "small"))
    doc = {
        "what": "all-to-all exchange over host + gossip announcements + /distro/payload/1.0.0 pulls, "
                "one process per peer, loopback",
        "results": rows,
        "hivemind": hivemind,
        "netns": NETNS,
    }
    path = write_json(args.out or RESULTS_DIR / "exchange.json", doc)
    print(f"wrote {path}")
    return 0 if all("error" not in r for r in rows) else 1


NETNS: dict[str, str] = {
    "status": "measured separately",
    "see": "bench/results/exchange_netns.json, written by `bench/exchange.py --netns PROFILE` (as root: each "
           "peer in its own network namespace, tc tbf links, node/testbed/netns.py)",
}


if __name__ == "__main__":
    sys.exit(main())

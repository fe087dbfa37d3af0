"""bench/exchange.py --netns PROFILE: the same all-to-all exchange with every peer behind a shaped link.

Why: on loopback the exchange is CPU-bound; behind a 10 Mbit uplink the physical floor of a round is the
upload of N-1 copies of one's payload, (N-1) x payload / upload rate. This runs the unchanged exchange peers
(bench/_exchange_peer.py) in the namespace testbed (node/testbed/netns.py: peer i in its own namespace, tbf on
both ends of its veth) and reports the median round time against that bound. For a profile with uneven links
(``mixed``) the bound uses the slowest uplink, which every round waits for.

Before each configuration one bulk TCP transfer checks the first peer's uplink really runs at its rate
(TCP goodput is ~95.7% of the link rate: 1448 payload bytes per 1514 on the wire, which tbf counts).
Results go to bench/results/exchange_netns.json, one entry per profile (other profiles' entries, and rows of
peer counts not run, are kept), so the loopback figures of exchange.json are never overwritten by a
namespace run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _common import RESULTS_DIR, BenchError, write_json
from _exchange_run import run_config, summarize
from distro_node.node.testbed.capture import UplinkCapture, classify
from distro_node.node.testbed.capture import available as capture_available
from distro_node.node.testbed.links import profile_links, profile_name, tbf_args
from distro_node.node.testbed.netns import NetnsError, Network, check_congestion_control, ready_for_bench
from distro_node.protocol.pieces import piece_count
from distro_node.protocol.pieces_wire import PIECES_PROTOCOL
from distro_node.protocol.transfer import PAYLOAD_PROTOCOL

TARGET_RATIO = 1.3
CHECK_SECONDS = 3.0


def _swarm_figures(peers: int, rounds: int, size: int, results: list[dict[str, Any]]) -> dict[str, Any]:
    """What the piece swarm moved over the whole run: bytes downloaded per byte needed, and the upload
    spread (max over mean of the peers' piece bytes served)."""
    uploaded = [r.get("uploaded", 0) for r in results]
    downloaded = sum(r.get("downloaded", 0) for r in results)
    mean_up = sum(uploaded) / len(uploaded) if uploaded else 0
    # CPU seconds all peers spent per round (set-up and barriers included): against the round time and
    # this machine's cores it says whether the testbed measured the links or the CPU.
    cpu = sum(r.get("cpu_s", 0.0) for r in results) / rounds
    # Piece requests the holders refused as busy, per piece moved (protocol/swarm_turns.py).
    pieces = peers * (peers - 1) * piece_count(size) * rounds
    refused = sum(r.get("refused", 0) for r in results)
    return {"amplification": round(downloaded / (peers * (peers - 1) * size * rounds), 4),
            "upload_spread": round(max(uploaded) / mean_up, 3) if mean_up else None,
            # Per peer, in the profile's link order: what its uplink carried of piece bytes, in payloads
            # per round (an origin that sends each of its pieces once and relays nothing has 1.0).
            "uploaded_payloads_per_round": [round(u / (size * rounds), 2) for u in uploaded],
            "cpu_s_per_round": round(cpu, 2), "cores": os.cpu_count(),
            "refused_per_piece": round(refused / pieces, 2),
            # Per peer, in link order: piece uploads it began that the fetcher gave up on, per round; the
            # bytes they had sent carried nothing (protocol/swarm_fetch.py ``_known_rate``).
            "uploads_cut_per_round": [round(r.get("cut", 0) / rounds, 2) for r in results],
            # Per peer, in link order: whole pieces served per round, by kind (protocol/pieces_serve.py).
            "pieces_served_per_round": [_per_round(r.get("served_by_kind", {}), rounds) for r in results],
            # Per peer, in link order: median over rounds of the time from the round's start to the end of its
            # last piece upload in it; the round ends a tail after the slow origins' serving ends.
            "serving_ends_s_by_peer": [_median(r.get("serving_s", [])) for r in results],
            # Per peer, in link order: the same to the end of its last first copy of its own payload; and
            # what a round is made of: the last first copy anyone sent (the bytes only one peer held), then
            # the tail until the median peer held everything (medians over the rounds after the first).
            "own_first_ends_s_by_peer": [_median(r.get("own_first_s", [])) for r in results],
            **_last_copy_and_tail(results),
            # Per peer, in link order: gossip copies held on a slow uplink per round, and those of them sent
            # when the hold ended (protocol/gossip_uplink.py); the rest were spared.
            "gossip_held_per_round": [round(r.get("forwards_held", 0) / rounds, 1) for r in results],
            "gossip_held_sent_per_round": [round(r.get("forwards_late", 0) / rounds, 1) for r in results]}


def _last_copy_and_tail(results: list[dict[str, Any]]) -> dict[str, float | None]:
    """Per round after the first: the latest any peer's own first copies ended, and from then until the
    median peer's round ended (each peer's times count from its own start of the round)."""
    ends = [r.get("own_first_s", []) for r in results]
    times = [r.get("times", []) for r in results]
    rounds = min(len(x) for x in (*ends, *times)) if results else 0
    last = [max(e[i] for e in ends) for i in range(1, rounds)]
    tail = [statistics.median(t[i] for t in times) - last[i - 1] for i in range(1, rounds)]
    return {"last_first_copy_s": _median(last), "tail_after_last_first_copy_s": _median(tail)}


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def _per_round(counts: dict[str, int], rounds: int) -> dict[str, float]:
    return {kind: round(n / rounds, 1) for kind, n in counts.items()}


@contextlib.contextmanager
def _uplink_capture(net: Network, peer: int | None, out: dict[str, Any]) -> Iterator[None]:
    """With ``peer``: its uplink captured while the block runs, sorted by kind of frame into ``out``
    (node/testbed/capture.py ``classify``) once it ends; the capture file goes with its temporary folder."""
    if peer is None:
        yield
        return
    with tempfile.TemporaryDirectory(prefix="uplink") as folder:
        pcap = Path(folder) / "uplink.pcap"
        capture = UplinkCapture(net, peer, pcap)
        try:
            capture.start()
        except NetnsError as exc:
            raise BenchError(f"--capture-uplink: {exc}") from exc
        try:
            yield
        finally:
            capture.stop()
        out.update(classify(pcap))


def run_netns(args: argparse.Namespace) -> int:
    if not ready_for_bench("--netns"):
        return 2
    try:
        counts = [int(x) for x in args.peers.split(",")]
        profile_links(args.netns, 2, args.rate_scale)
        check_congestion_control(args.tcp_congestion)
        if args.capture_uplink is not None and not 0 <= args.capture_uplink < min(counts):
            raise ValueError(f"--capture-uplink {args.capture_uplink}: no such peer in {min(counts)}")
    except ValueError as exc:
        print(f"error: {exc}")
        return 2
    why = None if args.capture_uplink is None else capture_available()
    if why is not None:
        print(f"error: --capture-uplink {why}")
        return 2
    name = profile_name(args.netns, args.rate_scale)
    if args.tcp_congestion is not None:  # never under the name of the host's own congestion control's runs
        name += f"+{args.tcp_congestion}"
    time_scale = 1 / args.rate_scale if args.dilate else 1.0
    if args.dilate:
        name += "+dilated"
    rows: list[dict[str, Any]] = []

    def per_round(nbytes: float) -> float:
        """Bytes a link sent over the run, in payloads a round (start-up and first round included)."""
        return nbytes / (args.size * args.rounds)

    for n in counts:
        links = profile_links(args.netns, n, args.rate_scale)
        up = min(link.up_mbit for link in links)
        results: list[dict[str, Any]] = []
        try:
            with Network(links, tcp_congestion=args.tcp_congestion, time_scale=time_scale) as net:
                check = net.measure([0], 1, CHECK_SECONDS)
                before = [net.uplink_counters(i) for i in range(n)]
                before_down = [net.downlink_counters(i)["drops"] for i in range(n)]
                captured: dict[str, Any] = {}
                with _uplink_capture(net, args.capture_uplink, captured):
                    extra = (*(("--pieces",) if args.pieces else ()),
                             *(("--no-turns",) if args.no_turns else ()),
                             *(("--time-scale", f"{time_scale:g}") if args.dilate else ()),
                             *(("--log-level", "debug") if args.keep_logs else ()))
                    logs = None if args.keep_logs is None else args.keep_logs / f"{n}"
                    per_peer = run_config(n, args.rounds, args.size, args.wall, net, extra=extra,
                                          results=results, log_dir=logs)
                sent = [{k: v - was[k] for k, v in net.uplink_counters(i).items()}
                        for i, was in enumerate(before)]
                dropped_down = [net.downlink_counters(i)["drops"] - was for i, was in enumerate(before_down)]
        except BenchError as exc:
            rows.append({"peers": n, "error": str(exc)})
            print(f"{n} peers: FAILED: {exc}")
            continue
        row = summarize(n, args.rounds, args.size, per_peer, (up,))
        bound = row.pop("bound_s")[f"{up:g}_mbit"]
        row.update({
            "links_mbit_down_up": [[link.down_mbit, link.up_mbit] for link in links],
            "rate_scale": args.rate_scale,
            # Every duration of the peers' pieces protocol and of the links' queues times this (--dilate).
            "time_scale": time_scale,
            # Per peer, in link order: own announcement to holding all N-1 others (who waits for whom).
            "median_round_s_by_peer": [round(statistics.median(times), 2) for times in per_peer],
            # Per peer, in link order: every byte its shaped uplink sent during the run (frames, headers,
            # acknowledgements, gossip), in payloads per round, start-up and first round included.
            "uplink_payloads_per_round": [round(per_round(c["bytes"]), 2) for c in sent],
            "uplink_drops": [c["drops"] for c in sent],
            "tcp_congestion": args.tcp_congestion,  # None: the host's, machine.tcp_congestion_control
            # Frames dropped on the way to each peer: each hole has the peer acknowledge every segment
            # until it is filled, on its own uplink.
            "downlink_drops": dropped_down,
            "slowest_upload_mbit": up,
            "peer0_to_peer1_tcp_mbit": check["mbit"],
            "bound_s": bound,
            "ratio_to_bound": round(row["median_round_s"] / bound, 3),
            "target_ratio": TARGET_RATIO,
        })
        if args.pieces:
            row.update(_swarm_figures(n, args.rounds, args.size, results))
        if captured:
            by_kind = {kind: round(per_round(v["bytes"]), 3) for kind, v in captured["kinds"].items()}
            row["uplink_capture"] = {"peer": args.capture_uplink, **captured, "payloads_per_round": by_kind}
        rows.append(row)
        print(f"{name}, {n} peers x {args.size / 1e6:.2f} MB: median round "
              f"{row['median_round_s']:.3f} s (p90 {row['p90_round_s']:.3f} s), bound {bound:.3f} s at "
              f"{up:g} Mbit up: "
              f"{row['ratio_to_bound']:.2f}x (target <= {TARGET_RATIO}); link check {check['mbit']} Mbit/s")
    file = ("exchange_netns_pieces_noturns.json" if args.no_turns else "exchange_netns_pieces.json"
            ) if args.pieces else "exchange_netns.json"
    path = args.out or RESULTS_DIR / file
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        doc = {}
    profiles = doc.get("profiles", {})
    # Rows of peer counts not run this time are kept (each count can be re-measured on its own).
    kept = [r for r in profiles.get(name, {}).get("results", []) if r.get("peers") not in counts]
    widest = profile_links(args.netns, max(counts), args.rate_scale)
    profiles[name] = {
        "results": sorted(kept + rows, key=lambda r: r.get("peers", 0)),
        "tbf": {f"{mbit:g}_mbit": " ".join(tbf_args(mbit, time_scale))
                for mbit in sorted({x for link in widest for x in (link.down_mbit, link.up_mbit)})},
    }
    out = {
        "what": "bench/exchange.py's all-to-all exchange (host + gossip announcements + "
                + (f"{PIECES_PROTOCOL} piece swarm" if args.pieces else f"{PAYLOAD_PROTOCOL} pulls")
                + "), one process per peer, each in its own network namespace "
                "behind a tbf-shaped link "
                "(node/testbed/netns.py); bound = (N-1) x payload / slowest upload rate",
        "profiles": profiles,
    }
    write_json(path, out)
    print(f"wrote {path}")
    return 0 if all("error" not in r for r in rows) else 1

"""What a download's acknowledgements cost the downloader's uplink, on the testbed's 10:1 lines.

Why: a peer on a 20/2 Mbit line that downloads at its full downlink sends an acknowledgement back for
every one or two segments, and those small frames add up to a fifth or more of its 2 Mbit uplink, the very
line its own payload has to leave by. The flow model (bench/flow.py, ``ACK_SHARE``) charges each downloaded
byte that much uplink; this bench measures it. For each receiving line (the profiles' ``slow`` and
``home``) and 1, 3 and 7 gigabit senders at once, bulk TCP runs into the receiver (node/testbed/probe.py)
while its upload token bucket counts what leaves: acknowledgements only, since the probe's receiver sends
nothing else. Each way of reading (``--readers``): ``plain`` takes the bytes as fast as they come, as
py-libp2p did; ``paced`` reads them as the daemon's Noise reader does (protocol/noise_reads.py), which is
what the flow model charges (``model_ack_share_range`` is over its rows when there are any). Writes
bench/results/acks.json; needs root, ip and tc.

    .venv/bin/python bench/acks.py
    .venv/bin/python bench/acks.py --rate-scale 0.25 --lines slow --tcp-congestion bbr --out /tmp/acks.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

from _common import RESULTS_DIR, machine_info, write_json
from distro_node.node.testbed.links import GIGABIT, HOME, SLOW, Link
from distro_node.node.testbed.netns import Network, check_congestion_control, ready_for_bench
from distro_node.protocol.host_config import HostConfig
from flow import EFFICIENCY, SEGMENT_BYTES

LINES = {"slow": SLOW, "home": HOME}
READERS = ("plain", "paced")


def measure(receiver: Link, senders: int, seconds: float, congestion: str | None,
            sender: Link = GIGABIT, paced: float | None = None) -> dict[str, Any]:
    """Bulk TCP from ``senders`` peers on ``sender`` lines into one ``receiver`` line; what its uplink
    carried. ``paced``: the receiver reads as the daemon does, pacing for at most that many seconds."""
    with Network([receiver] + [sender] * senders, tcp_congestion=congestion) as net:
        up0, down0 = net.uplink_counters(0), net.downlink_counters(0)
        got = net.measure(list(range(1, senders + 1)), 0, seconds=seconds, paced=paced)
        up1, down1 = net.uplink_counters(0), net.downlink_counters(0)
    acks = up1["packets"] - up0["packets"]
    ack_bytes = up1["bytes"] - up0["bytes"]
    segments = got["bytes"] / SEGMENT_BYTES
    return {
        "down_mbit": receiver.down_mbit, "up_mbit": receiver.up_mbit, "senders": senders,
        "download_mbit": got["mbit"], "seconds": round(got["seconds"], 3),
        "segments": round(segments), "acknowledgements": acks,
        "segments_per_ack": round(segments / acks, 3) if acks else None,
        "bytes_per_ack": round(ack_bytes / acks, 1) if acks else None,
        # What the acknowledgements took of the uplink while the download ran at this rate.
        "uplink_share": round(ack_bytes * 8 / (receiver.up_mbit * 1e6 * got["seconds"]), 4),
        # The flow model's unit: uplink capacity (payload bytes' worth) per payload byte downloaded.
        "model_ack_share": round(ack_bytes / got["bytes"] * EFFICIENCY, 5),
        "downlink_drops": down1["drops"] - down0["drops"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", default=",".join(LINES), help="receiving lines, of: " + ", ".join(LINES))
    ap.add_argument("--senders", default="1,3,7", help="how many gigabit peers send at once")
    ap.add_argument("--seconds", type=float, default=6.0, help="how long each bulk transfer runs")
    ap.add_argument("--readers", default=",".join(READERS),
                    help="how the receiver reads, of: plain (as fast as bytes come), paced (as the daemon's "
                         "Noise reader: HostConfig.read_pace_max_wait, times 1/--rate-scale as the exchange "
                         "bench's --dilate does)")
    ap.add_argument("--rate-scale", type=float, default=1.0,
                    help="every line (the senders' too) at this fraction of its rates (bench/exchange.py's)")
    ap.add_argument("--tcp-congestion", default="cubic",
                    help="the senders' TCP congestion control (cubic: most volunteers' systems)")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR / "acks.json")
    args = ap.parse_args(argv)
    names = [s for s in args.lines.split(",") if s]
    unknown = sorted(set(names) - set(LINES))
    counts = [int(s) for s in args.senders.split(",") if s]
    readers = [s for s in args.readers.split(",") if s]
    if unknown or not names:
        ap.error(f"--lines: unknown {unknown}; choose from {', '.join(LINES)}")
    if not readers or set(readers) - set(READERS):
        ap.error(f"--readers: choose from {', '.join(READERS)}, got {args.readers!r}")
    if not counts or any(not 1 <= k <= 16 for k in counts) or args.seconds <= 0:
        ap.error("--senders must be 1..16 each and --seconds > 0")
    if not 0 < args.rate_scale <= 1:
        ap.error(f"--rate-scale must be in (0, 1], got {args.rate_scale}")
    scale = args.rate_scale
    try:
        check_congestion_control(args.tcp_congestion)
    except ValueError as e:
        ap.error(str(e))
    if not ready_for_bench("bench/acks.py"):
        return 0
    rows = []
    sender = GIGABIT.scaled(scale)
    max_wait = HostConfig.read_pace_max_wait / scale
    for reader in readers:
        for name in names:
            for k in counts:
                paced = max_wait if reader == "paced" else None
                got = measure(LINES[name].scaled(scale), k, args.seconds, args.tcp_congestion, sender, paced)
                rows.append({"line": name, "rate_scale": scale, "reader": reader,
                             "read_pace_max_wait_s": paced, **got})
                print(rows[-1], flush=True)
    modelled = [r for r in rows if r["reader"] == "paced"] or rows
    shares = [r["model_ack_share"] for r in modelled]
    by_reader = {reader: statistics.median(r["model_ack_share"] for r in rows if r["reader"] == reader)
                 for reader in readers}
    write_json(args.out, {"tcp_congestion": args.tcp_congestion, "rows": rows,
                          "model_ack_share_median": statistics.median(shares),
                          "model_ack_share_range": [min(shares), max(shares)],
                          "model_ack_share_median_by_reader": by_reader, "machine": machine_info()})
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What one step's exchange costs at 16 to 1024 peers: the flow model, validated against the testbed.

Why a model: the namespace testbed (bench/exchange.py --netns, bench/internet.py) runs at most a few dozen
daemons on this machine. The model (node/sim/flow_step.py) runs the daemon's own piece scheduler and
holder rule over fluid access links, so where it matches the testbed at N = 4 and 8 it can speak for N
the testbed cannot reach.

Two parts, both in bench/results/flow.json (and flow.png):
- ``validation``: for each testbed measurement found in the given result files (profile, peers, payload
  bytes, communication per step), the model's prediction for the same swarm and the ratio;
- ``predictions``: a home population (every peer 100/10 Mbit) and a mixed one (10% gigabit, 60% home, 30%
  slow 20/2), N = 16 .. 1024, every payload included and with K (``--k``); per configuration the step's
  exchange seconds, the swarm bound, the bytes each peer uploads and downloads. Without K the model is run
  up to ``--full-max`` peers (each of N peers fetching N - 1 payloads is N^2 fetches), with K up to
  ``--k-max``; beyond them the entry gives the bound scaled by the ratio model/bound at the largest N
  simulated in this run or kept from earlier ones, marked ``extrapolated``.

The output is written again after every configuration, so a run stopped part way keeps what it simulated,
and a later run (``--sizes 512 --k-max 512``, say) adds to it.

    .venv/bin/python bench/flow.py                                   # predictions only
    .venv/bin/python bench/flow.py --validate bench/results/exchange_netns_pieces.json --sizes ''
    .venv/bin/python bench/flow.py --sizes 16,64 --k 8 --out /tmp/flow.json   # a quick look
    .venv/bin/python bench/flow.py --sizes '' --merge /tmp/home.json /tmp/mixed.json   # join parallel runs
    .venv/bin/python bench/flow.py --sizes '' --merge /tmp/home.json --replace --note '...'  # model changed
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import RESULTS_DIR, BenchError, write_json
from distro_node.node.sim.flow_net import Line
from distro_node.node.sim.flow_spec import ExchangeSpec, daemon_settings, swarm_bound
from distro_node.node.sim.flow_step import simulate_exchange
from distro_node.node.sim.flow_topology import full_mesh, random_graph
from distro_node.node.testbed.links import GIGABIT, HOME, SLOW, profile_links
from distro_node.node.testbed.links import Link as TestbedLink
from distro_node.protocol.consensus.config import DEFAULT_INCLUSION_FETCH_MARGIN
from distro_node.protocol.host_config import HostConfig
from distro_node.protocol.pieces_wire import PiecesConfig

# Payload bytes per wire byte on a TCP/IP link of 1514-byte frames carrying 1448 bytes each; the testbed's
# measured TCP rates are 96-97% of nominal (node/testbed/links.py).
FRAME_BYTES = 1514
SEGMENT_BYTES = 1448
EFFICIENCY = SEGMENT_BYTES / FRAME_BYTES
# Uplink spent acknowledging a downloaded byte, in the same payload units: a 67-byte acknowledgement per
# 2.9 segments of full frames. bench/acks.py measures it on the testbed's 20/2 and 100/10 lines downloading
# at their full rate from 1, 3 and 7 cubic senders into the daemon's paced Noise reader
# (bench/results/acks.json: 0.0070-0.0165, the most with 7 senders into a 20/2 line); the testbed's
# capture of a slow peer among 8 mixed ones found 0.0147-0.0161 (docs/benchmarks.md), which this takes.
ACK_SHARE = 67 / (FRAME_BYTES * 2.9)
PAYLOAD_BYTES = 1_450_000  # the figure for the testbed runs; bench/results/payload.json has more
TESTBED_LATENCY = 0.0005  # one way, a veth hop through a bridge
INTERNET_LATENCY = 0.025  # one way: 50 ms round trips, a typical path between two home lines
SIZES = (16, 32, 64, 128, 256, 512, 1024)


def line(link: TestbedLink) -> Line:
    return Line.mbit(link.down_mbit, link.up_mbit, EFFICIENCY, ACK_SHARE)


def population(kind: str, n: int) -> list[Line]:
    """``home``: all 100/10; ``mixed``: 10% gigabit, 60% home, 30% slow, spread evenly over the ids."""
    if kind == "home":
        return [line(HOME)] * n
    if kind == "mixed":
        cycle = [GIGABIT] + [HOME] * 6 + [SLOW] * 3  # 10 peers: 1 / 6 / 3
        return [line(cycle[(i * 7) % 10]) for i in range(n)]
    raise BenchError(f"population must be home or mixed, got {kind!r}")


def wants_for(n: int, k: int) -> tuple[frozenset[int], ...]:
    """Who fetches whom in one step: everyone, or (with K) the K + margin authors the rule puts first.
    In steady state the rule cycles through the swarm, so which K does not matter to the exchange's cost;
    the first ids stand for them."""
    if k <= 0 or k >= n:
        return full_mesh(n)
    chosen = frozenset(range(min(n, k + DEFAULT_INCLUSION_FETCH_MARGIN)))
    return tuple(chosen - {i} for i in range(n))


def run_one(lines: list[Line], k: int, latency: float, payload_bytes: int = PAYLOAD_BYTES,
            seed: int = 0, pieces: PiecesConfig | None = None) -> dict[str, Any]:
    """``pieces``: the daemons' settings (default: PiecesConfig's), e.g. a dilated run's."""
    n = len(lines)
    wants = wants_for(n, k)
    spec = ExchangeSpec(lines=tuple(lines), payload_bytes=payload_bytes, wants=wants,
                        neighbours=random_graph(n, HostConfig().max_peers, seed), latency=latency,
                        **daemon_settings(pieces or PiecesConfig()))
    started = time.perf_counter()
    # A step after the first: the rates each peer measured in an earlier step (here: the same exchange run
    # once before) and its own time per uploaded piece decide who gets first copies, as the daemon keeps
    # both across steps.
    warm = simulate_exchange(spec)
    result = simulate_exchange(spec, rates=warm.rates, piece_seconds=warm.piece_seconds)
    wall = time.perf_counter() - started
    bound = swarm_bound(lines, payload_bytes, wants)
    uploads = sorted(result.uploaded)
    # The median fetcher's exchange: what a testbed run's median round measures. ``seconds`` is the last
    # fetcher's, the step's exchange as a whole.
    median = statistics.median(d for d, w in zip(result.done_at, wants, strict=True) if w)
    return {
        "peers": n, "k": k, "seconds": round(result.seconds, 3), "median_s": round(median, 3),
        "bound_s": round(bound, 3),
        "ratio": round(result.seconds / bound, 3) if bound else None,
        "amplification": round(result.amplification, 4),
        "upload_max_bytes": int(uploads[-1]), "upload_mean_bytes": int(sum(uploads) / n),
        "download_max_bytes": int(max(result.downloaded)), "model_wall_s": round(wall, 2),
    }


def predictions(kinds: list[str], sizes: list[int], ks: list[int], full_max: int, k_max: int,
                done: Callable[[list[dict[str, Any]]], object]) -> list[dict[str, Any]]:
    """Rows for every configuration; ``done(rows)`` after each simulated one. Extrapolated rows carry
    only their bound here: :func:`merged` scales it by the ratio of the largest N simulated below."""
    rows: list[dict[str, Any]] = []
    for kind in kinds:
        for k in [0, *ks]:
            for n in sizes:
                lines = population(kind, n)
                if n > (full_max if k == 0 else k_max):
                    bound = swarm_bound(lines, PAYLOAD_BYTES, wants_for(n, k))
                    rows.append({"population": kind, "peers": n, "k": k, "bound_s": round(bound, 3),
                                 "seconds": None, "extrapolated": True})
                    continue
                row = {"population": kind, **run_one(lines, k, INTERNET_LATENCY)}
                rows.append(row)
                done(rows)  # first: a row printed is a row saved
                print(json.dumps(row), flush=True)
    return rows


def merged(*runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (population, peers, K): the first run's that has one, except that a simulated row
    replaces an extrapolated one wherever it comes from; extrapolated rows are then scaled from the largest
    N simulated below them, and left out where there is none."""
    out: dict[tuple[str, int, int], dict[str, Any]] = {}
    for rows in runs:
        for r in rows:
            key = (r["population"], r["peers"], r["k"])
            have = out.get(key)
            if have is None or (have.get("extrapolated") and not r.get("extrapolated")):
                out[key] = r
    rows = sorted(out.values(), key=lambda r: (r["population"], r["k"], r["peers"]))
    last: dict[tuple[str, int], float] = {}  # the ratio at the largest N simulated so far
    out_rows = []
    for r in rows:
        series = (r["population"], r["k"])
        if not r.get("extrapolated"):
            last[series] = r["seconds"] / r["bound_s"]
        elif series in last:
            r = {**r, "seconds": round(r["bound_s"] * last[series], 3)}
        else:
            continue
        out_rows.append(r)
    return out_rows


def validation(files: list[Path]) -> list[dict[str, Any]]:
    """Model against every testbed row found in bench/exchange.py's ``--netns PROFILE --pieces`` results
    (exchange_netns_pieces.json): the same profile, peer count and payload, every payload fetched by every
    other peer; measured is the median round (own announcement to holding all N-1 others). ``error`` sets
    the model's last fetcher against it (how earlier results were checked), ``error_median`` its median
    fetcher, the same statistic."""
    rows: list[dict[str, Any]] = []
    for path in files:
        doc = json.loads(path.read_text())
        # A bench/exchange.py result file, or one that gathers several runs of it (``runs``: each with its
        # profile and results, as results/exchange_netns_congestion.json)
        runs = [(run["profile"], run) for run in doc.get("runs", []) if "profile" in run]
        entries = sorted(doc.get("profiles", {}).items()) + runs
        for profile, entry in entries:
            for measured in entry.get("results", []):
                if "median_round_s" not in measured:
                    continue  # a configuration that failed
                n, size = measured["peers"], measured["payload_bytes"]
                # The links the run had (a run at a rate scale, ``mixed@0.2``, names them; older rows do not)
                links = ([TestbedLink(down, up) for down, up in measured["links_mbit_down_up"]]
                         if "links_mbit_down_up" in measured else profile_links(profile, n))
                lines = [line(link) for link in links]
                # A dilated run (bench/exchange.py --dilate): its daemons' settings, dilated alike.
                time_scale = measured.get("time_scale", 1.0)
                model = run_one(lines, 0, TESTBED_LATENCY, size, pieces=PiecesConfig().dilated(time_scale))
                got = measured["median_round_s"]
                rows.append({"source": path.name, "profile": profile, "peers": n, "payload_bytes": size,
                             "rate_scale": measured.get("rate_scale", 1.0),
                             "tcp_congestion": measured.get("tcp_congestion"), "time_scale": time_scale,
                             "measured_s": got, "model_s": model["seconds"], "bound_s": model["bound_s"],
                             "measured_over_bound": round(got / model["bound_s"], 3),
                             "error": round(model["seconds"] / got - 1, 3),
                             # Like against like: the model's median fetcher against the median round.
                             "model_median_s": model["median_s"],
                             "error_median": round(model["median_s"] / got - 1, 3),
                             "measured_amplification": measured.get("amplification"),
                             "measured_upload_spread": measured.get("upload_spread"),
                             "model_upload_spread": round(model["upload_max_bytes"]
                                                          / model["upload_mean_bytes"], 3)})
                print(json.dumps(rows[-1]), flush=True)
    return rows


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    series: dict[str, list[tuple[int, float, bool]]] = {}
    for r in rows:
        bound = "all included" if r["k"] == 0 else f"K = {r['k']}"
        series.setdefault(f"{r['population']}, {bound}", []).append(
            (r["peers"], r["seconds"], bool(r.get("extrapolated"))))
    for label, points in series.items():
        points.sort()
        simulated = [p for p in points if not p[2]]
        if not simulated:
            continue
        xs = [p[0] for p in simulated]
        ys = [p[1] for p in simulated]
        drawn = ax.plot(xs, ys, marker="o", linewidth=1.4, label=label)[0]
        if len(simulated) < len(points):  # dashed: the bound times the ratio at the largest simulated N
            rest = points[len(simulated) - 1:]
            ax.plot([p[0] for p in rest], [p[1] for p in rest], linestyle="--", color=drawn.get_color())
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("peers")
    ax.set_ylabel("exchange per step (s)")
    ax.set_title(f"One step's payload exchange, {PAYLOAD_BYTES / 1e6:.2f} MB payloads (flow model)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)),
                    help="peer counts to predict ('' keeps the predictions already in --out)")
    ap.add_argument("--k", default="8,16", help="bounds to predict besides 'all included'")
    ap.add_argument("--populations", default="home,mixed")
    ap.add_argument("--full-max", type=int, default=64,
                    help="largest N simulated with every payload included")
    ap.add_argument("--k-max", type=int, default=128,
                    help="largest N simulated with a bound K (each configuration is run twice, the first "
                         "for the rates the second starts from; K = 8 took about 2 minutes of one core at "
                         "64 peers, 4 at 128, 8-9 at 256, 19-26 at 512, 53 at 1024 (home) beside other work)")
    ap.add_argument("--validate", type=Path, nargs="*", default=[],
                    help="testbed result files to check against (none: keep the validation in --out)")
    ap.add_argument("--merge", type=Path, nargs="*", default=[],
                    help="other flow.py outputs whose predictions join --out's (runs of different sizes or "
                         "populations side by side)")
    ap.add_argument("--replace", action="store_true",
                    help="drop the predictions already in --out (the model changed): only this run's and "
                         "--merge's remain")
    ap.add_argument("--note", default=None,
                    help="what the predictions are of, kept in the JSON (default: the note already in --out)")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR / "flow.json")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    ks = [int(s) for s in args.k.split(",") if s]
    if any(n < 2 for n in sizes) or any(k < 1 for k in ks):
        raise SystemExit("--sizes must be >= 2 and --k >= 1")
    doc: dict[str, Any] = {"payload_bytes": PAYLOAD_BYTES, "efficiency": round(EFFICIENCY, 4),
                           "internet_latency_s": INTERNET_LATENCY, "degree": HostConfig().max_peers}
    try:
        kept = json.loads(args.out.read_text())
    except (OSError, json.JSONDecodeError):
        kept = {}
    doc["validation"] = validation(args.validate) if args.validate else kept.get("validation", [])
    note = kept.get("predictions_note") if args.note is None else args.note
    if note:
        doc["predictions_note"] = note
    earlier = [] if args.replace else kept.get("predictions", [])
    kinds = args.populations.split(",")
    others = [json.loads(path.read_text()).get("predictions", []) for path in args.merge]

    def save(new: list[dict[str, Any]]) -> list[dict[str, Any]]:
        doc["predictions"] = merged(new, *others, earlier)
        write_json(args.out, doc)
        return doc["predictions"]

    rows = save(predictions(kinds, sizes, ks, args.full_max, args.k_max, save) if sizes else [])
    if rows:
        plot(rows, args.out.with_suffix(".png"))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0 if all(math.isfinite(r["seconds"]) for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Full `distro-node join` daemons behind emulated home links: step time against the physical bound.

Why: loopback hides the volunteer's 10 Mbit uplink. Each run starts N daemons in the namespace testbed
(node/testbed/swarm.py: one network namespace per peer, its link shaped with tc tbf, upload on the peer's veth
end, download on the hub's) and trains a bounded number of steps. Per run it reports the median step time
(wall time between consecutive steps, after warm-up), split into compute (forward/backward, DisTrO prepare,
encode), apply (decode and aggregate every payload, update) and communication (the round: announcement to
decided inclusion list), next to the bound (N-1) x payload / upload rate (the slowest uplink for `mixed`).
Communication is further split into waiting (until the last included peer's announcement reached us: the
slowest peer's compute, which on 2 shared cores varies by tenths of a second) and the exchange after it,
which the bound describes exactly: the last announcer's payload still has to cross its uplink N-1 times.

Preset: `small` with DisTrO top-256 of each 4096-coefficient chunk and fp32 values: 365 KB per peer per
step. The default top-4 1-bit payload of any preset that trains on these 2 cores is a few kB (the 20m
preset's is 32 kB against 4.4 s of compute per step), which no uplink notices; 365 KB is about what a
200M-parameter model sends with the default encoding, so the link matters (0.88 s at 10 Mbit up for 4 peers)
while the compute (~0.1-0.5 s per step, depending on the machine's load) still runs here for 8 processes.

Each configuration runs sequentially and overlapped (``join --overlap``); the overlapped figure of merit is
step / max(compute + apply, communication) of the sequential run (where the two are measured apart).

    .venv/bin/python bench/internet.py     # N = 4, 8; every profile; both orders -> results/internet.json
    .venv/bin/python bench/internet.py --peers 3 --profiles home --steps 6 --warmup 2 --out /tmp/i.json

Needs root (network namespaces). Every peer process is killed by pid and every namespace deleted when its
run ends, whatever happened; each run has a wall-clock bound.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import RESULTS_DIR, BenchError, write_json
from distro_node.node.config.schema import PAYLOAD_FETCHES
from distro_node.node.join_process import PeerProc, PeerWaitError
from distro_node.node.sim.flow_net import Line
from distro_node.node.sim.flow_spec import swarm_bound as exchange_bound
from distro_node.node.sim.flow_topology import full_mesh
from distro_node.node.testbed.links import PROFILES, Link, profile_links, profile_name
from distro_node.node.testbed.netns import ready_for_bench
from distro_node.node.testbed.swarm import Testbed

# Round settings generous enough that a round at 2 Mbit up is never cut short: this measures speed, it does
# not test the deadlines (heartbeats and votes queue behind payload bytes on the same connection).
DEFAULT_TOPK = 256


def run_args_for(topk: int) -> list[str]:
    return ["--preset", "small", "--topk", str(topk), "--values", "fp32", "--batch-size", "4",
            "--seq-len", "32", "--round-timeout", "120", "--leader-timeout", "20", "--liveness-timeout", "60"]
COMPUTE_PHASES = ("compute", "prepare", "codec")
APPLY_PHASES = ("apply", "score")
TARGET_COMM_RATIO = 1.3
TARGET_OVERLAP_RATIO = 1.15


def swarm_bound(links: list[Link], payload: int) -> float:
    """The least time in which every peer can hold every other peer's payload when peers pass pieces on
    (the flow model's bound, node/sim/flow_step.py, at the links' nominal rates)."""
    n = len(links)
    return exchange_bound([Line.mbit(link.down_mbit, link.up_mbit) for link in links], payload, full_mesh(n))


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 4) if values else None


def measure(peers: list[PeerProc], warmup: int) -> dict[str, Any]:
    """Medians over every peer's steps after ``warmup``: step interval, compute, apply, round."""
    intervals, compute, apply, comm, wait, payload, recv = [], [], [], [], [], [], []
    uploads: list[float] = []  # each peer's mean payload bytes sent per step
    for p in peers:
        rows = p.steps()
        sent = [rows[s]["sent_bytes"] - rows[s - 1]["sent_bytes"] for s in sorted(rows)
                if s >= warmup and s - 1 in rows]
        if sent:
            uploads.append(statistics.fmean(sent))
        for s in sorted(rows):
            row = rows[s]
            if s < warmup:
                continue
            if s - 1 in rows:
                intervals.append(row["t"] - rows[s - 1]["t"])
                recv.append(row["recv_bytes"] - rows[s - 1]["recv_bytes"])
            phases = row.get("phases", {})
            if row.get("loss") is not None:
                compute.append(sum(phases.get(k, 0.0) for k in COMPUTE_PHASES))
            apply.append(sum(phases.get(k, 0.0) for k in APPLY_PHASES))
            comm.append(phases.get("round", row["round_s"]))
            wait.append(row.get("wait_s", 0.0))
            if row.get("payload_bytes"):
                payload.append(row["payload_bytes"])
    return {"step_s": _median(intervals), "compute_s": _median(compute), "apply_s": _median(apply),
            "comm_s": _median(comm), "wait_s": _median(wait),
            "exchange_s": _median([c - w for c, w in zip(comm, wait, strict=True)]),
            "payload_bytes": int(statistics.median(payload)) if payload else None,
            "recv_bytes_per_peer_step": int(statistics.fmean(recv)) if recv else None,
            # Max over mean of the peers' upload per step: 1.0 when every uplink carries the same.
            "upload_spread": round(max(uploads) / statistics.fmean(uploads), 3)
            if uploads and statistics.fmean(uploads) > 0 else None,
            "included_min": min((r["included"] for p in peers for s, r in p.steps().items() if s >= warmup),
                                default=None)}


def run_one(profile: str, n: int, overlap: bool, steps: int, warmup: int, wall: float,
            log_root: Path, topk: int = DEFAULT_TOPK, fetch: str = PAYLOAD_FETCHES[0],
            rate_scale: float = 1.0) -> dict[str, Any]:
    links = profile_links(profile, n, rate_scale)
    name = profile_name(profile, rate_scale)
    log_dir = Path(tempfile.mkdtemp(prefix=f"{name}-{n}-{'ovl' if overlap else 'seq'}-", dir=log_root))
    run_args = [*run_args_for(topk), *(["--overlap"] if overlap else [])]
    t0 = time.monotonic()
    with Testbed(links, log_dir, run_args, ["--steps", str(steps), "--payload-fetch", fetch]) as bed:
        try:
            peers = bed.start()
            for p in peers:
                p.wait_for(lambda e: e.get("event") == "left", max(1.0, wall - (time.monotonic() - t0)),
                           "leave after the last step")
        except PeerWaitError as exc:
            raise BenchError(str(exc)[:800]) from None
        hashes = {p.steps()[steps - 1]["weights_hash"] for p in peers if steps - 1 in p.steps()}
        row = measure(peers, warmup)
    up = min(link.up_mbit for link in links)
    payload = row["payload_bytes"] or 0
    bound = (n - 1) * payload * 8 / (up * 1e6)
    swarm = swarm_bound(links, payload)
    row.update({
        "profile": name, "peers": n, "overlapped": overlap, "rate_scale": rate_scale,
        "links_mbit_down_up": [[link.down_mbit, link.up_mbit] for link in links],
        "payload_fetch": fetch, "steps": steps, "warmup": warmup,
        "slowest_upload_mbit": up, "bound_s": round(bound, 4), "swarm_bound_s": round(swarm, 4),
        "comm_ratio_to_bound": round(row["comm_s"] / bound, 3) if row["comm_s"] and bound else None,
        "comm_ratio_to_swarm_bound": round(row["comm_s"] / swarm, 3) if row["comm_s"] and swarm else None,
        "exchange_ratio_to_bound": (round(row["exchange_s"] / bound, 3)
                                    if row["exchange_s"] and bound else None),
        # Received bytes over the N-1 payloads a peer needs: > 1 means payloads were downloaded twice.
        "fetch_amplification": round(row["recv_bytes_per_peer_step"] / ((n - 1) * payload), 2)
        if row["recv_bytes_per_peer_step"] and payload else None,
        "final_hashes_equal": len(hashes) == 1, "wall_s": round(time.monotonic() - t0, 1),
        "logs": str(log_dir),
    })
    return row


def _pair(seq: dict[str, Any], ovl: dict[str, Any]) -> dict[str, Any]:
    """Overlap figures of merit from a sequential/overlapped pair of the same configuration."""
    if None in (seq.get("compute_s"), seq.get("apply_s"), seq.get("comm_s"), seq.get("step_s"),
                ovl.get("step_s")):
        return {}
    cpu = seq["compute_s"] + seq["apply_s"]
    return {"profile": seq["profile"], "peers": seq["peers"],
            "sequential_step_s": seq["step_s"], "overlapped_step_s": ovl["step_s"],
            "cpu_s": round(cpu, 4), "comm_s": seq["comm_s"], "bound_s": seq["bound_s"],
            "overlapped_vs_max": round(ovl["step_s"] / max(cpu, seq["comm_s"]), 3),
            "sequential_vs_sum": round(seq["step_s"] / (cpu + seq["comm_s"]), 3),
            "comm_ratio_to_bound": seq["comm_ratio_to_bound"]}


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if "error" not in r]
    labels = sorted({(r["profile"], r["peers"]) for r in ok},
                    key=lambda k: (PROFILES.index(k[0].split("@")[0]), k[0], k[1]))
    fig, ax = plt.subplots(figsize=(max(7.0, 1.3 * len(labels)), 4.5), dpi=110)
    width = 0.38
    for x, (profile, n) in enumerate(labels):
        for r in ok:
            if (r["profile"], r["peers"]) != (profile, n):
                continue
            off = width / 2 if r["overlapped"] else -width / 2
            if not r["overlapped"]:
                bottom = 0.0
                for key, color, name in (("compute_s", "tab:blue", "compute"),
                                         ("apply_s", "tab:cyan", "apply"),
                                         ("comm_s", "tab:orange", "communication")):
                    ax.bar(x + off, r[key] or 0.0, width, bottom=bottom, color=color,
                           label=name if x == 0 else None)
                    bottom += r[key] or 0.0
            else:
                ax.bar(x + off, r["step_s"] or 0.0, width, color="tab:green",
                       label="overlapped step" if x == 0 else None)
            ax.hlines(r["bound_s"], x - width, x + width, colors="black", linestyles="--",
                      label="bound (N-1) x payload / upload" if x == 0 and not r["overlapped"] else "")
    ax.set_xticks(range(len(labels)), [f"{p}\nN={n}" for p, n in labels])
    ax.set_ylabel("seconds per step (median)")
    ax.set_title("full daemons in network namespaces: sequential (split) vs overlapped step")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peers", default="4,8", help="comma-separated peer counts (default 4,8)")
    ap.add_argument("--profiles", default=",".join(PROFILES), help=f"comma-separated ({', '.join(PROFILES)})")
    ap.add_argument("--topk", type=int, default=DEFAULT_TOPK,
                    help=f"DisTrO coefficients kept per 4096-coefficient chunk (default {DEFAULT_TOPK}: "
                    "365 KB payloads; 1024: ~1.5 MB, about the 1.2B model's default payload)")
    ap.add_argument("--steps", type=int, default=12, help="steps per run (default 12)")
    ap.add_argument("--warmup", type=int, default=4, help="steps left out of the medians (default 4)")
    ap.add_argument("--wall", type=float, default=500.0, help="seconds allowed per run (default 500)")
    ap.add_argument("--out", type=Path, default=None, help="JSON path (default bench/results/internet.json)")
    ap.add_argument("--orders", default="sequential,overlapped",
                    help="comma-separated: sequential, overlapped (default both)")
    ap.add_argument("--payload-fetch", default=PAYLOAD_FETCHES[0], choices=PAYLOAD_FETCHES,
                    help=f"how the daemons download payloads (join --payload-fetch; default "
                         f"{PAYLOAD_FETCHES[0]})")
    ap.add_argument("--merge", action="store_true",
                    help="keep the runs already in --out of (profile, peers) this run does not redo, so "
                         "a long matrix can be measured in parts")
    ap.add_argument("--rate-scale", type=float, default=1.0, metavar="F",
                    help="every link at F times the profile's rates (0 < F <= 1; runs named PROFILE@F): "
                         "with fewer cores than peers the profile's own rates measure the daemons' CPU, "
                         "a fifth of them the schedule (node/testbed/links.py, profile_links)")
    args = ap.parse_args(argv)
    if not ready_for_bench("bench/internet.py"):
        return 2
    try:
        counts = [int(x) for x in args.peers.split(",")]
        profiles = [p for p in args.profiles.split(",") if p]
        orders = [o for o in args.orders.split(",") if o]
        if not orders or set(orders) - {"sequential", "overlapped"}:
            raise ValueError(f"--orders takes sequential and/or overlapped, got {args.orders!r}")
        for p in profiles:
            profile_links(p, 2, args.rate_scale)
    except ValueError as exc:
        ap.error(str(exc))
    if not 0 <= args.warmup < args.steps - 1:
        ap.error("need 0 <= --warmup < --steps - 1")
    out = args.out or RESULTS_DIR / "internet.json"
    log_root = Path(tempfile.mkdtemp(prefix="internet-bench-"))
    rows: list[dict[str, Any]] = []
    pairs: list[dict[str, Any]] = []
    if args.merge and out.exists():
        old = json.loads(out.read_text())
        redo = {(profile_name(p, args.rate_scale), n) for p in profiles for n in counts}
        rows = [r for r in old.get("runs", []) if (r["profile"], r["peers"]) not in redo]
        pairs = [r for r in old.get("overlap", []) if (r["profile"], r["peers"]) not in redo]
    for profile in profiles:
        for n in counts:
            pair: dict[bool, dict[str, Any]] = {}
            for overlap in [o == "overlapped" for o in orders]:
                try:
                    row = run_one(profile, n, overlap, args.steps, args.warmup, args.wall, log_root,
                                  topk=args.topk, fetch=args.payload_fetch, rate_scale=args.rate_scale)
                except BenchError as exc:
                    row = {"profile": profile_name(profile, args.rate_scale), "peers": n,
                           "overlapped": overlap, "error": str(exc)}
                    print(f"{row['profile']} N={n} {'overlapped' if overlap else 'sequential'}: "
                          f"FAILED: {exc}", flush=True)
                    rows.append(row)
                    continue
                rows.append(row)
                pair[overlap] = row
                print(f"{row['profile']} N={n} {'overlapped' if overlap else 'sequential'}: "
                      f"step {row['step_s']} s "
                      f"(compute {row['compute_s']}, apply {row['apply_s']}, comm {row['comm_s']} = wait "
                      f"{row['wait_s']} + exchange {row['exchange_s']}); bound {row['bound_s']} s, "
                      f"comm/bound {row['comm_ratio_to_bound']}, exchange/bound "
                      f"{row['exchange_ratio_to_bound']}; swarm bound {row['swarm_bound_s']} s, comm/swarm "
                      f"bound {row['comm_ratio_to_swarm_bound']}; fetch amplification "
                      f"{row['fetch_amplification']}, upload spread {row['upload_spread']}; hashes equal "
                      f"{row['final_hashes_equal']}; {row['wall_s']} s", flush=True)
            if len(pair) == 2 and (merit := _pair(pair[False], pair[True])):
                pairs.append(merit)
                print(f"  overlapped/max(cpu, comm) {merit['overlapped_vs_max']}, sequential/(cpu+comm) "
                      f"{merit['sequential_vs_sum']}", flush=True)
            # after every pair: an interrupted run keeps what it measured
            write_json(out, _doc(rows, pairs, args.topk))
    write_json(out, _doc(rows, pairs, args.topk))
    png = out.with_suffix(".png")
    plot(rows, png)
    print(f"wrote {out} and {png}")
    return 0 if all("error" not in r for r in rows) else 1


def _doc(rows: list[dict[str, Any]], pairs: list[dict[str, Any]], topk: int) -> dict[str, Any]:
    return {
        "what": "full distro-node join daemons, one per network namespace, links shaped with tc tbf "
                "(node/testbed/netns.py); medians over every peer's steps after warm-up",
        "run_args": run_args_for(topk),
        "targets": {"comm_ratio_to_bound": TARGET_COMM_RATIO, "overlapped_vs_max": TARGET_OVERLAP_RATIO,
                    "comm_ratio_to_swarm_bound": TARGET_COMM_RATIO, "fetch_amplification": 1.05,
                    "upload_spread": 1.2},
        "runs": rows,
        "overlap": pairs,
    }


if __name__ == "__main__":
    sys.exit(main())

"""Peers behind home NATs in the emulated internet: are they all included, and what does it cost a step?

Why a bench rather than a test: each configuration runs four real daemons for minutes (a relay reservation
needs the founder confirmed public first, ~50 s), and its figures (steps with every peer included, step
times, hole punches that worked) are measurements to compare, not a yes/no. Per NAT kind (drop, reset,
random source ports) it starts one public founder and three peers behind that kind of router, all on
`home` links (100/10 Mbit), waits until every NAT'd peer holds a relay reservation and every peer has its
reachability verdict (the dial-back probes are over), then records ``--steps`` steps; the baseline is the
same swarm with every peer public (what port forwarding gives).
``payload_relayed_share``: of the payload bytes all peers received over those steps, the part that came over
a relayed connection. Writes bench/results/nat.json. Needs root, ip, tc and nft.

    .venv/bin/python bench/nat.py                        # every kind and the baseline
    .venv/bin/python bench/nat.py --kinds drop --steps 6 --out /tmp/nat.json \
        --keep-logs /tmp/nat --log-level debug          # logs to read: each fetch at debug level
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import RESULTS_DIR, BenchError, write_json
from distro_node.node.join_process import PeerWaitError
from distro_node.node.testbed.debian import install_missing
from distro_node.node.testbed.links import profile_links
from distro_node.node.testbed.nat import Nat
from distro_node.node.testbed.netns import ready_for_bench
from distro_node.node.testbed.swarm import Testbed

RUN = ["--preset", "tiny", "--batch-size", "4", "--seq-len", "32", "--round-timeout", "5",
       "--liveness-timeout", "2"]
PEERS = 4
KINDS = ("drop", "reset", "random")
TARGET_STEP_RATIO = 1.3


def run_one(kind: str | None, steps: int, log_dir: Path, peer_args: list[str]) -> dict[str, Any]:
    """One swarm: ``kind`` None is the all-public baseline."""
    natted = range(1, PEERS) if kind is not None else range(0)
    nats = {i: Nat(kind) for i in natted} if kind is not None else None
    started = time.monotonic()
    with Testbed(profile_links("home", PEERS), log_dir, RUN, peer_args, nats=nats) as bed:
        peers = bed.start()
        for i in natted:
            peers[i].wait_for(lambda e: e.get("event") == "relays" and e["relays"], 180, "a relay")
        # Warm-up ends when every peer also has its reachability verdict: until then dial-back probes run,
        # and steps measured among them (all swarms alike) were up to 3x slower than the ones after.
        for p in peers:
            p.wait_for(lambda e: e.get("event") == "reachability", 180, "a reachability verdict")
        warm = time.monotonic() - started
        warm = time.monotonic() - started
        for p in peers:
            p.poll_events()
        first = max(max(p.steps(), default=0) for p in peers) + 2
        last = first + steps
        for p in peers:
            p.wait_step(last, 60 + 20 * steps)
        rows = [p.steps() for p in peers]
        included = [min(r[s]["included"] for r in rows) for s in range(first, last + 1)]
        identical = all(len({r[s]["weights_hash"] for r in rows}) == 1 for s in range(first, last + 1))
        times = [rows[0][s]["t"] - rows[0][s - 1]["t"] for s in range(first + 1, last + 1)]
        recv = sum(r[last]["recv_bytes"] - r[first]["recv_bytes"] for r in rows)
        relayed = sum(r[last]["recv_relayed_bytes"] - r[first]["recv_relayed_bytes"] for r in rows)
        punches = [max((e.get("successes", 0) for e in p.events if e.get("event") == "holepunch"), default=0)
                   for p in peers]
        attempts = [max((e.get("attempts", 0) for e in p.events if e.get("event") == "holepunch"), default=0)
                    for p in peers]
    return {
        "nat": kind or "none (public, as port forwarding)", "peers": PEERS, "steps": len(included),
        "warmup_s": round(warm, 1), "steps_all_included": sum(1 for c in included if c == PEERS),
        "identical_hashes": identical, "step_s_median": round(statistics.median(times), 3),
        "step_s_max": round(max(times), 3), "holepunch_successes": sum(punches),
        "holepunch_attempts": sum(attempts), "payload_bytes_received": recv,
        "payload_relayed_share": round(relayed / recv, 3) if recv else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kinds", default=",".join(KINDS), help="NAT kinds to run (drop, reset, random)")
    ap.add_argument("--steps", type=int, default=10, help="steps recorded after the warm-up")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR / "nat.json")
    ap.add_argument("--keep-logs", type=Path, default=None,
                    help="keep each swarm's daemon logs under this folder (one subfolder per kind)")
    ap.add_argument("--log-level", default="info", help="the daemons' --log-level (debug shows each fetch)")
    args = ap.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    if any(k not in KINDS for k in kinds) or not 2 <= args.steps <= 100:
        raise SystemExit(f"--kinds from {KINDS}; --steps in 2..100")
    missing = install_missing(("nft",), "nftables")
    if missing is not None:
        print(f"cannot run: {missing}", file=sys.stderr)
        return 2
    if not ready_for_bench("bench/nat.py"):
        return 2
    runs: list[dict[str, Any]] = []
    for kind in [None, *kinds]:
        with tempfile.TemporaryDirectory(prefix="nat-bench-") as tmp:
            log_dir = Path(tmp) if args.keep_logs is None else args.keep_logs / (kind or "public")
            try:
                row = run_one(kind, args.steps, log_dir, ["--log-level", args.log_level])
            except (PeerWaitError, BenchError) as exc:
                row = {"nat": kind or "none", "error": str(exc)[:500]}
        runs.append(row)
        print(row, flush=True)
        write_json(args.out, {"settings": {"run": RUN, "links": "home 100/10", "steps": args.steps},
                              "runs": runs})
    base = next((r for r in runs if r["nat"].startswith("none") and "error" not in r), None)
    for r in runs:
        if base is not None and "error" not in r:
            r["step_ratio_vs_public"] = round(r["step_s_median"] / base["step_s_median"], 3)
            r["within_target"] = r["step_ratio_vs_public"] <= TARGET_STEP_RATIO
    write_json(args.out, {"settings": {"run": RUN, "links": "home 100/10", "steps": args.steps},
                          "target_step_ratio": TARGET_STEP_RATIO, "runs": runs})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Agreement under Byzantine replicas, over many seeded schedules of the round-machine simulator.

Each schedule (tests/protocol/test_rounds_byzantine.py: ``schedule``) picks which f of n replicas lie and
how (any mix of voting twice, voting for everything, equivocating lists, jumping epochs, withholding
payloads, forging pols and certificates), the gossip delays and the loss rate, then runs the swarm for a
few steps. Recorded per (n, f): schedules run, schedules where two honest replicas applied different
lists (the safety property: must be 0), schedules where some honest replica did not itself apply the last
step within the simulated time limit (``not_finished``, progress: a replica that fell behind and resynced
past the last step counts here too, since a resync adopts a donor's state without applying the steps it
skips), and the simulated and wall time.

    .venv/bin/python bench/consensus_safety.py                       # 10,000 schedules of 4, 1,000 of 7
    .venv/bin/python bench/consensus_safety.py --schedules 4:1:200 --out /tmp/c.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from _common import RESULTS_DIR, write_json

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "protocol"))
from test_rounds_byzantine import schedule  # type: ignore[import-not-found]  # the simulator lives in tests/

STEPS = 5
LIMIT_S = 120.0  # simulated seconds for the honest replicas to apply every step


def run_group(n: int, f: int, count: int) -> dict[str, Any]:
    split, stuck, sim_s = [], [], 0.0
    start = time.perf_counter()
    for seed in range(count):
        s = schedule(seed, n, f, steps=STEPS)
        honest = [r.peer_id for r in s.honest()]
        s.run_until_applied(STEPS - 1, limit=LIMIT_S, peers=honest)
        sim_s += s.now
        if s.honest_disagreements():
            split.append(seed)
        if not all(STEPS - 1 in r.applied for r in s.honest()):
            stuck.append(seed)
    return {
        "n": n, "f": f, "schedules": count, "steps": STEPS, "honest_disagreements": len(split),
        "split_seeds": split[:20], "not_finished": len(stuck), "stuck_seeds": stuck[:20],
        "mean_simulated_s": round(sim_s / max(count, 1), 2), "wall_s": round(time.perf_counter() - start, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--schedules", default="4:1:10000,7:2:1000",
                        help="comma-separated n:f:count groups (default %(default)s)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "consensus_safety.json")
    args = parser.parse_args()
    groups = []
    for part in args.schedules.split(","):
        n, f, count = (int(x) for x in part.split(":"))
        if n < 3 * f + 1 or count < 1:
            parser.error(f"group {part!r}: need n >= 3f + 1 and a positive count")
        groups.append(run_group(n, f, count))
        print(groups[-1], flush=True)
    write_json(args.out, {"bench": "consensus_safety", "groups": groups})
    return 1 if any(g["honest_disagreements"] for g in groups) else 0


if __name__ == "__main__":
    raise SystemExit(main())

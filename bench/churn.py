"""Churn and partitions with full daemons in the namespace testbed (threats.md N3 and N5).

Why: volunteers vanish and networks split; the swarm must keep training at nearly full speed and must never
end up with two different weights for one step. Both scenarios run real `distro-node join` processes, each
in its own network namespace behind a shaped link (node/testbed/swarm.py, `home` profile: 100/10 Mbit), tiny
preset, so that the protocol, not the compute, is what is measured.

N3 (churn): N peers train S steps; every 50 steps (counted on peer 0, never killed, so it is the clock) 25%
of the peers get SIGKILL and each is restarted 30 s later with its data dir (same identity), joining through
a live peer, as a volunteer rejoining after a crash. Victims rotate over peers 1..N-1. No kill comes in the
last 2 x 50 steps, so the last victim has time to come back and be checked (default: 250 steps, kills at 50,
100 and 150). The same run without
churn is the reference: steps per hour (peer 0's steps over its wall time from step 0), final training loss
at equal tokens (the reference's mean loss over a 10-step window where its cumulative tokens match the churn
run's final ones), and per rejoin: the step it joined at and whether its weights hash equals the others'
at its first applied step (target: within 1 step after sync).

N5 (partition): N peers; after step 20 the hub splits the swarm into halves (the second half on a bridge of
its own) for 60 s, then heals. Checks: per step, every peer that applied it has the same hash (no split
brain); whether the minority applied anything during the partition; steps from the heal until every peer
has applied one step with one hash (target <= 5).

    .venv/bin/python bench/churn.py                                  # N3 and N5 -> results/churn.json
    .venv/bin/python bench/churn.py --scenarios n5 --peers 5 --out /tmp/c.json

Needs root. Every process is killed by pid and every namespace deleted when a run ends, whatever happened.
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

from _common import RESULTS_DIR, write_json
from distro_node.node.join_process import PeerProc, PeerWaitError
from distro_node.node.testbed.links import profile_links
from distro_node.node.testbed.netns import ready_for_bench
from distro_node.node.testbed.swarm import Testbed

RUN = ["--preset", "tiny", "--batch-size", "4", "--seq-len", "32", "--round-timeout", "10"]
TOKENS_PER_PEER_STEP = 4 * 32
KILL_EVERY = 50
REJOIN_AFTER_S = 30.0
PARTITION_AT = 20
PARTITION_S = 60.0
AFTER_HEAL_STEPS = 15
HEAL_WAIT_S = 150.0  # after the heal, how long every peer gets to reach AFTER_HEAL_STEPS more steps
LOSS_WINDOW = 10


def _is_step(e: dict[str, Any]) -> bool:
    return e.get("event") == "step"


def _hashes_by_step(every: list[PeerProc]) -> dict[int, dict[str, str]]:
    out: dict[int, dict[str, str]] = {}
    for p in every:
        p.poll_events()
        for s, row in p.steps().items():
            out.setdefault(s, {})[p.name] = row["weights_hash"]
    return out


def _tokens(clock: PeerProc) -> list[int]:
    """Cumulative tokens trained after each step, as peer 0 saw them (included peers x batch tokens)."""
    rows = clock.steps()
    tokens, total = [], 0
    for s in sorted(rows):
        total += rows[s]["included"] * TOKENS_PER_PEER_STEP
        tokens.append(total)
    return tokens


def _last_events(every: list[PeerProc]) -> dict[str, str]:
    """Each process's last event, shortened: what a stalled run was doing."""
    return {p.name: json.dumps(p.poll_events()[-1])[:160] if p.poll_events() else "-" for p in every}


def _last_step(proc: PeerProc) -> int:
    proc.poll_events()
    return max(proc.steps(), default=-1)


def _mean_loss_all(every: list[PeerProc], steps: range) -> float | None:
    vals = [p.steps()[s]["loss"] for p in every for s in steps
            if s in p.steps() and p.steps()[s].get("loss") is not None]
    return statistics.fmean(vals) if vals else None


def run_n3(n: int, steps: int, churn: bool, log_root: Path, wall: float, kill_every: int = KILL_EVERY,
           rejoin_after: float = REJOIN_AFTER_S) -> dict[str, Any]:
    log_dir = Path(tempfile.mkdtemp(prefix=f"n3-{'churn' if churn else 'ref'}-", dir=log_root))
    victims_per_event = max(1, n // 4)
    rotation = list(range(1, n))
    every: list[PeerProc] = []
    rejoins: list[dict[str, Any]] = []
    deadline = time.monotonic() + wall
    with Testbed(profile_links("home", n), log_dir, RUN, ["--steps", str(steps)]) as bed:
        every += bed.start()
        clock = bed.peer(0)
        t_start = clock.wait_step(0, 300)["t"]
        pending: list[tuple[float, int]] = []  # (restart due, peer)
        next_kill = kill_every if churn else steps + 1
        last_kill = steps - 2 * kill_every
        k = 0
        while True:
            now = time.monotonic()
            if now > deadline:
                kind = "churn" if churn else "reference"
                raise PeerWaitError(f"n3 ({kind}) run over its {wall:.0f}s bound; last events: "
                                    f"{_last_events(every)}")
            for due, i in [x for x in pending if x[0] <= now]:
                pending.remove((due, i))
                every.append(bed.restart(i, via=0))
                rejoins.append({"peer": i, "restarted_at_clock_step": max(clock.steps(), default=-1),
                                "proc": every[-1].name})
            last = max(clock.steps(), default=-1)
            if last >= steps - 1:
                break
            if last + 1 >= next_kill and next_kill <= last_kill:
                for _ in range(victims_per_event):
                    victim = rotation[k % len(rotation)]
                    k += 1
                    if bed.procs[victim] is not None and victim in bed.alive():
                        bed.kill(victim)
                        pending.append((time.monotonic() + rejoin_after, victim))
                next_kill += kill_every
                continue
            wait = min([d for d, _ in pending] + [deadline]) - time.monotonic()
            try:
                clock.wait_step(last + 1, max(0.1, min(wait, 5.0)))
            except PeerWaitError:
                if clock.proc.poll() is not None:
                    raise
        t_end = clock.steps()[steps - 1]["t"]
        for p in bed.procs:  # let the others finish their last step (bounded)
            if p is not None and p.proc.poll() is None:
                try:
                    p.wait_for(lambda e: e.get("event") == "left", 60, "leave")
                except PeerWaitError:
                    pass
    by_step = _hashes_by_step(every)
    split = [s for s, h in by_step.items() if len(set(h.values())) > 1]
    for r in rejoins:
        proc = next(p for p in every if p.name == r["proc"])
        joined = next((e for e in proc.events if e.get("event") == "joined"), None)
        rows = proc.steps()
        first = min(rows) if rows else None
        r["joined_at_step"] = joined["step"] if joined else None
        r["first_applied_step"] = first
        others = ({h for name, h in by_step.get(first, {}).items() if name != proc.name}
                  if first is not None else set())
        r["matches_majority_at_first_step"] = bool(first is not None and len(others) == 1
                                                   and rows[first]["weights_hash"] in others)
        r["steps_from_sync_to_first_apply"] = (first - joined["step"]
                                               if joined and first is not None else None)
        r["error"] = None if joined else proc.tail_stderr(300)
    tokens = _tokens(clock)
    return {
        "churn": churn, "peers": n, "steps": steps, "wall_s": round(t_end - t_start, 1),
        "steps_per_hour": round((steps - 1) / (t_end - t_start) * 3600, 1),
        "tokens_per_hour": round((tokens[-1] if tokens else 0) / (t_end - t_start) * 3600),
        "tokens": tokens[-1] if tokens else 0, "tokens_by_step": tokens,
        "final_loss": _mean_loss_all(every, range(steps - LOSS_WINDOW, steps)),
        "loss_by_step": {s: _mean_loss_all(every, range(s, s + 1)) for s in range(steps)},
        "steps_with_differing_hashes": sorted(split), "rejoins": rejoins, "logs": str(log_dir),
    }


def _loss_at_tokens(ref: dict[str, Any], tokens: int) -> float | None:
    """The reference's mean loss over LOSS_WINDOW steps ending where its cumulative tokens reach
    ``tokens``."""
    cum = ref["tokens_by_step"]
    end = next((s for s, t in enumerate(cum) if t >= tokens), len(cum) - 1)
    vals = [ref["loss_by_step"][s] for s in range(max(0, end - LOSS_WINDOW + 1), end + 1)
            if ref["loss_by_step"].get(s) is not None]
    return statistics.fmean(vals) if vals else None


def run_n5(n: int, log_root: Path, wall: float, partition_s: float = PARTITION_S) -> dict[str, Any]:
    log_dir = Path(tempfile.mkdtemp(prefix="n5-", dir=log_root))
    minority = list(range(n - n // 2, n))  # the smaller half (or one half of an even split)
    every: list[PeerProc] = []
    with Testbed(profile_links("home", n), log_dir, RUN, ["--steps", "100000"]) as bed:
        every += bed.start()
        clock = bed.peer(0)
        try:
            clock.wait_step(PARTITION_AT, 300)
        except PeerWaitError:
            raise PeerWaitError(f"n5: step {PARTITION_AT} not reached before the partition; last events: "
                                f"{_last_events(every)}") from None
        cut_steps = {i: _last_step(bed.peer(i)) for i in range(n)}
        bed.partition(minority)
        t_cut = time.monotonic()
        time.sleep(partition_s)  # the scenario's fixed partition length, not a synchronisation
        at_heal = {i: _last_step(bed.peer(i)) for i in range(n)}
        bed.heal()
        t_heal = time.monotonic()
        heal_step = max(at_heal.values())
        target = heal_step + AFTER_HEAL_STEPS
        converged_at: int | None = None
        deadline = time.monotonic() + min(wall, HEAL_WAIT_S)
        note: str | None = None
        try:
            for p in every:
                p.wait_step(target, max(1.0, deadline - time.monotonic()))
        except PeerWaitError as exc:
            note = str(exc)[:300]
    by_step = _hashes_by_step(every)
    split = [s for s, h in by_step.items() if len(set(h.values())) > 1]
    for s in sorted(by_step):  # a step decided after the heal (heal_step was the last one before it)
        if s > heal_step and len(by_step[s]) == n and len(set(by_step[s].values())) == 1:
            converged_at = s
            break
    minority_applied = {f"peer{i}": at_heal[i] - cut_steps[i] for i in minority}
    majority_applied = {f"peer{i}": at_heal[i] - cut_steps[i] for i in range(n) if i not in minority}
    kinds = ("resync_needed", "resynced", "resync_failed")
    events = {p.name: [e.get("event") for e in p.events if e.get("event") in kinds] for p in every}
    return {
        "peers": n, "minority": [f"peer{i}" for i in minority], "partition_s": round(t_heal - t_cut, 1),
        "steps_applied_during_partition": {"minority": minority_applied, "majority": majority_applied},
        "heal_step": heal_step, "converged_at_step": converged_at,
        "steps_to_converge_after_heal": (converged_at - heal_step) if converged_at is not None else None,
        "steps_with_differing_hashes": sorted(split), "resync_events": events, "incomplete": note,
        "logs": str(log_dir),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenarios", default="n3,n5", help="comma-separated: n3, n5 (default both)")
    ap.add_argument("--peers", type=int, default=4, help="peers for N3 (default 4; N5 uses one more)")
    ap.add_argument("--steps", type=int, default=250, help="N3 steps (default 250)")
    ap.add_argument("--kill-every", type=int, default=KILL_EVERY, help=f"N3 (default {KILL_EVERY} steps)")
    ap.add_argument("--rejoin-after", type=float, default=REJOIN_AFTER_S,
                    help=f"N3 seconds (default {REJOIN_AFTER_S:g})")
    ap.add_argument("--partition-s", type=float, default=PARTITION_S, help=f"N5 (default {PARTITION_S:g})")
    ap.add_argument("--wall", type=float, default=900.0, help="seconds allowed per run (default 900)")
    ap.add_argument("--out", type=Path, default=None, help="JSON path (default bench/results/churn.json)")
    args = ap.parse_args(argv)
    if not ready_for_bench("bench/churn.py"):
        return 2
    out = args.out or RESULTS_DIR / "churn.json"
    log_root = Path(tempfile.mkdtemp(prefix="churn-bench-"))
    doc: dict[str, Any] = {"what": "full daemons in network namespaces (home 100/10 Mbit links), tiny preset",
                           "run_args": RUN}
    ok = True
    scenarios = {s.strip() for s in args.scenarios.split(",") if s.strip()}
    if out.exists():  # keep the scenarios this run does not redo
        old = json.loads(out.read_text())
        doc.update({k: v for k, v in old.items() if k in ("n3", "n5") and k not in scenarios})
    if "n3" in scenarios:
        try:
            ref = run_n3(args.peers, args.steps, False, log_root, args.wall)
            churn = run_n3(args.peers, args.steps, True, log_root, args.wall, args.kill_every,
                           args.rejoin_after)
        except PeerWaitError as exc:
            doc["n3"] = {"error": str(exc)[:1500]}
            ok = False
        else:
            ref_loss = _loss_at_tokens(ref, churn["tokens"])
            doc["n3"] = {
                "kill_every_steps": args.kill_every, "rejoin_after_s": args.rejoin_after,
                "steps_per_hour_ratio": round(churn["steps_per_hour"] / ref["steps_per_hour"], 3),
                # Fewer peers per step also means fewer payloads to move, so a shrunken swarm can step
                # faster than the full one; tokens per hour says what the churn cost in training.
                "tokens_per_hour_ratio": round(churn["tokens_per_hour"] / ref["tokens_per_hour"], 3),
                "final_loss_churn": churn["final_loss"], "reference_loss_at_equal_tokens": ref_loss,
                "loss_ratio_at_equal_tokens": round(churn["final_loss"] / ref_loss, 4)
                if churn["final_loss"] and ref_loss else None,
                "rejoiners_matching": sum(r["matches_majority_at_first_step"] for r in churn["rejoins"]),
                "rejoiners_synced": sum(r["joined_at_step"] is not None for r in churn["rejoins"]),
                "rejoins": len(churn["rejoins"]),
                "targets": {"steps_per_hour_ratio": ">= 0.9", "loss_ratio_at_equal_tokens": "<= 1.02"},
                "reference": {k: v for k, v in ref.items() if k not in ("tokens_by_step", "loss_by_step")},
                "churn": {k: v for k, v in churn.items() if k not in ("tokens_by_step", "loss_by_step")},
            }
            print(json.dumps({k: v for k, v in doc["n3"].items() if k not in ("reference", "churn")}),
                  flush=True)
        write_json(out, doc)
    if "n5" in scenarios:
        try:
            doc["n5"] = run_n5(args.peers + 1, log_root, args.wall, args.partition_s)
        except PeerWaitError as exc:
            doc["n5"] = {"error": str(exc)[:1500]}
            ok = False
        print(json.dumps(doc["n5"]), flush=True)
        write_json(out, doc)
    print(f"wrote {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

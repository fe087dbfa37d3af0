"""Byzantine peers against real daemons: what each attack costs an honest swarm, and that it changes nothing.

Each configuration starts real ``distro-node join`` daemons on loopback (tiny preset): N - f honest ones
and, unless the attack is ``none`` (the honest-only run), f adversaries (``--liars``, default 1;
node/testbed/adversary.py: the real daemon with one attack patched in, every message signed by its own
key). The honest peers train ``--steps`` steps; the bench reads their step events and /metrics and records:

- honest step rate over the steps after ``--warm``, and the slowdown against the honest-only run (the same
  N - f honest peers without the adversaries) and against ``all-honest`` (N honest peers: on one machine
  the adversaries' processes take CPU from the honest ones, which no attack-free run of N - f shows);
- safety: every honest peer's weights hash equal at every step; honest peers banned (must be 0);
- what the defences saw: gossip refused by reason, faults reported (penalties such as vote_equivocation),
  bans of the attackers (step, reason), the highest epoch that decided a step, the round machine's non-zero
  counters (conflicting_claim, stale_goodbye, resyncs_requested, ...), state requests and peer-exchange
  hearsay refused, and what each attacker says it did and got (``adversary_reports``).

    .venv/bin/python bench/byzantine.py                       # 4 peers, every attack, 30 steps each
    .venv/bin/python bench/byzantine.py --peers 7 --liars 2 --out bench/results/byzantine_f2.json
    .venv/bin/python bench/byzantine.py --attacks none,forge-list --steps 12 --out /tmp/b.json
    .venv/bin/python bench/byzantine.py --peers 5 --attacks none,sybil-flood --admission permissioned

Every daemon is stopped by pid (SIGTERM, bounded wait, SIGKILL), whatever happened.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import RESULTS_DIR, write_json
from distro_node.node.config.run import ADMISSION_MODES
from distro_node.node.join_process import CLI, PeerProc, PeerWaitError, join_args, stop_all
from distro_node.node.peer.tickets import issue_ticket_file
from distro_node.node.testbed.adversary import KINDS
from distro_node.protocol.identity import load_or_create_identity, peer_id_of
from prometheus_client.parser import text_string_to_metric_families

ADVERSARY = [sys.executable, "-m", "distro_node.node.testbed.adversary"]
RUN = ["--preset", "tiny", "--batch-size", "4", "--seq-len", "32", "--round-timeout", "3"]
LOGGING = ["--log-format", "json"]
STOP_GRACE_S = 20.0
BASELINES = ("none", "all-honest")  # N - 1 honest peers alone; N honest peers
# Not a daemon kind: a crowd of made-up identities in a process of its own beside N - f honest peers
# (node/testbed/sybils.py), so what the swarm pays is the flood, not a slow roster member.
SYBIL_FLOOD = "sybil-flood"
SYBILS = [sys.executable, "-m", "distro_node.node.testbed.sybils"]
SYBIL_COUNT = 10
GOSSIP_FLOOD = "gossip-flood"
COMBINE = "+"  # kinds joined by it run in one adversary (node/testbed/adversary.py: kinds combine)
RECOVERY_S = 60.0
RECOVERY_EVERY_S = 10.0
RECOVERY_STEPS = 400  # honest steps left after the measured ones: more than RECOVERY_S of training


class ByzantineBenchError(RuntimeError):
    """A configuration did not run to its last step; the message says which peer and what it printed."""


def _metrics(p: PeerProc) -> dict[str, dict[str, float]]:
    with urllib.request.urlopen(str(p.info()["metrics_url"]), timeout=10) as reply:
        text = reply.read().decode()
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            label = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            out.setdefault(sample.name, {})[label] = sample.value
    return out


def _faults(p: PeerProc) -> dict[str, int]:
    """How many faults of each kind a daemon reported (a penalty by its reason, e.g. vote_equivocation)."""
    seen: dict[str, int] = {}
    for e in p.events:
        if e.get("event") == "fault":
            reason = re.search(r"reason='([a-z_]+)'", str(e.get("detail", "")))
            key = reason.group(1) if reason else str(e.get("kind"))
            seen[key] = seen.get(key, 0) + 1
    return seen


def _tickets(log_dir: Path, run_id: str) -> Callable[[str], list[str]]:
    """A permissioned run: the flags that give peer ``name`` its own key and a ticket the founder signed."""
    founder = load_or_create_identity(log_dir / "peer0.key")

    def flags(name: str) -> list[str]:
        key = log_dir / f"{name}.key"
        peer = str(peer_id_of(load_or_create_identity(key)))
        ticket = log_dir / f"{name}.ticket"
        issue_ticket_file(ticket, founder.private_key, bytes.fromhex(run_id), peer, days=1)
        return ["--key-file", str(key), "--ticket", str(ticket)]

    return flags


def run_one(attack: str, peers: int, liars: int, steps: int, warm: int, log_dir: Path,
            wait_s: float, admission: str = "open", sybil_nice: int = 0, sybil_idle: bool = False
            ) -> dict[str, Any]:
    """One swarm: N - f honest daemons and, unless ``attack`` is none, f adversaries, to ``steps`` steps."""
    honest_n = peers if attack == "all-honest" else peers - liars
    cohort = honest_n if attack in (*BASELINES, SYBIL_FLOOD) else peers
    # The last steps are not measured: a stop is not part of a run. After a gossip flood the honest peers
    # train on while their memory is watched (RECOVERY_S), so they get the steps for that too.
    local = ["--steps", str(steps + (RECOVERY_STEPS if attack == GOSSIP_FLOOD else 5))]
    founder_args = [*CLI, "join", *RUN, *local, "--genesis-peers", str(cohort), *LOGGING]
    if admission == "permissioned":
        founder_args += ["--admission", "permissioned", "--key-file", str(log_dir / "peer0.key")]
    founder = PeerProc(founder_args, "peer0", log_dir)
    procs = [founder]
    try:
        command = join_args(str(founder.info()["join_command"]))
        own: Callable[[str], list[str]] = (_tickets(log_dir, str(founder.info()["run_id"]))
                                           if admission == "permissioned" else lambda _name: [])
        for i in range(1, honest_n):
            procs.append(PeerProc([*CLI, "join", *command, *local, *own(f"peer{i}"), *LOGGING], f"peer{i}",
                                  log_dir))
        attackers = []
        if attack == SYBIL_FLOOD:  # a crowd process beside the swarm, not a roster member
            bootstrap, run_id = str(founder.info()["addrs"][0]), str(founder.info()["run_id"])
            niced = ["nice", "-n", str(sybil_nice)] if sybil_nice else []
            idle = ["chrt", "--idle", "0"] if sybil_idle else []
            crowd = [*idle, *niced, *SYBILS, bootstrap, run_id, str(SYBIL_COUNT)]
            attackers.append(PeerProc(crowd, "sybils", log_dir))
        elif attack not in BASELINES:
            for i in range(liars):
                name = f"attacker{i}"
                kinds = attack.replace(COMBINE, ",")
                argv = [*ADVERSARY, kinds, "join", *command, *local, *own(name), *LOGGING]
                attackers.append(PeerProc(argv, name, log_dir))
        procs.extend(attackers)
        honest = procs[:honest_n]
        t0 = time.monotonic()
        founder.wait_step(warm, wait_s)
        at_warm = {p.name: _refused(_metrics(p)) for p in honest}
        t_warm = time.monotonic()
        for p in honest:
            p.wait_step(steps - 1, max(1.0, wait_s - (time.monotonic() - t0)))
        metrics = {p.name: _metrics(p) for p in honest}
        elapsed = time.monotonic() - t_warm
        cpu = {p.name: _cpu_s(p) for p in procs}
        attacker_ids = {str(a.info()["peer_id"]) for a in attackers if attack != SYBIL_FLOOD}
        recovery = _recovery(honest, attackers) if attack == GOSSIP_FLOOD else None
    except PeerWaitError as exc:
        raise ByzantineBenchError(f"{attack}: {exc}") from None
    finally:
        stop_all(procs, STOP_GRACE_S)
    rows = {p.name: p.steps() for p in honest}
    diverged = [s for s in range(steps) if len({rows[n][s]["weights_hash"] for n in rows}) != 1]
    bans = {p.name: [e for e in p.events if e.get("event") == "banned"] for p in honest}
    honest_ids = {str(p.info()["peer_id"]) for p in honest}
    founder_rows = rows["peer0"]
    span = founder_rows[steps - 1]["t"] - founder_rows[warm]["t"]
    return {
        "attack": attack,
        "peers": cohort,
        "liars": len(attackers) if attack not in (*BASELINES, SYBIL_FLOOD) else 0,
        "honest_peers": honest_n,
        "steps": steps,
        "measured_steps": [warm, steps - 1],
        "honest_steps_per_s": round((steps - 1 - warm) / span, 3) if span > 0 else None,
        "honest_hashes_equal_every_step": not diverged,
        "diverged_steps": diverged,
        "honest_banned": sorted({e["peer"] for b in bans.values() for e in b if e["peer"] in honest_ids}),
        "attacker_bans": {n: [(e["step"], e["reason"]) for e in b if e["peer"] in attacker_ids]
                          for n, b in bans.items()},
        "gossip_rejected": {n: m.get("distro_gossip_rejected_total", {}) for n, m in metrics.items()},
        "faults_seen": {p.name: _faults(p) for p in honest},
        # what the round machine counted (conflicting_claim, stale_goodbye, resyncs_requested, ...) and the
        # refusals outside gossip (state gate by op, peer-exchange hearsay), non-zero ones only
        "round_events": {n: _nonzero(m, "distro_round_events_total") for n, m in metrics.items()},
        "requests_refused": {n: _nonzero(m, "distro_requests_refused_total") for n, m in metrics.items()},
        "adversary_reports": _adversary_reports(attackers),
        "honest_rss_mb": {n: round(m.get("distro_process_resident_memory_bytes", {}).get("", 0) / 2**20, 1)
                          for n, m in metrics.items()},
        "max_epoch": max(founder_rows[s]["epoch"] for s in range(steps)),
        "epochs_above_0": sum(1 for s in range(steps) if founder_rows[s]["epoch"] > 0),
        "included_min": min(founder_rows[s]["included"] for s in range(steps)),
        "roster_max": max(founder_rows[s]["roster"] for s in range(steps)),
        "admission": admission,
        "sybils": _sybil_reports(attackers),
        "cpu_s": cpu,  # user + system seconds of each process over the whole run (this machine has 2 cores)
        "sybil_nice": sybil_nice if attack == SYBIL_FLOOD else None,
        "sybil_idle": sybil_idle if attack == SYBIL_FLOOD else None,
        # refused gossip per second at each honest peer over the measured steps: what a flood delivered
        "rejected_per_s": {n: round((_refused(m) - at_warm[n]) / elapsed, 1) for n, m in metrics.items()},
        "after_flood": recovery,
    }


def _nonzero(metrics: dict[str, dict[str, float]], name: str) -> dict[str, int]:
    """One labelled counter's non-zero values, by the label's value (``event=stale_goodbye`` ->
    ``stale_goodbye``)."""
    return {label.split("=", 1)[-1]: int(v) for label, v in sorted(metrics.get(name, {}).items()) if v}


def _adversary_reports(attackers: list[PeerProc]) -> dict[str, dict[str, Any]] | None:
    """Each attacker's last ``adversary`` event per kind (node/testbed/adversary_more.py): what it did and
    got, as {attacker: {kind: counts}}."""
    reports: dict[str, dict[str, Any]] = {}
    for a in attackers:
        for e in a.poll_events():
            if e.get("event") == "adversary":
                counts = {k: v for k, v in e.items() if k not in ("event", "kind")}
                reports.setdefault(a.name, {})[str(e.get("kind"))] = counts
    return reports or None


def _refused(metrics: dict[str, dict[str, float]]) -> float:
    return sum(metrics.get("distro_gossip_rejected_total", {}).values())


def _rss_mb(p: PeerProc) -> float:
    for line in Path(f"/proc/{p.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise ByzantineBenchError(f"{p.name}: no VmRSS in /proc")


def _recovery(honest: list[PeerProc], attackers: list[PeerProc]) -> dict[str, Any]:
    """Stop the flooders, then the honest peers' resident memory every RECOVERY_EVERY_S for RECOVERY_S."""
    at_stop = {p.name: _rss_mb(p) for p in honest}
    stop_all(attackers, STOP_GRACE_S)
    samples: list[dict[str, float]] = []
    start = time.monotonic()
    for i in range(1, int(RECOVERY_S / RECOVERY_EVERY_S) + 1):
        time.sleep(max(0.0, start + i * RECOVERY_EVERY_S - time.monotonic()))
        samples.append({p.name: _rss_mb(p) for p in honest if p.proc.poll() is None})
    return {"rss_at_stop_mb": at_stop, "every_s": RECOVERY_EVERY_S, "rss_mb": samples}


def _cpu_s(p: PeerProc) -> float:
    fields = Path(f"/proc/{p.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 1)


def _sybil_reports(attackers: list[PeerProc]) -> dict[str, int] | None:
    """What the made-up identities of ``sybil-flood`` got, summed over their last reports."""
    last = {e["sybil"]: e for a in attackers for e in a.poll_events() if e.get("event") == "sybil"}
    if not last:
        return None
    keys = ("heartbeats_sent", "state_served", "state_refused", "peers_learned")
    return {"identities": len(last), **{k: sum(int(r[k]) for r in last.values()) for k in keys}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peers", type=int, default=4,
                        help="daemons per attacked swarm, the adversary included (honest-only: one fewer)")
    parser.add_argument("--liars", type=int, default=1,
                        help="adversaries in an attacked swarm (default 1; 2 of 7 is f = 2 of n = 3f + 1)")
    parser.add_argument("--steps", type=int, default=30, help="steps the honest peers train (default 30)")
    parser.add_argument("--warm", type=int, default=3, help="steps left out of the rate (start-up)")
    parser.add_argument("--attacks", default=",".join((*BASELINES, *KINDS)),
                        help=f"comma-separated: the baselines {', '.join(BASELINES)}, the adversary kinds "
                             f"({', '.join(KINDS)}; joined by {COMBINE!r} they run in one adversary) and "
                             f"{SYBIL_FLOOD} ({SYBIL_COUNT} made-up identities in a process of their own "
                             "beside N - 1 honest peers)")
    parser.add_argument("--wait", type=float, default=600.0, help="seconds one configuration may take")
    parser.add_argument("--sybil-nice", type=int, default=0, metavar="N",
                        help="run the sybil-flood crowd at this nice level (19: it takes only CPU the honest "
                             "peers leave, as a crowd on other machines would; default 0)")
    parser.add_argument("--sybil-idle", action="store_true",
                        help="run the sybil-flood crowd under SCHED_IDLE (chrt --idle): it gets a core only "
                             "when the honest peers leave one idle, the nearest these shared cores come to a "
                             "crowd on machines of its own")
    parser.add_argument("--admission", choices=ADMISSION_MODES, default="open",
                        help="open (default), or permissioned: every peer but the founder gets a ticket, the "
                             "adversaries too (insiders); the made-up identities of sybil-flood get none")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "byzantine.json")
    args = parser.parse_args(argv)
    attacks = [a for a in args.attacks.split(",") if a]
    unknown = [a for a in attacks
               if a not in (*BASELINES, SYBIL_FLOOD) and not set(a.split(COMBINE)) <= set(KINDS)]
    if unknown or args.peers < 3 * args.liars + 1 or args.liars < 1 or not 0 <= args.warm < args.steps - 1:
        parser.error(f"unknown attacks {unknown}" if unknown
                     else "need 1 <= --liars, --peers >= 3 * liars + 1, --warm < --steps - 1")
    results: list[dict[str, Any]] = []
    path = args.out
    with tempfile.TemporaryDirectory(prefix="byzantine-") as tmp:
        for attack in attacks:
            log_dir = Path(tmp) / attack
            log_dir.mkdir()
            print(f"[byzantine] {attack}: {args.peers} peers, {args.steps} steps", flush=True)
            try:
                results.append(run_one(attack, args.peers, args.liars, args.steps, args.warm, log_dir,
                                       args.wait, args.admission, args.sybil_nice, args.sybil_idle))
            except ByzantineBenchError as exc:  # a swarm that did not get there is a result too
                results.append({"attack": attack, "peers": args.peers, "error": str(exc)[:2000],
                                "honest_steps_per_s": None})
            path = _write(args.out, results)  # after every configuration: a later failure loses nothing
    for r in results:
        print(f"[byzantine] {r['attack']}: {r['honest_steps_per_s']} steps/s, slowdown "
              f"{r['slowdown_vs_none']} (vs all-honest {r['slowdown_vs_all_honest']})"
              + (f", hashes equal {r['honest_hashes_equal_every_step']}, honest banned {r['honest_banned']}"
                 if "error" not in r else f", FAILED: {r['error'][:200]}"), flush=True)
    print(f"[byzantine] wrote {path}", flush=True)
    return 0


def _write(out: Path, results: list[dict[str, Any]]) -> Path:
    for baseline in BASELINES:
        base = next((r["honest_steps_per_s"] for r in results if r["attack"] == baseline), None)
        for r in results:
            rate = r["honest_steps_per_s"]
            r[f"slowdown_vs_{baseline.replace('-', '_')}"] = round(base / rate, 3) if base and rate else None
    return write_json(out, {"configs": results})


if __name__ == "__main__":
    sys.exit(main())

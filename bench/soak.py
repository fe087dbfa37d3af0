"""Soak: N real `distro-node join` daemons train the tiny preset for R rounds on loopback.

Why: issue 3 accepts the transport only if 8 peers x 200 rounds show no transport errors and flat memory; a
leak of a few kB per round or a fetch that fails once in a thousand never shows in the 30-round tests.

Peers are the daemon itself (a founder waiting for a genesis cohort, the others running the join command it
prints), read through node/join_process.py like the multi-process tests. A start-up in which some peer
never finishes round 0 is reported and retried (``--start-attempts``). What is counted, for rounds below R
only (the stop at the end is not part of the soak):

- transport errors: payload fetch attempts that failed (protocol/transfer.py) and payloads no holder
  delivered (node/peer/fetcher.py) -- both logged at DEBUG, so each daemon runs with the ``distro_node``
  loggers at DEBUG on its stderr --, any WARNING or ERROR log line of ours or py-libp2p's (stuck gossip
  queue, failed publish, a stream that could not be opened, ...), payloads rejected at validation, and
  ``resync``/``abandoned``/``error`` events. Log lines are split at the moment every peer has finished
  round 0: before it is connection set-up, reported apart from the rounds;
- round health: rounds that closed without every peer's payload (``included < roster`` in the step events,
  and ``distro_rounds_total{outcome="deadline"}`` scraped from each peer's /metrics at the last round);
- memory: VmRSS of every daemon from /proc/<pid>/status every ``--sample-every`` rounds; growth from round
  ``--memory-from`` to the last round, "flat" when it stays under ``--flat-mb`` on every peer;
- agreement: every peer's weights hash equal after every round; rounds per second.

    .venv/bin/python bench/soak.py                                   # 8 peers x 200 rounds, 30 min cap
    .venv/bin/python bench/soak.py --peers 3 --rounds 6 --sample-every 2 --memory-from 2 --out /tmp/s.json

Every daemon is stopped by pid (SIGTERM, then SIGKILL after a bounded wait), whatever happened.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import RESULTS_DIR, write_json
from distro_node.node.cli.status_scrape import StatusError, scrape
from distro_node.node.join_process import JoinCommandError, PeerProc, PeerWaitError, join_args, stop_all

# The daemon's own CLI with one prefixed stderr line per log record of its package loggers and py-libp2p's,
# not propagated so join's own handler (node/logs.py) does not print them twice; join runs with
# --log-level debug (payload fetch failures are DEBUG records), which keeps py-libp2p at ERROR. py-libp2p
# resets its logger's handlers when imported, so it is imported first.
_DEBUG_CLI = (
    "import logging, sys\n"
    "import libp2p\n"
    "h = logging.StreamHandler(sys.stderr)\n"
    "h.setFormatter(logging.Formatter('soaklog %(levelname)s %(name)s: %(message)s'))\n"
    "for name in ('distro_node', 'libp2p'):\n"
    "    log = logging.getLogger(name); log.addHandler(h); log.propagate = False\n"
    "logging.getLogger('distro_node').setLevel(logging.DEBUG)\n"
    "from distro_node.node.cli.main import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)
CLI = [sys.executable, "-c", _DEBUG_CLI]
_LOGGING = ["--log-format", "json", "--log-level", "debug"]
# stderr lines that are transport errors, by kind; any other WARNING/ERROR record or traceback counts too.
_PATTERNS = {
    "fetch_attempt_failed": re.compile(r"^soaklog DEBUG \S*transfer: fetch of \S+ from \S+ failed"),
    "payload_not_fetched": re.compile(r"^soaklog DEBUG \S+: fetch failed"),
    "warning_or_error_log": re.compile(r"^soaklog (WARNING|ERROR|CRITICAL) "),
    "traceback": re.compile(r"^Traceback "),
}
ERROR_EVENTS = ("rejected", "resync_needed", "resync_failed", "resynced", "abandoned", "error")
STOP_GRACE_S = 20.0
STARTUP_S = 300.0  # one start-up attempt: the founder's genesis window (120 s) plus the cohort's sync


class SoakError(RuntimeError):
    """The soak could not start (bad arguments, the founder never listened)."""


def rss_mb(pid: int) -> float | None:
    """VmRSS of ``pid`` in MB, None once it has exited."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def start_swarm(n: int, run_args: list[str], log_dir: Path, wait_s: float) -> list[PeerProc]:
    """A founder waiting for ``n`` genesis peers and ``n - 1`` joiners running the command it prints."""
    founder = PeerProc([*CLI, "join", *run_args, "--genesis-peers", str(n), *_LOGGING], "peer0", log_dir)
    peers = [founder]
    try:
        listening = founder.wait_for(lambda e: e.get("event") == "listening", wait_s, "listening line")
        command = str(listening["join_command"])
    except PeerWaitError as exc:
        founder.reap()
        raise SoakError(str(exc)) from None
    try:
        args = join_args(command)
    except JoinCommandError as exc:
        founder.reap()
        raise SoakError(str(exc)) from None
    for i in range(1, n):
        peers.append(PeerProc([*CLI, "join", *args, *_LOGGING], f"peer{i}", log_dir))
    return peers


def stop(peers: list[PeerProc]) -> dict[str, int | None]:
    return stop_all(peers, STOP_GRACE_S)


def stderr_counts(text: str) -> dict[str, int]:
    counts = dict.fromkeys(_PATTERNS, 0)
    for line in text.splitlines():
        for kind, pattern in _PATTERNS.items():
            if pattern.search(line):
                counts[kind] += 1
    return counts


def _growth(samples: list[dict[str, Any]], names: list[str], start: int,
            flat_mb: float) -> list[dict[str, Any]]:
    """Per peer: RSS at the first sample from round ``start`` vs the last sample, and the fitted slope."""
    window = [s for s in samples if s["round"] >= start]
    out: list[dict[str, Any]] = []
    for name in names:
        series = [(s["round"], s["rss_mb"][name]) for s in window if s["rss_mb"].get(name) is not None]
        if len(series) < 2:
            out.append({"peer": name, "error": f"fewer than 2 samples from round {start}"})
            continue
        (r0, m0), (r1, m1) = series[0], series[-1]
        mean_r = sum(r for r, _ in series) / len(series)
        mean_m = sum(m for _, m in series) / len(series)
        var = sum((r - mean_r) ** 2 for r, _ in series)
        slope = sum((r - mean_r) * (m - mean_m) for r, m in series) / var if var else 0.0
        out.append({"peer": name, "from_round": r0, "to_round": r1, "rss_from_mb": round(m0, 1),
                    "rss_to_mb": round(m1, 1), "growth_mb": round(m1 - m0, 2),
                    "slope_mb_per_100_rounds": round(100 * slope, 2),
                    "peak_mb": round(max(m for _, m in series), 1), "flat": m1 - m0 <= flat_mb})
    return out


def _rate(steps: dict[int, dict[str, Any]], first_round: int) -> float | None:
    """Rounds per second from the step events' own clock (``t``), from ``first_round`` on."""
    rounds = sorted(s for s in steps if s >= first_round)
    if len(rounds) < 2 or steps[rounds[-1]]["t"] <= steps[rounds[0]]["t"]:
        return None
    return round((rounds[-1] - rounds[0]) / (steps[rounds[-1]]["t"] - steps[rounds[0]]["t"]), 3)


@dataclass
class Observed:
    """What the soak saw while the daemons ran; ``report`` turns it into the result document."""

    peers: list[PeerProc]
    start_failures: list[str] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    setup_stderr: dict[str, int] = field(default_factory=dict)  # stderr length when round 0 was done
    stderr: dict[str, str] = field(default_factory=dict)  # at the last round, before the stop
    metrics: dict[str, Any] = field(default_factory=dict)
    stop_codes: dict[str, int | None] = field(default_factory=dict)
    failure: str | None = None
    wall_s: float = 0.0


def _stderr(p: PeerProc) -> str:
    return p.stderr_path.read_text() if p.stderr_path.exists() else ""


def start_until_round0(args: argparse.Namespace, run_args: list[str], log_dir: Path,
                       deadline: float) -> tuple[list[PeerProc], list[str]]:
    """A swarm whose every peer finished round 0, within ``--start-attempts`` tries.

    The founder gives its genesis cohort a fixed window; on a loaded machine a peer can miss it and the
    founder exits. That is a start-up failure, not part of the soak's rounds: it is reported
    (``start_failures``) and the swarm is started afresh, each attempt logging into its own folder.
    """
    failures: list[str] = []
    for attempt in range(args.start_attempts):
        attempt_dir = log_dir / f"attempt{attempt}"
        attempt_dir.mkdir(parents=True, exist_ok=True)
        peers = start_swarm(args.peers, run_args, attempt_dir, min(120.0, args.wall))
        try:
            for p in peers:
                p.wait_step(0, max(0.1, min(deadline, time.monotonic() + STARTUP_S) - time.monotonic()))
            return peers, failures
        except PeerWaitError as exc:
            stop(peers)
            errors = [str(e.get("reason"))[:160]
                      for p in peers for e in p.events if e.get("event") == "error"]
            failures.append(f"{str(exc).split(';')[0]}; error events: {errors[:4]}")
        except BaseException:  # Ctrl-C included: never leave daemons behind
            stop(peers)
            raise
    raise SoakError(f"no swarm reached round 0 in {args.start_attempts} attempts: {failures}")


def soak(args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    run_args = ["--preset", args.preset, "--batch-size", "4", "--seq-len", "32",
                "--round-timeout", f"{args.round_timeout:g}"]
    t_start = time.monotonic()
    deadline = t_start + args.wall
    peers, start_failures = start_until_round0(args, run_args, log_dir, deadline)
    seen = Observed(peers, start_failures=start_failures)
    try:
        for k in sorted({*range(0, args.rounds, args.sample_every), args.rounds - 1}):
            for p in seen.peers:
                p.wait_step(k, max(0.1, deadline - time.monotonic()))
            seen.samples.append({"round": k, "t_s": round(time.monotonic() - t_start, 1),
                                 "rss_mb": {p.name: rss_mb(p.proc.pid) for p in seen.peers}})
            if k == 0:
                seen.setup_stderr = {p.name: len(_stderr(p)) for p in seen.peers}
        for p in seen.peers:  # counters at the last round, before the stop adds its own events
            url = p.info().get("metrics_url")
            try:
                seen.metrics[p.name] = scrape(url).to_dict() if url else {"error": "no /metrics"}
            except StatusError as exc:
                seen.metrics[p.name] = {"error": str(exc)}
    except PeerWaitError as exc:
        seen.failure = str(exc)
    except KeyboardInterrupt:  # Ctrl-C: stop the daemons and still report what was seen
        seen.failure = "interrupted"
    finally:
        seen.stderr = {p.name: _stderr(p) for p in seen.peers}
        seen.stop_codes = stop(seen.peers)
    seen.wall_s = time.monotonic() - t_start
    return report(args, seen)


def report(args: argparse.Namespace, seen: Observed) -> dict[str, Any]:
    peers, names = seen.peers, [p.name for p in seen.peers]
    steps = {p.name: {s: e for s, e in p.steps().items() if s < args.rounds} for p in peers}
    common = [s for s in range(args.rounds) if all(s in steps[n] for n in names)]
    disagree = [s for s in common if len({steps[n][s]["weights_hash"] for n in names}) != 1]
    incomplete = {n: sum(1 for e in steps[n].values() if e["included"] < e["roster"]) for n in names}
    events = {p.name: {k: sum(1 for e in p.events if e.get("event") == k and e.get("step", 0) < args.rounds)
                       for k in ERROR_EVENTS} for p in peers}
    cut = {n: seen.setup_stderr.get(n, len(seen.stderr[n])) for n in names}
    setup_logs = {n: stderr_counts(seen.stderr[n][:cut[n]]) for n in names}
    round_logs = {n: stderr_counts(seen.stderr[n][cut[n]:]) for n in names}
    transport = {n: sum(round_logs[n].values()) + sum(events[n].values()) for n in names}
    memory = _growth(seen.samples, names, args.memory_from, args.flat_mb)
    completed = seen.failure is None and len(common) == args.rounds
    return {
        "what": f"{args.peers} `distro-node join` daemons (founder + genesis joiners), preset {args.preset}, "
                f"DisTrO, loopback, {args.rounds} rounds",
        "settings": {"peers": args.peers, "rounds": args.rounds, "preset": args.preset,
                     "round_timeout_s": args.round_timeout, "sample_every": args.sample_every,
                     "memory_from_round": args.memory_from, "flat_threshold_mb": args.flat_mb,
                     "wall_cap_s": args.wall},
        "completed": completed, "failure": seen.failure, "start_failures": seen.start_failures,
        "last_sampled_round": seen.samples[-1]["round"] if seen.samples else None,
        "wall_s": round(seen.wall_s, 1), "rounds_on_all_peers": len(common),
        "rounds_per_s": _rate(steps[names[0]], 0),
        "rounds_per_s_from_memory_from": _rate(steps[names[0]], args.memory_from),
        "hashes_equal_every_round": completed and not disagree, "rounds_with_differing_hashes": disagree[:20],
        "transport_errors_total": sum(transport.values()),
        "transport_errors_per_peer": transport,
        "log_lines_during_rounds_per_peer": round_logs, "error_events_per_peer": events,
        "log_lines_before_round0_done_per_peer": setup_logs,
        "rounds_missing_a_payload_per_peer": incomplete,
        "deadline_rounds_from_metrics": {n: m.get("rounds", {}).get("deadline")
                                         for n, m in seen.metrics.items()},
        "memory": {"threshold": f"flat = RSS growth from round {args.memory_from} to the last round <= "
                                f"{args.flat_mb:g} MB on every peer",
                   "flat": bool(memory) and all(m.get("flat") for m in memory), "per_peer": memory},
        "rss_samples": seen.samples,
        "metrics_at_last_round": seen.metrics,
        "exit_codes_after_sigterm": seen.stop_codes,
        "loadavg_at_start": args.loadavg_at_start,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peers", type=int, default=8, help="daemons (default 8)")
    ap.add_argument("--rounds", type=int, default=200, help="rounds to soak (default 200)")
    ap.add_argument("--preset", default="tiny", help="model preset (default tiny)")
    ap.add_argument("--round-timeout", type=float, default=10.0, help="join --round-timeout (default 10 s)")
    ap.add_argument("--sample-every", type=int, default=10, help="RSS sample period in rounds (default 10)")
    ap.add_argument("--memory-from", type=int, default=50, help="memory growth measured from this round")
    ap.add_argument("--flat-mb", type=float, default=10.0, help="growth counted as flat (default 10 MB)")
    ap.add_argument("--wall", type=float, default=1800.0, help="cap on the whole soak, s (default 1800)")
    ap.add_argument("--start-attempts", type=int, default=3,
                    help="swarm start-ups tried before giving up (default 3; failures are reported)")
    ap.add_argument("--log-dir", type=Path, default=None, help="keep the daemons' stderr here")
    ap.add_argument("--out", type=Path, default=None, help="JSON path (default bench/results/soak.json)")
    args = ap.parse_args(argv)
    for name in ("peers", "rounds", "sample_every", "start_attempts"):
        if getattr(args, name) < (2 if name == "peers" else 1):
            ap.error(f"--{name.replace('_', '-')} too small: {getattr(args, name)}")
    if not 0 <= args.memory_from < args.rounds:
        ap.error(f"--memory-from must be in [0, --rounds), got {args.memory_from}")
    if not (args.wall > 0 and args.round_timeout > 0 and args.flat_mb >= 0):
        ap.error("--wall and --round-timeout must be > 0, --flat-mb >= 0")
    args.loadavg_at_start = list(os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        log_dir = args.log_dir or Path(tmp)
        log_dir.mkdir(parents=True, exist_ok=True)
        try:
            doc = soak(args, log_dir)
        except SoakError as exc:
            print(f"soak did not start: {exc}", file=sys.stderr)
            write_json(args.out or RESULTS_DIR / "soak.json",
                       {"what": f"{args.peers} daemons, {args.rounds} rounds", "completed": False,
                        "failure": str(exc), "loadavg_at_start": args.loadavg_at_start})
            return 2
    path = write_json(args.out or RESULTS_DIR / "soak.json", doc)
    mem = doc["memory"]["per_peer"]
    growth = [m["growth_mb"] for m in mem if "growth_mb" in m]
    print(f"{args.peers} peers x {doc['rounds_on_all_peers']}/{args.rounds} rounds in {doc['wall_s']:.0f} s "
          f"({doc['rounds_per_s']} rounds/s); hashes equal: {doc['hashes_equal_every_round']}; transport "
          f"errors: {doc['transport_errors_total']}; RSS growth from round {args.memory_from}: "
          f"{min(growth, default=0):.1f}..{max(growth, default=0):.1f} MB (flat: {doc['memory']['flat']})")
    if doc["failure"]:
        print(f"failure: {doc['failure']}")
    print(f"wrote {path}")
    ok = doc["completed"] and doc["hashes_equal_every_round"] and doc["memory"]["flat"]
    return 0 if ok and doc["transport_errors_total"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

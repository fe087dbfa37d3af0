"""CPU of one all-to-all piece exchange in one process, and the yamux frames it writes, by kind.

Why: on the 2-core namespace testbed 8 daemons are CPU-bound, so the time a step takes there is mostly the
CPU the transport spends per payload byte. This bench takes the links out: N hosts of ours on loopback in
one process, each authoring a payload and fetching the N-1 others in pieces (protocol/swarm_fetch.py, every
other host a holder, the author complete, one HolderGate per fetcher, as the daemon fetches). Per step it
reports CPU seconds, the frames written (those of yamux's WINDOW_UPDATE type apart from the rest: window
updates, and the one frame that opens each stream), the HAVE answers, the pieces served and the piece
requests refused as BUSY.
The first step is left out of the medians (connections and imports warming up).

    .venv/bin/python bench/swarm_cpu.py                                  # 8 hosts, 1.45 MB, 4 steps
    .venv/bin/python bench/swarm_cpu.py --hosts 3 --size 5000 --steps 2 --out /tmp/s.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import trio
from _common import RESULTS_DIR, write_json
from distro_node.protocol import muxer_guard, pieces_serve
from distro_node.protocol.partials import PartialPayloads
from distro_node.protocol.pieces_serve import PiecesServer
from distro_node.protocol.store import PayloadStore, payload_digest
from distro_node.protocol.swarm_fetch import fetch_swarm
from distro_node.protocol.swarm_first_copies import PeerRates
from distro_node.protocol.swarm_request import SwarmRequest
from distro_node.protocol.swarm_turns import HolderGate
from distro_node.protocol.testing import connect_all_to, start_hosts

RUN = bytes(range(32))
_WINDOW_UPDATE = 1  # yamux header: version, then type


def count_frames(counts: Counter[str]) -> None:
    """Count every frame written and every HAVE answered into ``counts`` (this process only)."""
    write_frame = muxer_guard.GuardedYamux._write_frame
    have = pieces_serve.PiecesServer._have

    async def counted_write(self: muxer_guard.GuardedYamux, data: bytes) -> None:
        counts["window_updates" if data[1] == _WINDOW_UPDATE else "other_frames"] += 1
        await write_frame(self, data)

    async def counted_have(self: PiecesServer, *args: Any) -> Any:
        counts["have_answers"] += 1
        return await have(self, *args)

    muxer_guard.GuardedYamux._write_frame = counted_write  # type: ignore[method-assign]
    pieces_serve.PiecesServer._have = counted_have  # type: ignore[method-assign,assignment]


async def exchange(hosts: int, size: int, steps: int, counts: Counter[str]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    async with start_hosts(hosts) as peers:
        stores = [PayloadStore(RUN, window_steps=steps + 1) for _ in peers]
        partials = [PartialPayloads() for _ in peers]
        rates = [PeerRates() for _ in peers]  # as the daemon: measured by its fetches, read by its server
        servers = [PiecesServer(h, s, p, rates=r)
                   for h, s, p, r in zip(peers, stores, partials, rates, strict=True)]
        for server in servers:
            server.install()
        for i in range(hosts - 1):
            with trio.fail_after(60):
                await connect_all_to(peers[i + 1:], peers[i])
        gates = [HolderGate() for _ in peers]
        for step in range(steps):
            digests = []
            for i in range(hosts):
                data = os.urandom(size)
                digests.append(payload_digest(data))
                stores[i].put_verified(step, digests[i], data)
                servers[i].mark_own(step, digests[i])
            counts.clear()
            served, busy = sum(s.pieces_served for s in servers), sum(s.busy for s in servers)
            cpu, wall = time.process_time(), time.perf_counter()
            with trio.fail_after(600):
                async with trio.open_nursery() as nursery:
                    for i in range(hosts):
                        for j in range(hosts):
                            if i != j:
                                others = [peers[k].peer_id for k in range(hosts) if k not in (i, j)]
                                request = SwarmRequest(RUN, step, digests[j], size)
                                nursery.start_soon(_fetch, peers[i], request, others, stores[i], partials[i],
                                                   peers[j].peer_id, gates[i], rates[i])
            rows.append({"step": step, "cpu_s": round(time.process_time() - cpu, 3),
                         "wall_s": round(time.perf_counter() - wall, 3), **counts,
                         "pieces_served": sum(s.pieces_served for s in servers) - served,
                         "busy_answers": sum(s.busy for s in servers) - busy})
            print(rows[-1], flush=True)
    return rows


async def _fetch(host: Any, request: SwarmRequest, holders: list[Any], store: PayloadStore,
                 partials: PartialPayloads, author: Any, gate: HolderGate, rates: PeerRates) -> None:
    await fetch_swarm(host, request, holders, store=store, partials=partials, complete=[author], gate=gate,
                      rates=rates)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=8, help="hosts in the exchange (default 8)")
    ap.add_argument("--size", type=int, default=1_450_000, help="payload bytes (default 1.45 MB)")
    ap.add_argument("--steps", type=int, default=4, help="exchanges, the first left out (default 4)")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR / "swarm_cpu.json")
    args = ap.parse_args(argv)
    if args.hosts < 2 or args.size < 1 or args.steps < 2:
        print("error: --hosts >= 2, --size >= 1 and --steps >= 2 are needed", file=sys.stderr)
        return 2
    counts: Counter[str] = Counter()
    count_frames(counts)
    rows = trio.run(exchange, args.hosts, args.size, args.steps, counts)
    kept = rows[1:]
    summary = {key: statistics.median(r.get(key, 0) for r in kept)
               for key in ("cpu_s", "wall_s", "window_updates", "other_frames", "have_answers",
                           "pieces_served", "busy_answers")}
    what = "one all-to-all piece exchange in one process on loopback (bench/swarm_cpu.py)"
    write_json(args.out, {"what": what, "hosts": args.hosts, "payload_bytes": args.size, "steps": rows,
                          "median_after_first": summary})
    print(f"{args.hosts} hosts x {args.size} B: median CPU {summary['cpu_s']:.2f} s a step, window updates "
          f"{summary['window_updates']:.0f} of {summary['window_updates'] + summary['other_frames']:.0f} "
          f"frames, {summary['have_answers']:.0f} HAVE answers; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

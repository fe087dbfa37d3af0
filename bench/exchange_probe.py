"""Probe: all-to-all exchange of ~2.8 MB payloads among N processes on loopback.

Not the benchmark yet (bench/exchange.py will be): it prints median round time and MB/s per peer so the
transport's throughput is known. Each round, every peer stores a fresh random payload, announces
(step, sha256) on gossip, and pulls every other peer's payload over /distro/payload/1.0.0. A peer's round
time runs from its own announcement to holding all N-1 other payloads.

    .venv/bin/python bench/exchange_probe.py --peers 4 --rounds 8
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import time

import trio
from distro_node.protocol.gossip import open_gossip
from distro_node.protocol.host import HostConfig, open_host
from distro_node.protocol.store import PayloadStore
from distro_node.protocol.transfer import PayloadRequest, PayloadServer, TransferConfig, fetch_payload
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID

RUN = bytes(32)
ANN = struct.Struct(">Q32s")
DONE = 2**63  # step value of the final "finished, you may leave" announcement


async def peer_main(peers: int, rounds: int, size: int, bootstrap: str | None) -> None:
    cfg = HostConfig(px_interval=0.5, dial_timeout=20.0, px_timeout=10.0)
    xfer = TransferConfig(attempt_timeout=60.0)
    async with open_host(create_new_key_pair(), cfg) as host, open_gossip(host, RUN) as gossip:
        store = PayloadStore(RUN, window_steps=3)
        PayloadServer(host, store, xfer).install()
        print(json.dumps({"addr": str(host.addrs()[0])}), flush=True)
        if bootstrap:
            await host.bootstrap([bootstrap])
        await host.wait_for_peers(peers - 1, timeout=60)
        await gossip.wait_for_subscribers(host.connected_peers(), timeout=60)

        pending: dict[int, list[tuple[ID, bytes]]] = {}
        arrived = trio.Event()
        done: set[ID] = set()

        async def collect() -> None:
            nonlocal arrived
            async for msg in gossip:
                step, digest = ANN.unpack(msg.data)
                if step == DONE:
                    done.add(msg.sender)
                pending.setdefault(step, []).append((msg.sender, digest))
                arrived.set()
                arrived = trio.Event()

        times: list[float] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(collect)
            for step in range(rounds):
                data = os.urandom(size)
                digest = store.put(step, data)
                t0 = time.perf_counter()
                await gossip.publish(ANN.pack(step, digest))
                fetched = 0

                async def pull(sender: ID, want: bytes, step: int = step) -> None:
                    nonlocal fetched
                    req = PayloadRequest(RUN, step, want)
                    await fetch_payload(host, req, [sender], store=store, config=xfer)
                    fetched += 1

                with trio.fail_after(120):
                    async with trio.open_nursery() as pulls:
                        started: set[ID] = set()
                        while len(started) < peers - 1:
                            for sender, want in pending.get(step, []):
                                if sender not in started:
                                    started.add(sender)
                                    pulls.start_soon(pull, sender, want)
                            if len(started) < peers - 1:
                                await arrived.wait()
                times.append(time.perf_counter() - t0)
            # Keep serving until everyone has finished, or slower peers lose their holders.
            await gossip.publish(ANN.pack(DONE, bytes(32)))
            with trio.fail_after(120):
                while len(done) < peers - 1:
                    await arrived.wait()
            nursery.cancel_scope.cancel()
        print(json.dumps({"times": times}), flush=True)


def parent(peers: int, rounds: int, size: int) -> None:
    cmd = [sys.executable, __file__, "--child", "--peers", str(peers), "--rounds", str(rounds)]
    cmd += ["--size", str(size)]
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    if first.stdout is None:
        raise RuntimeError("child stdout not captured")
    seed = json.loads(first.stdout.readline())["addr"]
    procs = [first]
    for _ in range(peers - 1):
        procs.append(subprocess.Popen([*cmd, "--bootstrap", seed], stdout=subprocess.PIPE, text=True))
    per_peer: list[list[float]] = []
    for p in procs:
        out, _ = p.communicate(timeout=600)
        lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        per_peer.append(next(x["times"] for x in lines if "times" in x))
    # Round 0 includes connection warm-up (yamux window growth); report it separately.
    steady = [t for times in per_peer for t in times[1:]]
    med = statistics.median(steady)
    mb_in = (peers - 1) * size / 1e6
    print(json.dumps({
        "peers": peers, "rounds": rounds, "payload_bytes": size,
        "first_round_s": round(statistics.median(t[0] for t in per_peer), 3),
        "median_round_s": round(med, 3),
        "p90_round_s": round(sorted(steady)[int(0.9 * (len(steady) - 1))], 3),
        "download_MBps_per_peer": round(mb_in / med, 1),
        "upload_MBps_per_peer": round(mb_in / med, 1),  # all-to-all: each peer serves N-1 copies per round
    }, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--peers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--size", type=int, default=2_800_000)
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--bootstrap")
    args = ap.parse_args()
    if args.child:
        trio.run(peer_main, args.peers, args.rounds, args.size, args.bootstrap)
    else:
        parent(args.peers, args.rounds, args.size)


if __name__ == "__main__":
    main()

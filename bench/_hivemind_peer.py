"""One hivemind peer process for bench/_exchange_hivemind.py; runs under the hivemind venv's python.

Why a separate interpreter: hivemind 1.1.12 pins older dependencies than this project (protobuf, pydantic,
its own p2pd binary), so it lives in its own venv and this script imports nothing from distro_node. It only
calls hivemind's public API (``P2P``, ``DHT``, ``DecentralizedAverager``).

Modes:
- ``unary`` / ``stream``: hivemind's bulk path. Every peer sends its ``--size`` byte payload to every other
  peer, through p2pd's unary RPC (one protobuf message, persistent control connection) or through a p2pd
  binary stream (length-prefixed bytes, the transport under hivemind's averaging streams). The receiver
  checks the sha256 the sender put in the header. A peer's round runs from its "go" to having sent its
  payload to all N-1 peers (acknowledged) and received all N-1 of theirs.
- ``allreduce``: hivemind's dense all-reduce (DecentralizedAverager, butterfly) of a float32 tensor of
  ``--numel`` elements; matchmaking and the all-reduce itself are timed separately.

The parent paces rounds over stdin/stdout, JSON lines both ways: this process prints ``{"ready": ...}``,
then one line per stage; it reads ``{"peers": [...]}``, ``{"go": r}``, ``{"trigger": r}``, ``{"stop": 1}``.
Every wait is bounded by ``--wait``; on any failure it prints ``{"error": ...}`` and exits non-zero. The
parent starts it in its own session and kills that process group (p2pd, the DHT and averager processes).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import queue
import sys
import threading
import time
from typing import Any

LOOPBACK = "/ip4/127.0.0.1/tcp/0"
PREFIX = "distrobench"


def say(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


class Commands:
    """Lines from the parent on stdin, read by a daemon thread so every wait can carry a timeout."""

    def __init__(self) -> None:
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in sys.stdin:
            if line.strip():
                self._queue.put(json.loads(line))
        self._queue.put(None)

    def next(self, key: str, timeout: float) -> Any:
        """The value of ``key`` in the next command; TimeoutError on silence, EOFError if the parent left."""
        try:
            cmd = self._queue.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no {key!r} command within {timeout:g} s") from None
        if cmd is None or "stop" in cmd:
            raise EOFError(f"stopped while waiting for {key!r}")
        if key not in cmd:
            raise ValueError(f"expected {key!r}, got {cmd}")
        return cmd[key]

    async def anext(self, key: str, timeout: float) -> Any:
        return await asyncio.to_thread(self.next, key, timeout)


# ------------------------------------------------------------------------------------------- bulk path


class Arrivals:
    """Payloads received per round, with an event set on every arrival (no polling)."""

    def __init__(self) -> None:
        self.by_round: dict[int, set[str]] = {}
        self.bad = 0
        self.changed = asyncio.Event()

    def note(self, rnd: int, sender: str, data: bytes, digest: bytes) -> None:
        if hashlib.sha256(data).digest() != digest:
            self.bad += 1
            return
        self.by_round.setdefault(rnd, set()).add(sender)
        self.changed.set()

    async def wait(self, rnd: int, count: int) -> None:
        while len(self.by_round.get(rnd, ())) < count:
            self.changed.clear()
            if len(self.by_round.get(rnd, ())) >= count:
                return
            await self.changed.wait()


async def bulk_main(args: argparse.Namespace, commands: Commands) -> int:
    from hivemind.p2p import P2P, P2PContext, PeerID
    from hivemind.proto import runtime_pb2

    p2p = await P2P.create(initial_peers=args.bootstrap or None, host_maddrs=[LOOPBACK], nat_port_map=False,
                           auto_nat=False, use_relay=False)
    arrivals = Arrivals()

    async def put(req: runtime_pb2.Tensor, ctx: P2PContext) -> runtime_pb2.Tensor:
        if req.size:  # a ping carries no round
            arrivals.note(int(req.size[0]), str(ctx.remote_id), req.buffer, bytes.fromhex(req.dtype))
        return runtime_pb2.Tensor()

    async def on_stream(info: Any, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            header = await reader.readexactly(40)
            data = await P2P.receive_raw_data(reader)
            arrivals.note(int.from_bytes(header[:8], "big"), str(info.peer_id), data, header[8:])
            writer.write(b"\x01")
            await writer.drain()
        finally:
            writer.close()

    await p2p.add_protobuf_handler("bench.put", put, runtime_pb2.Tensor)
    await p2p.add_binary_stream_handler("bench.stream", on_stream)
    try:
        say(ready=True, peer_id=str(p2p.peer_id), maddrs=[str(m) for m in await p2p.get_visible_maddrs()])
        others = [PeerID.from_base58(p) for p in await commands.anext("peers", args.wait)
                  if p != str(p2p.peer_id)]
        t0 = time.perf_counter()
        for peer in others:  # routes to every peer exist (found through the bootstrap) before round 0
            await asyncio.wait_for(p2p.call_protobuf_handler(peer, "bench.put", runtime_pb2.Tensor(),
                                                             runtime_pb2.Tensor), args.wait)
        say(connected=True, s=time.perf_counter() - t0)

        async def send(peer: PeerID, rnd: int, payload: bytes, digest: bytes) -> None:
            if args.mode == "unary":
                msg = runtime_pb2.Tensor(buffer=payload, size=[rnd], dtype=digest.hex())
                await p2p.call_protobuf_handler(peer, "bench.put", msg, runtime_pb2.Tensor)
                return
            _, reader, writer = await p2p.call_binary_stream_handler(peer, "bench.stream")
            try:
                writer.write(rnd.to_bytes(8, "big") + digest)
                await P2P.send_raw_data(payload, writer)
                if await reader.readexactly(1) != b"\x01":
                    raise ConnectionError("bad acknowledgement")
            finally:
                writer.close()

        for rnd in range(args.rounds):
            if await commands.anext("go", args.wait) != rnd:
                raise ValueError(f"rounds out of order at {rnd}")
            payload = os.urandom(args.size)
            digest = hashlib.sha256(payload).digest()
            t0 = time.perf_counter()
            await asyncio.wait_for(asyncio.gather(*(send(p, rnd, payload, digest) for p in others),
                                                  arrivals.wait(rnd, len(others))), args.wait)
            say(round=rnd, s=time.perf_counter() - t0, bad=arrivals.bad)
    finally:
        await p2p.shutdown()
    return 0


# ------------------------------------------------------------------------------------ dense all-reduce


def allreduce_main(args: argparse.Namespace) -> int:
    """The stdin reader starts only after the DHT and averager processes are forked: a forked child closes
    its inherited sys.stdin, which would wait forever for the lock our reader thread holds."""
    import hivemind
    import torch
    from hivemind.averaging.control import AveragingStage
    from hivemind.compression import Float16Compression, NoCompression

    dht = hivemind.DHT(initial_peers=args.bootstrap or None, host_maddrs=[LOOPBACK], start=True)
    averager = None
    try:
        averager = hivemind.DecentralizedAverager(
            [torch.zeros(args.numel)], dht, start=True, prefix=PREFIX, target_group_size=args.peers,
            min_group_size=args.peers, compression=Float16Compression() if args.fp16 else NoCompression(),
            # Generous on a loaded 2-core machine: a late part would otherwise be left out of the average.
            request_timeout=5.0, min_matchmaking_time=10.0, next_chunk_timeout=30.0)
        say(ready=True, peer_id=str(dht.peer_id), maddrs=[str(m) for m in dht.get_visible_maddrs()])
        commands = Commands()
        commands.next("peers", args.wait)
        say(connected=True, s=0.0)
        for rnd in range(args.rounds):
            if commands.next("go", args.wait) != rnd:
                raise ValueError(f"rounds out of order at {rnd}")
            with averager.get_tensors() as tensors:
                tensors[0].fill_(float(args.index + rnd))  # the group mean is then known exactly
            t0 = time.perf_counter()
            control = averager.step(wait=False, require_trigger=True, timeout=args.wait)
            deadline = time.monotonic() + args.wait
            # The stage lives in shared memory and has no event; poll it finely (this only times matchmaking).
            while control.stage != AveragingStage.AWAITING_TRIGGER and not control.done():
                if time.monotonic() > deadline:
                    raise TimeoutError("no group formed")
                time.sleep(0.005)
            matchmaking = time.perf_counter() - t0
            say(grouped=rnd, matchmaking_s=matchmaking)
            if commands.next("trigger", args.wait) != rnd:
                raise ValueError(f"trigger out of order at {rnd}")
            t0 = time.perf_counter()
            control.allow_allreduce()
            group = control.result(timeout=args.wait)
            elapsed = time.perf_counter() - t0
            if not group or len(group) != args.peers:
                raise RuntimeError(f"all-reduce of round {rnd} failed (group {group and len(group)})")
            expected = (args.peers - 1) / 2 + rnd
            with averager.get_tensors() as tensors:
                error = float((tensors[0] - expected).abs().max())
            say(round=rnd, s=elapsed, matchmaking_s=matchmaking, max_abs_error=error)
    finally:
        if averager is not None:
            averager.shutdown()
        dht.shutdown()
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("unary", "stream", "allreduce"), required=True)
    ap.add_argument("--peers", type=int, required=True)
    ap.add_argument("--index", type=int, required=True, help="this peer's index (its all-reduce fill)")
    ap.add_argument("--rounds", type=int, required=True)
    ap.add_argument("--size", type=int, default=0, help="payload bytes (unary, stream)")
    ap.add_argument("--numel", type=int, default=0, help="float32 elements to all-reduce")
    ap.add_argument("--fp16", action="store_true", help="all-reduce with 16-bit values on the wire")
    ap.add_argument("--bootstrap", action="append", default=[], help="a peer's multiaddr (repeatable)")
    ap.add_argument("--wait", type=float, default=120.0, help="bound on any single wait, seconds")
    args = ap.parse_args()
    try:
        if args.mode == "allreduce":
            return allreduce_main(args)
        return asyncio.run(bulk_main(args, Commands()))
    except EOFError:
        return 0
    except Exception as exc:  # report, then let the parent kill the process group
        say(error=f"{type(exc).__name__}: {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())

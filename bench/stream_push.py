"""A stranger pushes 1 GiB on one stream to a real daemon: how much memory it costs the node, and whether the
pusher is cut off (threats: resources; protocol/muxer_guard.py).

One ``distro-node join`` founder trains alone on loopback (tiny preset). An attacker host (a fresh key, no
membership: the run id is public) opens a state-request stream, sends a valid snapshot request and then keeps
writing with its yamux send window raised far past what the daemon granted, as py-libp2p 0.8.1 itself would
have buffered without limit (1,356 MB RSS for 1 GiB, measured before the guard). The bench samples the
daemon's resident memory (/proc) every 20 ms and records the baseline, the peak, the bytes the attacker got
out before its connection was closed, and that the daemon kept training.

    .venv/bin/python bench/stream_push.py            # -> bench/results/stream_push.json

The daemon is stopped by pid (SIGTERM, bounded wait, SIGKILL), whatever happened.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgpack
import trio
from _common import RESULTS_DIR, write_json
from distro_node.node.join_process import CLI, PeerProc, stop_all
from distro_node.protocol.host import open_host
from distro_node.protocol.muxer_guard import PER_CONNECTION_BYTES, PER_STREAM_BYTES
from distro_node.protocol.sync import STATE_PROTOCOL
from distro_node.protocol.testing import NO_PX_LOOP
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID

RUN = ["--preset", "tiny", "--batch-size", "4", "--seq-len", "32", "--genesis-peers", "1",
       "--steps", "100000", "--log-format", "json"]
CHUNK = 1 << 20
MiB = float(1 << 20)


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


async def push(addr: str, peer: str, run_id: bytes, total: int, limit_s: float) -> tuple[int, str]:
    """(bytes written before the daemon cut us off or ``total`` was reached, how it ended)."""
    async with open_host(create_new_key_pair(), NO_PX_LOOP) as attacker:
        await attacker.dial(addr)
        stream = await attacker.open_stream(ID.from_base58(peer), STATE_PROTOCOL)
        request = msgpack.packb({"op": "meta", "run_id": run_id, "genesis": False}, use_bin_type=True)
        await stream.write(len(request).to_bytes(4, "big") + request)
        stream.muxed_stream.send_window = 1 << 40  # type: ignore[attr-defined]  # ignore what we were granted
        sent, ended = 0, f"sent all {total} bytes"
        with trio.move_on_after(limit_s) as scope:
            try:
                while sent < total:
                    await stream.write(b"y" * CHUNK)
                    sent += CHUNK
            except Exception as exc:  # the daemon closed the connection under us: the defence
                ended = f"connection closed by the daemon ({type(exc).__name__})"
        if scope.cancelled_caught:
            ended = f"still writing after {limit_s:.0f} s"
        return sent, ended


def run(total: int, limit_s: float, log_dir: Path) -> dict[str, Any]:
    daemon = PeerProc([*CLI, "join", *RUN], "daemon", log_dir)
    try:
        info = daemon.info()
        before = daemon.wait_step(3, 120)["step"]
        baseline = [rss_bytes(daemon.proc.pid)]
        for _ in range(20):
            time.sleep(0.1)
            baseline.append(rss_bytes(daemon.proc.pid))
        samples: list[int] = []

        async def main() -> tuple[int, str]:
            async with trio.open_nursery() as nursery:
                async def sample() -> None:
                    while True:
                        samples.append(rss_bytes(daemon.proc.pid))
                        await trio.sleep(0.02)

                nursery.start_soon(sample)
                run_id = bytes.fromhex(str(info["run_id"]))
                result = await push(str(info["addrs"][0]), str(info["peer_id"]), run_id, total, limit_s)
                await trio.sleep(2.0)  # what memory does right after
                nursery.cancel_scope.cancel()
            return result

        sent, ended = trio.run(main)
        after_push = daemon.wait_step(max(daemon.steps()) + 3, 60)["step"]
        settled = rss_bytes(daemon.proc.pid)
    finally:
        stop_all([daemon], 20.0)
    base = statistics.median(baseline)
    peak = max(samples)
    return {
        "pushed_target_bytes": total,
        "sent_bytes_before_cut": sent,
        "ended": ended,
        "per_stream_cap_bytes": PER_STREAM_BYTES,
        "per_connection_cap_bytes": PER_CONNECTION_BYTES,
        "baseline_rss_mb": round(base / MiB, 1),
        "peak_rss_mb": round(peak / MiB, 1),
        "peak_growth_mb": round((peak - base) / MiB, 1),
        "growth_over_connection_cap": round((peak - base) / PER_CONNECTION_BYTES, 3),
        "rss_after_mb": round(settled / MiB, 1),
        "daemon_steps": [before, after_push],
        "samples": len(samples),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=1.0, help="how much to push (default 1 GiB)")
    parser.add_argument("--limit", type=float, default=120.0, help="seconds the push may take")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "stream_push.json")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="stream-push-") as tmp:
        result = run(int(args.gib * (1 << 30)), args.limit, Path(tmp))
    path = write_json(args.out, result)
    print(f"[stream_push] sent {result['sent_bytes_before_cut'] / MiB:.0f} MiB, {result['ended']}; RSS "
          f"{result['baseline_rss_mb']} -> peak {result['peak_rss_mb']} MB (+{result['peak_growth_mb']}, "
          f"{result['growth_over_connection_cap']}x the {PER_CONNECTION_BYTES / MiB:.0f} MiB connection "
          f"cap); daemon steps {result['daemon_steps']}", flush=True)
    print(f"[stream_push] wrote {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

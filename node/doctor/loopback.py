"""The ceiling of the libp2p stack on this CPU: one stream between two in-process hosts over loopback.

Loopback removes the network from the picture: what is left is Noise + yamux in Python on this CPU. The
transfer is bounded (a fixed byte count the receiver never reads past, a deadline on the whole exchange) and
never leaves this machine.
"""

from __future__ import annotations

import logging
import time

import trio
from distro_node.node.doctor.bandwidth import MAX_BYTES, BandwidthError, LoopbackRate
from distro_node.node.doctor.report import human_bytes
from distro_node.protocol.host import HostConfig, open_host
from distro_node.protocol.wire import READ_CHUNK
from libp2p.abc import INetStream
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.custom_types import TProtocol
from libp2p.network.stream.exceptions import StreamEOF

PROTOCOL = TProtocol("/distro/doctor/bandwidth/1.0.0")
_WRITE_CHUNK = 60 * 1024  # under yamux's 64 KiB frame, as the payload server writes
_HOSTS = HostConfig(listen_addrs=("/ip4/127.0.0.1/tcp/0",), px_interval=0.0, dial_timeout=10.0)


async def _transfer(nbytes: int) -> float:
    received = 0

    async def sink(stream: INetStream) -> None:
        nonlocal received
        while received < nbytes:
            try:
                part = await stream.read(min(READ_CHUNK, nbytes - received))
            except StreamEOF:
                break
            if not part:
                break
            received += len(part)
        await stream.write(b"\x01")
        await stream.close()

    async with (
        open_host(create_new_key_pair(), _HOSTS) as sender,
        open_host(create_new_key_pair(), _HOSTS) as rx,
    ):
        rx.set_handler(PROTOCOL, sink)
        await sender.dial(str(rx.addrs()[0]))
        stream = await sender.open_stream(rx.peer_id, PROTOCOL)
        block = bytes(_WRITE_CHUNK)
        start = time.perf_counter()
        sent = 0
        while sent < nbytes:
            n = min(_WRITE_CHUNK, nbytes - sent)
            await stream.write(block[:n])
            sent += n
        ack = await stream.read(1)
        seconds = time.perf_counter() - start
        await stream.close()
    if ack != b"\x01" or received != nbytes:
        raise BandwidthError(f"receiver got {received} of {nbytes} bytes")
    return seconds


def measure_loopback(nbytes: int, timeout: float = 30.0) -> LoopbackRate:
    """Send ``nbytes`` (<= :data:`MAX_BYTES`) over a fresh Noise+yamux connection and time it."""
    if not 0 < nbytes <= MAX_BYTES:
        raise ValueError(f"nbytes must be in 1..{MAX_BYTES}, got {nbytes}")

    async def bounded() -> float:
        with trio.fail_after(timeout):
            return await _transfer(nbytes)

    libp2p_log = logging.getLogger("libp2p")
    level = libp2p_log.level
    libp2p_log.setLevel(logging.ERROR)  # 0.8.1 logs routine stream closes at WARNING
    try:
        seconds = trio.run(bounded)
    except trio.TooSlowError:
        raise BandwidthError(
            f"loopback transfer of {human_bytes(nbytes)} did not finish in {timeout:g} s"
        ) from None
    except BandwidthError:
        raise
    except Exception as exc:  # DialError, stream errors from libp2p: the stack itself is broken here
        raise BandwidthError(f"loopback transfer failed: {type(exc).__name__}: {exc}") from exc
    finally:
        libp2p_log.setLevel(level)
    return LoopbackRate(nbytes, seconds)

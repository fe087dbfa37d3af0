"""When bytes written to a stream have reached its peer: the TCP send queue under a py-libp2p stream.

Why: a write to a stream returns once its bytes are in the kernel, not once they left. On a slow uplink the
socket and the link's queue hold a second or two of them: at a quarter of the testbed's 2 Mbit/s line, the
last first copy of a slow origin's payload was counted sent up to 2 s before its last byte left
(docs/benchmarks.md). The pieces server (pieces_serve.py) counted that upload's slot free at the write, and a
relay or a repeat it started then shared the line with the first copy that every other peer was waiting
for. ``SIOCOUTQ`` is what the socket still holds that its peer has not acknowledged; once it has drained,
the peer holds what was written before.

Only for a plain TCP connection: a relayed circuit, or a transport without a socket, has no such count
(:func:`send_queue_socket` is None), and :func:`until_acknowledged` returns at once.
"""

from __future__ import annotations

import fcntl
import struct
import termios
from typing import Any

import trio
from libp2p.abc import INetStream

from .noise_reads import tcp_socket

# Linux's SIOCOUTQ shares its number with TIOCOUTQ: the bytes in a TCP socket's send queue, unacknowledged
# ones included.
_SIOCOUTQ = termios.TIOCOUTQ
_INT = struct.Struct("i")
# Drained enough: a few frames of other streams' small messages may share the connection.
DRAINED_BYTES = 4 * 1024
_MIN_POLL = 0.002  # seconds between two looks at the queue, at least
_MAX_POLLS = 64


def send_queue_socket(stream: INetStream) -> Any | None:
    """The TCP socket under ``stream``'s connection (yamux over Noise over TCP), or None."""
    secured = getattr(stream.muxed_conn, "secured_conn", None)
    noise = getattr(getattr(secured, "conn", None), "read_writer", None)
    return tcp_socket(getattr(noise, "read_write_closer", None))


def queued_bytes(sock: Any) -> int | None:
    """Bytes ``sock`` holds that its peer has not acknowledged; None when the kernel will not say."""
    try:
        raw = fcntl.ioctl(sock.fileno(), _SIOCOUTQ, bytes(_INT.size))
    except (OSError, ValueError):  # closed meanwhile, or not a socket that counts
        return None
    return int(_INT.unpack(raw)[0])


async def until_acknowledged(stream: INetStream, rate: float, cap: float) -> bool:
    """Wait until the connection under ``stream`` holds at most :data:`DRAINED_BYTES` unacknowledged, at
    most ``cap`` seconds. ``rate``: the uplink in bytes/s, which paces the looks (each waits half of what
    is left at that rate). True once drained or when there is nothing to look at; False at the cap (other
    streams kept the queue full, or the peer stopped reading)."""
    sock = send_queue_socket(stream)
    return True if sock is None else await until_drained(sock, rate, cap)


async def until_drained(sock: Any, rate: float, cap: float) -> bool:
    """:func:`until_acknowledged` for a TCP socket."""
    if not rate > 0:
        return True
    deadline = trio.current_time() + cap
    for _ in range(_MAX_POLLS):
        left = queued_bytes(sock)
        if left is None or left <= DRAINED_BYTES:
            return True
        wait = min(max(_MIN_POLL, left / rate / 2), deadline - trio.current_time())
        if wait <= 0:
            return False
        await trio.sleep(wait)
    return False

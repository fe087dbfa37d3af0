"""Reading a Noise message off TCP in a few receives, not one per packet that arrives.

Why: py-libp2p 0.8.1 reads each Noise message (up to 64 KiB) with ``read_exactly``, one ``recv`` per call,
and each ``recv`` that finds nothing parks the task until the kernel reports the socket readable, which it
does as segments arrive. Behind a shaped uplink a message comes in a few kilobytes at a time, and every
part is a trip through trio's scheduler and py-libp2p's locks. On the 2-core namespace testbed 8 peers
spend about 0.3 CPU s per MB exchanged there, against 0.12 in one process on loopback
(bench/swarm_cpu.py), where messages arrive whole; the testbed's rounds are CPU-bound at 8 peers.

The fix is the socket's receive low-water mark: once the length prefix says how many bytes the message
still needs, ``SO_RCVLOWAT`` asks the kernel to report the socket readable only when that many have
arrived (Linux honours it for readiness and wake-ups). A non-blocking ``recv`` still returns whatever is
there, so nothing waits for bytes that are not coming: the mark is set only for the rest of a message
whose length the peer already sent, capped at one Noise message, and put back to 1 afterwards, also when
the read is cancelled. Connections that are not a plain TCP socket (a relayed circuit) read as before.
"""

from __future__ import annotations

import socket
from typing import Any

from libp2p.io.exceptions import IncompleteReadError
from libp2p.io.utils import read_exactly
from libp2p.security.noise import io as noise_io

# Below this the message is read as before: a request or a reply header is one segment anyway.
_LOW_WATER_FROM = 4 * 1024
_MAX_NOISE_MESSAGE = 65_535


def _tcp_socket(conn: Any) -> Any | None:
    """The trio socket under a py-libp2p raw TCP connection, or None (another transport, a circuit)."""
    sock = getattr(getattr(getattr(conn, "stream", None), "stream", None), "socket", None)
    if sock is None or getattr(sock, "type", None) != socket.SOCK_STREAM:
        return None
    return sock


class LowWaterNoiseReader(noise_io.NoisePacketReadWriter):
    """py-libp2p's Noise packet reader, reading a long message's body with ``SO_RCVLOWAT`` set."""

    async def read_msg(self) -> bytes:
        length = await self.next_msg_len()
        conn = self.read_write_closer
        sock = _tcp_socket(conn) if length >= _LOW_WATER_FROM else None
        if sock is None:
            return await read_exactly(conn, length)
        body = bytearray()
        while len(body) < length:  # bounded: every pass reads at least a byte, or raises
            need = length - len(body)
            if body:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, min(need, _MAX_NOISE_MESSAGE))
            try:
                got = await conn.read(need)
            finally:
                if body:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)
            if not got:
                raise IncompleteReadError(f"connection closed {len(body)} bytes into a {length}-byte "
                                          "Noise message", expected_bytes=length, received_bytes=len(body))
            body.extend(got)
        return bytes(body)


def install_noise_reads() -> None:
    """Make py-libp2p's Noise sessions read through :class:`LowWaterNoiseReader`.

    A rebinding, as for the muxer (muxer_guard.py): ``BaseNoiseMsgReadWriter`` builds its packet reader by
    the module name ``NoisePacketReadWriter``."""
    setattr(noise_io, "NoisePacketReadWriter", LowWaterNoiseReader)  # noqa: B010 (rebinding, see above)

"""Reading a Noise message off TCP in a few receives, not one per packet that arrives.

Why: py-libp2p 0.8.1 reads each Noise message (up to 64 KiB) with ``read_exactly``, one ``recv`` per call,
and each ``recv`` that finds nothing parks the task until the kernel reports the socket readable, which it
does as segments arrive. Behind a shaped uplink a message comes in a few kilobytes at a time, and every
part is a trip through trio's scheduler and py-libp2p's locks. On the 2-core namespace testbed 8 peers
spend about 0.3 CPU s per MB exchanged there, against 0.12 in one process on loopback
(bench/swarm_cpu.py), where messages arrive whole; the testbed's rounds are CPU-bound at 8 peers.

Reading often also costs the uplink. Linux acknowledges every second full segment at once while the
receive window moves on, and it moves on when the reader empties the socket: on a 20/2 Mbit line that
downloads at its full rate the acknowledgements are 2.5% of the bytes downloaded (bench/results/acks.json),
which at 8 peers is a sixth of the uplink the peer's own payload has to leave by (docs/benchmarks.md).
Bytes left unread a while are acknowledged together (a throwaway loop over one testbed line, 5 Mbit/s
down, receives 10 ms apart: 3.1 segments an acknowledgement against 1.8; at 20 Mbit/s, 7.1).

So the rest of a long message (once the length prefix says what it still needs) is read one of two ways:

- **paced**, on a connection whose last long message came slowly: sleep half the time the rest would take
  at that message's rate (at most ``max_wait``), read what is there, repeat. Half, so the rate measured
  never lags a connection that got faster (each message's own time is what the next one goes by); the cap
  bounds how long bytes that are already there wait, whatever the rate said;
- **with the low-water mark**, on a fast connection (the rest is due within a millisecond), or the first
  long message of a connection: ``SO_RCVLOWAT`` asks the kernel to report the socket readable only when
  the rest has arrived. The mark also has Linux acknowledge at once while fewer bytes than it are unread,
  which is why it is not used where acknowledgements cost. A non-blocking ``recv`` still returns whatever
  is there, so nothing waits for bytes that are not coming: the mark is set only for the rest of a message
  whose length the peer already sent, capped at one Noise message, and put back to 1 afterwards, also when
  the read is cancelled.

Connections that are not a plain TCP socket (a relayed circuit) read as before.
"""

from __future__ import annotations

import socket
from typing import Any, ClassVar

import trio
from libp2p.io.exceptions import IncompleteReadError
from libp2p.io.utils import read_exactly
from libp2p.security.noise import io as noise_io

from .host_config import READ_PACE_WAIT_LIMIT, HostConfig

# Below this the message is read as before: a request or a reply header is one segment anyway.
_LOW_WATER_FROM = 4 * 1024
_MAX_NOISE_MESSAGE = 65_535
# A paced read sleeps this share of the time the rest would take at the connection's last rate ...
PACE_SHARE = 0.5
# ... and reads with the mark when that is under this many seconds (a fast connection).
PACE_FROM = 0.001


def pace(need: int, seconds_per_byte: float | None, max_wait: float) -> float | None:
    """Seconds to sleep before reading the ``need`` bytes a message still lacks, or None to wait for them
    with the low-water mark (module docstring). ``seconds_per_byte``: the connection's last long message,
    None before its first."""
    if seconds_per_byte is None or max_wait <= 0:
        return None
    wait = PACE_SHARE * need * seconds_per_byte
    return None if wait < PACE_FROM else min(wait, max_wait)


def _tcp_socket(conn: Any) -> Any | None:
    """The trio socket under a py-libp2p raw TCP connection, or None (another transport, a circuit)."""
    sock = getattr(getattr(getattr(conn, "stream", None), "stream", None), "socket", None)
    if sock is None or getattr(sock, "type", None) != socket.SOCK_STREAM:
        return None
    return sock


class PacedNoiseReader(noise_io.NoisePacketReadWriter):
    """py-libp2p's Noise packet reader, reading a long message's body paced or with ``SO_RCVLOWAT`` set.

    ``max_wait`` is process-wide, as the rebinding that installs the class is
    (:func:`install_noise_reads`)."""

    max_wait: ClassVar[float] = HostConfig.read_pace_max_wait
    _seconds_per_byte: float | None = None  # of this connection's last long message

    async def read_msg(self) -> bytes:
        length = await self.next_msg_len()
        conn = self.read_write_closer
        sock = _tcp_socket(conn) if length >= _LOW_WATER_FROM else None
        if sock is None:
            return await read_exactly(conn, length)
        started = trio.current_time()
        body = bytearray()
        while len(body) < length:  # bounded: every pass reads at least a byte, or raises
            need = length - len(body)
            wait = pace(need, self._seconds_per_byte, self.max_wait) if body else 0.0
            if wait:
                await trio.sleep(wait)
            elif wait is None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, min(need, _MAX_NOISE_MESSAGE))
            try:
                got = await conn.read(need)
            finally:
                if wait is None:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)
            if not got:
                raise IncompleteReadError(f"connection closed {len(body)} bytes into a {length}-byte "
                                          "Noise message", expected_bytes=length, received_bytes=len(body))
            body.extend(got)
        self._seconds_per_byte = (trio.current_time() - started) / length
        return bytes(body)


def install_noise_reads(max_wait: float) -> None:
    """Make py-libp2p's Noise sessions read through :class:`PacedNoiseReader`, pacing for at most
    ``max_wait`` seconds at a time (0: never paced, the mark only).

    A rebinding, as for the muxer (muxer_guard.py): ``BaseNoiseMsgReadWriter`` builds its packet reader by
    the module name ``NoisePacketReadWriter``."""
    if not 0 <= max_wait < READ_PACE_WAIT_LIMIT:
        raise ValueError(f"install_noise_reads: max_wait must be in [0, {READ_PACE_WAIT_LIMIT:g}) seconds, "
                         f"got {max_wait}")
    PacedNoiseReader.max_wait = max_wait
    setattr(noise_io, "NoisePacketReadWriter", PacedNoiseReader)  # noqa: B010 (rebinding, see above)

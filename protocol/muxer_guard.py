"""Yamux with its receive window enforced: a peer that sends past it is cut off, not buffered.

Why: py-libp2p 0.8.1's yamux counts the receive window but does not enforce it. A DATA frame that overruns
the window is logged ("peer exceeded receive window") and appended to the stream's buffer anyway, so any
connected host, no membership needed, can make us hold as much as it sends on a stream nobody reads: one
stream pushing 1 GiB took a node from 320 MB to 1,356 MB RSS. (Reported upstream as a py-libp2p yamux
issue; see docs/architecture.md.)

How: :class:`GuardedYamux` keeps each stream's unread bytes in a :class:`CappedBuffer`. An honest sender
never has more than the window in flight (16 MiB at most, yamux's largest), so a buffer may hold
``per_stream`` bytes and all of a connection's buffers ``per_connection``; the frame that would pass either
is refused by raising ``trio.TooSlowError``, which yamux's reader answers by closing the whole connection
(its handling of a stalled frame body). Closing the connection rather than one stream is deliberate: the
sender broke the protocol, and nothing it sends on that connection can be trusted to be paced.

Frames go out whole, also when the task writing one is cancelled (:meth:`GuardedYamux._write_frame`). In
py-libp2p 0.8.1 a cancel that lands inside the secured connection's write leaves the connection broken for
good: Noise has already spent the frame's nonce when the TCP write is cancelled, or half the frame is on
the wire, and the peer's next decrypt fails ("Failed authentication of message"), so it drops the whole
connection, gossip and every other stream included. Cancelling a stream's write is routine (a piece fetch
that completes cancels its other sessions, a raced pull cancels the loser): on loopback a third of
one-piece fetches lost their connection this way and waited ~0.25 s to redial it.

A stream grants its window back in halves (:class:`PacedYamuxStream`), as go-yamux does: py-libp2p 0.8.1
sends a WINDOW_UPDATE after every read that leaves any slack, so each frame read cost a frame written back,
encrypted and sent, and decrypted and handled by the sender. In an in-process exchange of eight 1.45 MB
payloads among 8 peers (bench/swarm_cpu.py), window updates were 64% of all frames (34,519 of 54,283);
granted in halves they are 1,493, and the step's CPU fell from 27.1 s to 22.4 s.
"""

from __future__ import annotations

import logging
from typing import Any

import trio
from libp2p.stream_muxer import muxer_multistream
from libp2p.stream_muxer.yamux import yamux as yamux_module
from libp2p.stream_muxer.yamux.yamux import MAX_WINDOW_SIZE, Yamux, YamuxStream

logger = logging.getLogger(__name__)

PER_STREAM_BYTES = 2 * MAX_WINDOW_SIZE  # twice what any honest sender may have in flight
PER_CONNECTION_BYTES = 4 * MAX_WINDOW_SIZE
# How long a frame (64 KiB at most) may take to leave once started. 64 KiB at 1 Mbit/s is 0.5 s; a frame
# that has not left after this long means the peer stopped reading, and the connection is closed.
FRAME_WRITE_SECONDS = 30.0


class BufferOverrun(trio.TooSlowError):
    """A peer sent more unread bytes than the caps allow; yamux closes the connection on this type."""


class CappedBuffer(bytearray):
    def __init__(self, owner: GuardedBuffers) -> None:
        super().__init__()
        self._owner = owner

    def extend(self, data: Any) -> None:
        owner, size = self._owner, len(data)
        if len(self) + size > owner.per_stream or owner.total() + size > owner.per_connection:
            owner.overrun(len(self) + size)
        super().extend(data)


class GuardedBuffers(dict[int, bytearray]):
    """Yamux's ``stream_buffers``: every buffer it creates becomes a :class:`CappedBuffer`."""

    def __init__(self, peer: object, per_stream: int, per_connection: int) -> None:
        super().__init__()
        self.peer = peer
        self.per_stream = per_stream
        self.per_connection = per_connection
        self.overruns = 0

    def __setitem__(self, key: int, value: bytearray) -> None:
        buffer = CappedBuffer(self)
        if value:
            buffer.extend(value)
        super().__setitem__(key, buffer)

    def total(self) -> int:
        return sum(len(b) for b in self.values())

    def overrun(self, size: int) -> None:
        self.overruns += 1
        logger.warning("peer %s sent past yamux's receive window (%d unread bytes on a stream, caps %d per "
                       "stream and %d per connection): closing the connection", self.peer, size,
                       self.per_stream, self.per_connection)
        raise BufferOverrun()


class GuardedYamux(Yamux):
    """py-libp2p's Yamux with :class:`GuardedBuffers`; used by every host of ours (protocol/host.py)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stream_buffers = GuardedBuffers(self.peer_id, PER_STREAM_BYTES, PER_CONNECTION_BYTES)

    async def _write_frame(self, data: bytes) -> None:
        """One frame onto the secured connection, all of it or the connection closed (module docstring).

        Waiting for the write lock may be cancelled (nothing of the frame is out yet); the write itself is
        shielded, bounded by ``FRAME_WRITE_SECONDS``, and a cancel that came meanwhile is delivered after."""
        async with self._write_lock:
            with trio.CancelScope(shield=True) as scope:
                scope.deadline = trio.current_time() + FRAME_WRITE_SECONDS
                await self.secured_conn.write(data)
        if scope.cancelled_caught:
            logger.warning("a frame to %s did not leave in %gs: closing the connection", self.peer_id,
                           FRAME_WRITE_SECONDS)
            with trio.CancelScope(shield=True):
                await self._cleanup_on_error()
            raise trio.BrokenResourceError(f"connection to {self.peer_id} stalled writing a frame")
        await trio.lowlevel.checkpoint()


class PacedYamuxStream(YamuxStream):
    """A yamux stream that grants its receive window back once half of it was read (module docstring).

    The sender never waits on a window that holds unread bytes of ours: what it may still send is the
    window less what sits unread here, and at least half is granted again as soon as half was read. The
    auto-tuning (a window that doubles while updates come within a few round trips) is py-libp2p's."""

    async def _auto_tune_and_send_window_update(self, *, bytes_read: int = 0) -> None:
        increment = 0
        async with self.window_lock:
            buffered = len(self.conn.stream_buffers.get(self.stream_id, b""))
            slack = self.target_recv_window - (self.recv_window + buffered)
            # Half the window, not py-libp2p's ``_grow_threshold()``: that reads environment variables, and
            # this runs on every read.
            if slack > 0 and slack >= self.target_recv_window // 2:
                increment = self._grow_to_delta(buffered) + self._apply_autotune_epoch(buffered)
        if increment > 0:
            await self.send_window_update(increment, skip_lock=True)


def install_muxer_guard() -> None:
    """Make every yamux connection of this process a :class:`GuardedYamux` of :class:`PacedYamuxStream`.

    Why a rebinding: py-libp2p 0.8.1 builds yamux connections by the name ``Yamux`` in
    ``muxer_multistream.new_conn``, ignoring the class given in ``new_host(muxer_opt=...)``, and streams by
    the name ``YamuxStream`` in its yamux module. Idempotent.
    """
    setattr(muxer_multistream, "Yamux", GuardedYamux)  # noqa: B010 (rebinding py-libp2p's name, see above)
    setattr(yamux_module, "YamuxStream", PacedYamuxStream)  # noqa: B010 (likewise)


__all__ = ["FRAME_WRITE_SECONDS", "PER_CONNECTION_BYTES", "PER_STREAM_BYTES", "BufferOverrun", "CappedBuffer",
           "GuardedBuffers", "GuardedYamux", "PacedYamuxStream", "install_muxer_guard"]

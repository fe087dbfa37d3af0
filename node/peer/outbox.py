"""The ordered gossip outbox: everything this peer says goes through one queue and one publishing task.

Why one task, in order: a vote must never overtake the list it votes for, and nothing queued before our
goodbye may arrive after it (a heartbeat for the goodbye's step arriving later reads as our return, and the
others would wait for us again). Callers never block: a full queue drops the message with a warning, as
the round protocol recovers lost gossip (statuses, re-announces).
"""

from __future__ import annotations

import logging
from typing import Protocol

import trio
from distro_node.protocol.codec import encode_message
from distro_node.protocol.errors import GossipError
from distro_node.protocol.messages import Message

logger = logging.getLogger(__name__)

OUTBOX_MESSAGES = 1024


class Publisher(Protocol):
    """What the outbox needs of the gossip channel."""

    async def publish(self, data: bytes) -> None: ...


class Outbox:
    def __init__(self, capacity: int = OUTBOX_MESSAGES) -> None:
        self._send, self._recv = trio.open_memory_channel[bytes](capacity)
        self._closed = False
        self._drained = trio.Event()  # set when the publisher has sent everything, goodbye included

    @property
    def closed(self) -> bool:
        """True once we said goodbye: nothing more may be queued after it."""
        return self._closed

    def publish(self, msg: Message) -> None:
        try:
            self._send.send_nowait(encode_message(msg))
        except trio.WouldBlock:
            logger.warning("gossip outbox full; dropped a %s", type(msg).__name__)
        except trio.ClosedResourceError:
            logger.debug("left the swarm; not publishing a %s", type(msg).__name__)

    async def run(self, gossip: Publisher) -> None:
        """Publish everything queued, in order, until :meth:`close` and the queue is empty."""
        async for data in self._recv:
            try:
                await gossip.publish(data)
            except GossipError as exc:
                logger.warning("gossip publish failed: %s", exc)
        self._drained.set()

    async def close(self, timeout: float) -> bool:
        """Accept nothing more and wait up to ``timeout`` seconds for what is queued to go out; returns
        whether it all went."""
        self._closed = True
        self._send.close()
        with trio.move_on_after(timeout):
            await self._drained.wait()
        return self._drained.is_set()

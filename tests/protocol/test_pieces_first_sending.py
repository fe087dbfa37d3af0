"""A first copy of a holder's own piece counts as on its way until its receiver acknowledged it, not only
until it was written (protocol/pieces_serve.py ``_until_received``, protocol/send_queue.py).

On loopback every write is acknowledged at once, so the holder here is a fault-injecting subclass whose
receivers acknowledge a first copy only when the test says: the second or two a slow uplink's socket and
queue hold a written piece.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing
from distro_node.protocol.pieces import piece_count
from distro_node.protocol.pieces_serve import PiecesServer
from distro_node.protocol.pieces_wire import Message, Status, read_have_reply
from distro_node.protocol.testing import WAIT
from libp2p.abc import INetStream
from pieces_support import CFG, PATIENT, SIZE, ask_piece, open_session, own_and_other, swarm

COUNT = piece_count(SIZE)
pytestmark = pytest.mark.network


class _SlowToAcknowledge(PiecesServer):
    """While ``holding``, a written first copy waits for ``acknowledged`` (set by the test)."""

    holding = False

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.acknowledged = trio.Event()
        self.waiting = trio.Event()

    async def _until_received(self, stream: INetStream) -> None:
        if self.holding:
            self.waiting.set()
            await self.acknowledged.wait()


def test_relays_and_repeats_wait_for_the_last_first_copy_to_be_received() -> None:
    async def body() -> None:
        async with swarm(3, kind=_SlowToAcknowledge, config=CFG) as ((a, b, c), (sa, _, _)):
            own_root, other_root = own_and_other(sa, 5)
            with trio.fail_after(WAIT):
                mine = await open_session(b, a, 5, own_root)
                relay = await open_session(c, a, 5, other_root)
                again = await open_session(c, a, 5, own_root)
                for i in range(COUNT - 1):
                    assert await ask_piece(mine, i) is Status.OK
                sa.holding = True
                assert await ask_piece(mine, COUNT - 1) is Status.OK  # written whole: every piece went out
                await sa.waiting.wait()
                assert await ask_piece(relay, 0) is Status.BUSY  # the last first copy is not there yet
                assert await ask_piece(again, 0) is Status.BUSY  # nor a repeat beside it
                sa.acknowledged.set()
                assert await ask_piece(relay, 0) is Status.OK
                assert sa.served_by_kind == {"own_first": COUNT, "own_repeat": 0, "relay": 1}

    trio.run(body)


def test_a_held_poll_is_answered_when_the_last_first_copy_is_received() -> None:
    """With a ``have_wait`` longer than the test, only the holder's wake-up answers the poll for the other
    payload: after the last own first copy was acknowledged, not when it was written."""

    async def body() -> None:
        async with swarm(2, kind=_SlowToAcknowledge, config=PATIENT) as ((a, b), (sa, _)):
            own_root, other_root = own_and_other(sa, 5)
            events: list[object] = []
            with trio.fail_after(WAIT):
                mine = await open_session(b, a, 5, own_root)
                relay = await open_session(b, a, 5, other_root)
                for i in range(COUNT - 1):
                    assert await ask_piece(mine, i) is Status.OK
                sa.holding = True

                async def poll() -> None:
                    await relay.write(Message.have(COUNT, ()).encode())
                    reply = await read_have_reply(relay, "holder", COUNT)
                    events.append(None if reply is None else reply[1])

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(poll)
                    assert await ask_piece(mine, COUNT - 1) is Status.OK
                    await sa.waiting.wait()
                    await trio.testing.wait_all_tasks_blocked(cushion=0.1)  # room for a wrong early answer
                    events.append("acknowledged")
                    sa.acknowledged.set()
            assert events == ["acknowledged", set(range(COUNT))]

    trio.run(body)

"""What a holder's HAVE answer tells of, on real loopback hosts: only pieces it would serve now.

While its own payload has pieces nobody holds, a holder refuses to relay another payload (swarm_pick.py
``relay_waits``). Telling fetchers of those pieces only had them ask and be refused, a message each way, on
the uplink its own first copies were waiting for (protocol/pieces_serve.py ``_offered``).
"""

from __future__ import annotations

import pytest
import trio
from distro_node.protocol.pieces import piece_count
from distro_node.protocol.pieces_wire import Message, Status, read_have_reply
from distro_node.protocol.testing import WAIT
from libp2p.abc import INetStream
from pieces_support import CFG, PATIENT, SIZE, ask_piece, open_session, own_and_other, swarm

COUNT = piece_count(SIZE)


async def _have_reply(stream: INetStream) -> tuple[Status, set[int]]:
    """The answer as the fetcher reads it (pieces_wire.read_have_reply), with its status."""
    reply = await read_have_reply(stream, "holder", COUNT)
    return (Status.NOT_FOUND, set()) if reply is None else (Status.OK, reply[1])


@pytest.mark.network
def test_a_relay_is_not_offered_while_own_first_copies_are_left() -> None:
    """With a short ``have_wait`` the poll is answered "nothing" although the holder has the whole other
    payload; it offers nothing until its own pieces have all gone out once."""

    async def body() -> None:
        async with swarm(2, config=CFG) as ((a, b), (sa, _)):
            own_root, other_root = own_and_other(sa, 5)
            with trio.fail_after(WAIT):
                mine = await open_session(b, a, 5, own_root)
                relay = await open_session(b, a, 5, other_root)
                assert await ask_piece(mine, 0) is Status.OK  # from here on ours has pieces nobody holds
                await relay.write(Message.have(COUNT, ()).encode())
                assert await _have_reply(relay) == (Status.NOT_FOUND, set())
                assert sa.bad_requests == 0

    trio.run(body)


@pytest.mark.network
def test_a_held_poll_is_answered_when_the_last_own_first_copy_starts() -> None:
    """With a ``have_wait`` longer than the test, only the holder's wake-up can answer the poll: it comes
    after the last own piece was asked for, never before, and tells of every piece of the other payload."""

    async def body() -> None:
        async with swarm(2, config=PATIENT) as ((a, b), (sa, _)):
            own_root, other_root = own_and_other(sa, 5)
            events: list[object] = []
            with trio.fail_after(WAIT):
                mine = await open_session(b, a, 5, own_root)
                relay = await open_session(b, a, 5, other_root)
                assert await ask_piece(mine, 0) is Status.OK

                async def poll() -> None:
                    await relay.write(Message.have(COUNT, ()).encode())
                    events.append(await _have_reply(relay))

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(poll)
                    for i in range(1, COUNT):
                        if i == COUNT - 1:
                            events.append("last own piece asked")
                        assert await ask_piece(mine, i) is Status.OK
            assert events == ["last own piece asked", (Status.OK, set(range(COUNT)))]

    trio.run(body)

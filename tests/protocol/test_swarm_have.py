"""HAVE in /distro/pieces/1.2.0: a holder answers a poll with news the fetcher can use, and a fetcher polls
only a holder it has nothing to ask. Why: answered at every piece a holder gained, polls were most of a
swarm's messages, and on 2 shared cores the piece swarm was CPU-bound (bench/swarm_cpu.py)."""

from __future__ import annotations

import os
from typing import Any

import pytest
import trio
import trio.testing
from distro_node.protocol.errors import BadRequestError
from distro_node.protocol.pieces import piece_count
from distro_node.protocol.pieces_serve import PiecesServer
from distro_node.protocol.pieces_wire import (
    HAVE_HEADER,
    MAX_PIECES,
    U32,
    Kind,
    Message,
    PiecesConfig,
    Status,
    decode_bitfield,
    read_message,
)
from distro_node.protocol.store import PayloadStore
from distro_node.protocol.testing import WAIT, connect_all_to, start_hosts
from distro_node.protocol.wire import BufferedReader
from pieces_support import PATIENT, RUN, SIZE, exactly, fetch, open_session, put_pieces, server_of, swarm

COUNT = piece_count(SIZE)
LONG_POLL = PiecesConfig(piece_timeout=WAIT, fetch_timeout=WAIT, have_wait=WAIT)  # only news ends a poll


class _Chunks:
    """A stream that hands out ``data`` in the given chunk sizes, as a muxer hands out frames."""

    def __init__(self, data: bytes, sizes: list[int]) -> None:
        self.data, self.sizes, self.reads = data, sizes, 0

    async def read(self, n: int | None = None) -> bytes:
        self.reads += 1
        size = min(self.sizes.pop(0) if self.sizes else len(self.data), n or len(self.data))
        part, self.data = self.data[:size], self.data[size:]
        return part


def test_a_have_names_the_fetchers_pieces_and_reads_back_whole() -> None:
    message = Message.have(20, {0, 7, 8, 19})
    raw = message.encode()
    assert raw == bytes([Kind.HAVE]) + U32.pack(20) + bytes([0x81, 0x80, 0x10])
    assert [i for i in range(24) if message.holds(i)] == [0, 7, 8, 19]
    frame = _Chunks(raw + Message(Kind.PIECE, choices=(3,)).encode(), [1 << 16])
    reader = BufferedReader(frame)
    assert trio.run(read_message, reader) == message
    assert trio.run(read_message, reader) == Message(Kind.PIECE, choices=(3,))
    assert frame.reads == 1  # both messages came out of the one frame


def test_a_have_of_the_largest_count_is_kept_as_its_bitfield() -> None:
    raw = bytes([Kind.HAVE]) + U32.pack(MAX_PIECES) + b"\xff" * (MAX_PIECES // 8)
    message = trio.run(read_message, BufferedReader(_Chunks(raw, [])))
    assert message.count == MAX_PIECES and len(message.bitfield) == MAX_PIECES // 8
    assert message.holds(MAX_PIECES - 1) and not message.holds(MAX_PIECES)


@pytest.mark.parametrize("raw, why", [
    (bytes([Kind.HAVE]) + U32.pack(MAX_PIECES + 1), "piece count"),
    (bytes([Kind.HAVE]) + U32.pack(20) + b"\xff", "truncated"),
])
def test_an_oversized_or_cut_have_is_a_bad_request(raw: bytes, why: str) -> None:
    with pytest.raises(BadRequestError, match=why):
        trio.run(read_message, BufferedReader(_Chunks(raw, [3, 1, 1])))
    with pytest.raises(BadRequestError):
        Message.have(4, {4})
    with pytest.raises(BadRequestError):
        Message(Kind.HAVE, count=9, bitfield=b"\xff")  # 9 pieces need 2 bytes


async def _have(stream: Any, count: int, holding: set[int]) -> set[int]:
    await stream.write(Message.have(count, holding).encode())
    assert await exactly(stream, 1) == bytes([Status.OK])
    _, listed = HAVE_HEADER.unpack(await exactly(stream, HAVE_HEADER.size))
    return decode_bitfield(listed, await exactly(stream, (listed + 7) // 8))


@pytest.mark.network
def test_a_poll_is_answered_at_a_piece_the_fetcher_lacks_not_at_one_it_holds() -> None:
    async def body() -> None:
        async with swarm(2, config=LONG_POLL) as ((holder, me), (server, _)):
            data = os.urandom(SIZE)
            root = PayloadStore(RUN).put(1, data)
            put_pieces(server, 1, root, data, [0, 1])
            with trio.fail_after(WAIT):
                stream = await open_session(me, holder, 1, root)
                assert await _have(stream, COUNT, set()) == {0, 1}  # news at once
                answer: list[set[int]] = []

                async def poll() -> None:
                    answer.append(await _have(stream, COUNT, {0, 1, 2}))

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(poll)
                    await trio.testing.wait_all_tasks_blocked()  # the poll is held at the holder
                    put_pieces(server, 1, root, data, [2])  # one the fetcher holds: no answer
                    await trio.testing.wait_all_tasks_blocked()
                    assert answer == []
                    put_pieces(server, 1, root, data, [3])
            assert answer == [{0, 1, 2, 3}]

    trio.run(body)


@pytest.mark.network
def test_a_have_for_another_piece_count_is_refused() -> None:
    async def body() -> None:
        async with swarm(2) as ((holder, me), (server, _)):
            data = os.urandom(SIZE)
            root = server.store.put(1, data)
            with trio.fail_after(WAIT):
                stream = await open_session(me, holder, 1, root)
                await stream.write(Message.have(COUNT + 1, ()).encode())
                assert await exactly(stream, 1) == bytes([Status.BAD_REQUEST])
            assert server.bad_requests == 1

    trio.run(body)


class _CountsPolls(PiecesServer):
    polls = 0

    async def _have(self, *args: Any) -> Any:
        self.polls += 1
        return await super()._have(*args)


@pytest.mark.network
def test_a_fetcher_polls_a_holder_only_when_it_has_nothing_to_ask_there() -> None:
    """Its one holder has all pieces but the last: asked once what it has, then for each piece without a
    poll between (every piece came with a poll before 1.2.0), then polled once for the last."""

    async def body() -> None:
        async with swarm(2, _CountsPolls, LONG_POLL) as ((holder, me), (server, mine)):
            data = os.urandom(SIZE)
            root = PayloadStore(RUN).put(1, data)
            put_pieces(server, 1, root, data, range(COUNT - 1))
            got: list[bytes] = []

            async def fetcher() -> None:
                got.append(await fetch(me, mine, 1, root, SIZE, [holder], []))

            with trio.fail_after(WAIT):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(fetcher)
                    while len(getattr(mine.partials.get(1, root), "have", ())) < COUNT - 1:
                        await mine.partials.wait_changed()
                    put_pieces(server, 1, root, data, [COUNT - 1])
            assert got == [data]
            assert server.pieces_served == COUNT
            assert server.polls <= 3, f"{server.polls} polls for {COUNT} pieces"

    trio.run(body)



class _Gated(PiecesServer):
    """An origin that holds every piece request until the test opens ``gate``."""

    async def _piece(self, stream: Any, key: tuple[int, bytes], choices: tuple[int, ...]) -> bool:
        self.asked.set()
        await self.gate.wait()
        return await super()._piece(stream, key, choices)

    asked: trio.Event
    gate: trio.Event


class _RecordsAnswers(PiecesServer):
    """A relay that keeps each have-map it answered a poll with."""

    answers: list[set[int]]
    news: trio.Event

    async def _have(self, *args: Any) -> Any:
        status, body = await super()._have(*args)
        if status is Status.OK:
            self.answers.append(decode_bitfield(COUNT, body[HAVE_HEADER.size:]))
            self.news.set()
        return status, body


@pytest.mark.network
def test_a_poll_sent_while_the_origin_is_asked_hears_of_the_pieces_asked_there() -> None:
    """A request names up to 16 candidates and its reply one of them. A poll that counted the candidates as
    spoken for was never answered while the request was out: with fewer pieces than that, a fetcher's
    poll to another fetcher stayed silent for the whole ``have_wait`` and every copy came from the origin."""

    async def body() -> None:
        async with start_hosts(3) as (origin_host, relay_host, me):
            origin = server_of(_Gated, origin_host, PATIENT)
            relay = server_of(_RecordsAnswers, relay_host, PATIENT)
            mine = server_of(PiecesServer, me, PATIENT)
            origin.asked, origin.gate = trio.Event(), trio.Event()
            relay.answers, relay.news = [], trio.Event()
            for s in (origin, relay, mine):
                s.install()
            data = os.urandom(SIZE)
            root = origin.store.put(1, data)
            put_pieces(relay, 1, root, data, [])
            got: list[bytes] = []

            async def fetcher() -> None:
                got.append(await fetch(me, mine, 1, root, SIZE, [relay_host], [origin_host], config=PATIENT))

            with trio.fail_after(WAIT):
                await connect_all_to([origin_host, relay_host, me], me)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(fetcher)
                    await origin.asked.wait()  # every missing piece is a candidate there from now on
                    for piece in (3, 5):  # the first may answer a poll sent before that request
                        relay.news = trio.Event()
                        put_pieces(relay, 1, root, data, [piece])
                        with trio.fail_after(WAIT / 3):
                            await relay.news.wait()
                        assert piece in relay.answers[-1]
                    origin.gate.set()
            assert got == [data]

    trio.run(body)

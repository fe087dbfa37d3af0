"""Real loopback hosts serving the piece protocol, and raw session helpers, for the piece tests."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import TypeVar

import trio
from distro_node.protocol.host import P2PHost
from distro_node.protocol.partials import PartialPayloads
from distro_node.protocol.pieces import PIECE_BYTES, piece_hashes, piece_span
from distro_node.protocol.pieces_serve import PiecesServer
from distro_node.protocol.pieces_wire import (
    PIECE_HEADER,
    PIECES_PROTOCOL,
    U16,
    Kind,
    Message,
    PiecesConfig,
    SessionOpen,
    Status,
)
from distro_node.protocol.store import PayloadStore
from distro_node.protocol.swarm_fetch import fetch_swarm
from distro_node.protocol.swarm_request import FetchStats, SwarmRequest
from distro_node.protocol.swarm_schedule import ScheduleConfig
from distro_node.protocol.testing import WAIT, connect_all_to, start_hosts
from libp2p.abc import INetStream

RUN = bytes.fromhex("ab" * 32)
SIZE = 10 * PIECE_BYTES + 123
CFG = PiecesConfig(piece_timeout=WAIT, fetch_timeout=WAIT, have_wait=0.5)
# For tests that hold a request or a poll open until they choose: only news or the fetcher's next message
# ends a poll, and a request held at a gate is never cancelled as overdue within the test's bound.
PATIENT = PiecesConfig(piece_timeout=WAIT, fetch_timeout=WAIT, have_wait=WAIT,
                       schedule=ScheduleConfig(overdue_floor=WAIT))


S = TypeVar("S", bound=PiecesServer)


def server_of(kind: type[S], host: P2PHost, config: PiecesConfig = CFG) -> S:
    """A server of ``kind`` (a fault-injecting subclass or the real one) with its own store and partials."""
    return kind(host, PayloadStore(RUN), PartialPayloads(), config)


def put_pieces(server: PiecesServer, step: int, root: bytes, data: bytes, indices: Iterable[int]) -> None:
    """Pieces ``indices`` of ``data`` into ``server``'s partial copy of it (opened on first use), as if they
    had just been fetched and verified."""
    part = server.partials.get(step, root) or server.partials.open(step, root, len(data), piece_hashes(data))
    for i in indices:
        start, length = piece_span(len(data), i)
        part.put(i, data[start : start + length])
    server.partials.notify()


def own_and_other(server: PiecesServer, step: int) -> tuple[bytes, bytes]:
    """Roots of two whole payloads of SIZE put in ``server``'s store: its own (marked so), and another
    peer's that it may relay."""
    own_root = server.store.put(step, os.urandom(SIZE))
    other_root = server.store.put(step, os.urandom(SIZE))
    server.mark_own(step, own_root)
    return own_root, other_root


@asynccontextmanager
async def swarm(count: int, kind: type[S] = PiecesServer,  # type: ignore[assignment]
                config: PiecesConfig = CFG) -> AsyncIterator[tuple[list[P2PHost], list[S]]]:
    async with start_hosts(count) as hosts:
        servers = [server_of(kind, h, config) for h in hosts]
        for s in servers:
            s.install()
        with trio.fail_after(WAIT):
            await connect_all_to(hosts, hosts[0])
        yield hosts, servers


async def fetch(host: P2PHost, server: PiecesServer, step: int, root: bytes, size: int | None,
                holders: list[P2PHost], complete: list[P2PHost], stats: FetchStats | None = None,
                config: PiecesConfig = CFG) -> bytes:
    return await fetch_swarm(host, SwarmRequest(RUN, step, root, size), [h.peer_id for h in holders],
                             store=server.store, partials=server.partials,
                             complete=[h.peer_id for h in complete], config=config, stats=stats)


async def exactly(stream: INetStream, n: int) -> bytes:
    out = b""
    for _ in range(n + 1):  # bounded: every read returns at least a byte or raises
        if len(out) == n:
            break
        out += await stream.read(n - len(out))
    return out


async def ask_piece(stream: INetStream, index: int) -> Status:
    """One PIECE request on an open session; a piece sent is read to its end."""
    return (await ask_piece_told(stream, index))[0]


async def ask_piece_told(stream: INetStream, index: int) -> tuple[Status, int | None]:
    """As _ask_piece, with the milliseconds a BUSY reply says to wait (None for other replies)."""
    await stream.write(Message(Kind.PIECE, choices=(index,)).encode())
    status = Status((await exactly(stream, 1))[0])
    if status is Status.OK:
        _, length = PIECE_HEADER.unpack(await exactly(stream, PIECE_HEADER.size))
        assert len(await exactly(stream, length)) == length
    if status is Status.BUSY:
        return status, U16.unpack(await exactly(stream, U16.size))[0]
    return status, None




async def open_session(host: P2PHost, holder: P2PHost, step: int, root: bytes) -> INetStream:
    """A raw pieces session from ``host`` to ``holder`` for one payload, its OK read."""
    stream = await host.open_stream(holder.peer_id, PIECES_PROTOCOL)
    await stream.write(SessionOpen(RUN, step, root).encode())
    if await exactly(stream, 1) != bytes([Status.OK]):
        raise RuntimeError("the holder refused the session")
    return stream

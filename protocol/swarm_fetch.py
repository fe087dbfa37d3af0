"""Fetching one payload in pieces from every holder at once: the trio side of protocol/swarm_schedule.py.

The scheduler decides; this module talks. Per holder a watcher long-polls its have-map (HAVE), and each
scheduler request becomes one PIECE exchange on its own stream. The piece-hash list comes first, from any
holder, and is checked against the root the caller got from the signed announcement; every piece is then
checked against it on arrival and kept in ``partials`` at once, so this peer serves it to the others while
it is still fetching the rest. A holder whose bytes do not verify, or who sends a piece it was not asked for,
is dropped for the rest of the fetch and named in the error.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import trio
from libp2p.abc import INetStream
from libp2p.peer.id import ID

from .errors import (
    FetchFailedError,
    HashMismatchError,
    MalformedReplyError,
    PayloadNotFoundError,
    PayloadTooLargeError,
    RemoteBusyError,
    StoreError,
    TransferError,
    TransportError,
)
from .host import P2PHost
from .partials import PartialPayload, PartialPayloads
from .pieces import PIECE_HASH_BYTES, piece_count, piece_hash, piece_span, root_of
from .pieces_wire import (
    HASHES_HEADER,
    HAVE_HEADER,
    PIECE_HEADER,
    PIECES_PROTOCOL,
    U32,
    Kind,
    PiecesConfig,
    PiecesRequest,
    Status,
    decode_bitfield,
    split_hashes,
)
from .rpc import client_stream
from .store import PayloadStore
from .swarm_schedule import ALL, Failure, PieceScheduler, Request
from .wire import read_exactly

logger = logging.getLogger(__name__)

ConnClass = Callable[[ID], int]


def all_direct(_: ID) -> int:
    """The default connection class: every holder is a direct connection (class 0)."""
    return 0


@dataclass
class FetchStats:
    """What one fetch moved: bytes read off piece streams (a cancelled partial piece included), and bytes
    per holder. ``downloaded / size`` is the fetch amplification."""

    downloaded: int = 0
    by_holder: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class SwarmRequest:
    run_id: bytes
    step: int
    root: bytes
    size: int | None  # from the announcement; None when only a list names the payload (the root binds it)

    def ask(self, kind: Kind, *, known: int = 0, choices: tuple[int, ...] = ()) -> bytes:
        return PiecesRequest(kind, self.run_id, self.step, self.root, known=known, choices=choices).encode()


async def fetch_swarm(host: P2PHost, request: SwarmRequest, holders: Sequence[ID], *, store: PayloadStore,
                      partials: PartialPayloads, complete: Sequence[ID] = (),
                      config: PiecesConfig | None = None, conn_class: ConnClass = all_direct,
                      stats: FetchStats | None = None) -> bytes:
    """The payload, from ``store`` or fetched from ``holders`` (``complete`` ones are known to hold all of
    it, e.g. its author) and kept in ``store``. Raises FetchFailedError naming each holder's error."""
    cfg = config or PiecesConfig()
    cached = store.get(request.step, request.root)
    if cached is not None:
        return cached
    if request.size is not None and not 0 <= request.size <= cfg.max_payload_bytes:
        raise PayloadTooLargeError(f"announced size {request.size} is outside 0..{cfg.max_payload_bytes}")
    order = list(dict.fromkeys(h for h in [*complete, *holders] if h != host.peer_id))
    errors: list[tuple[str, TransportError]] = []
    data = None
    with trio.move_on_after(cfg.fetch_timeout):
        listed = await _piece_list(host, request, order, cfg, errors)
        if listed is not None:
            run = _Fetch(host, request, listed[0], cfg, partials, conn_class, stats or FetchStats(), errors)
            part = partials.get(request.step, request.root) or partials.open(request.step, request.root,
                                                                             *listed)
            data = await run.run(part, order, set(complete))
    if data is None:
        partials.close(request.step, request.root)
        raise FetchFailedError(request.root, errors)
    try:
        store.put_verified(request.step, request.root, data)
    except StoreError as exc:
        logger.debug("fetched payload not kept for serving: %s", exc)
    finally:
        partials.close(request.step, request.root)
    return data


async def _piece_list(host: P2PHost, request: SwarmRequest, order: list[ID], cfg: PiecesConfig,
                      errors: list[tuple[str, TransportError]]) -> tuple[int, list[bytes]] | None:
    """(size, piece hashes) from the first holder whose list hashes to the root, tried in ``order``."""
    for h in order:
        peer = str(h)
        try:
            async with client_stream(host, h, PIECES_PROTOCOL, timeout=cfg.piece_timeout,
                                     what="piece-hash list") as stream:
                await stream.write(request.ask(Kind.HASHES))
                await _expect_ok(stream, peer)
                size, count = HASHES_HEADER.unpack(await read_exactly(stream, HASHES_HEADER.size))
                if not 0 <= size <= cfg.max_payload_bytes:
                    raise PayloadTooLargeError(f"list for {size} bytes, cap is {cfg.max_payload_bytes}", peer)
                if request.size is not None and size != request.size:
                    raise MalformedReplyError(f"list for {size} bytes, announced {request.size}", peer)
                if count != piece_count(size):
                    raise MalformedReplyError(f"{count} piece hashes for {size} bytes", peer)
                raw = await read_exactly(stream, count * PIECE_HASH_BYTES)
            hashes = split_hashes(raw, count)
            if root_of(size, hashes) != request.root:
                raise HashMismatchError("piece-hash list does not match the root", peer)
        except TransportError as exc:
            logger.debug("piece list of %s from %s: %r", request.root.hex()[:16], peer, exc)
            errors.append((peer, exc))
            continue
        return size, hashes
    return None


async def _expect_ok(stream: INetStream, peer: str) -> None:
    (status,) = await read_exactly(stream, 1)
    if status != Status.OK:
        raise _status_error(status, peer)


class _Fetch:
    def __init__(self, host: P2PHost, request: SwarmRequest, size: int, cfg: PiecesConfig,
                 partials: PartialPayloads, conn_class: ConnClass, stats: FetchStats,
                 errors: list[tuple[str, TransportError]]) -> None:
        self.host, self.request, self.size, self.cfg, self.partials = host, request, size, cfg, partials
        self.conn_class, self.stats, self.errors = conn_class, stats, errors
        self.count = piece_count(size)
        self.sched = PieceScheduler(size, config=cfg.schedule,
                                    order_key=host.peer_id.to_bytes() + request.root)
        self.ids: dict[str, ID] = {}
        self.scopes: dict[int, trio.CancelScope] = {}
        self.losses: dict[str, int] = {}
        self.watching = 0
        self._wake = trio.Event()
        self.part: PartialPayload | None = None

    def poke(self) -> None:
        self._wake.set()

    async def run(self, part: PartialPayload, order: list[ID], complete: set[ID]) -> bytes | None:
        self.part = part
        self.ids = {str(h): h for h in order}
        for i in part.have:
            self.sched.have.add(i)
        async with trio.open_nursery() as nursery:
            for h in order:
                if h in complete:
                    self.sched.holder_has(str(h), ALL, conn_class=self.conn_class(h))
                else:
                    self.watching += 1
                    nursery.start_soon(self._watch, h)
            await self._drive(nursery)
            nursery.cancel_scope.cancel()
        return part.assemble() if part.complete() else None

    async def _drive(self, nursery: trio.Nursery) -> None:
        while not self.sched.complete:
            now = trio.current_time()
            for rid in self.sched.overdue(now):
                scope = self.scopes.pop(rid, None)
                if scope is not None:
                    scope.cancel()
                self.sched.request_failed(rid, now, Failure.LOST)
            for req in self.sched.next_requests(now):
                scope = trio.CancelScope()
                self.scopes[req.id] = scope
                nursery.start_soon(self._piece, req, scope)
            if self.sched.stuck() and self.watching == 0:
                return
            self._wake = trio.Event()
            with trio.move_on_after(self.cfg.schedule.backoff):
                await self._wake.wait()

    def _failed(self, peer: str, exc: TransportError) -> None:
        logger.debug("swarm fetch of %s: %s failed: %r", self.request.root.hex()[:16], peer, exc)
        self.errors.append((peer, exc))

    async def _exchange(self, h: ID, body: bytes, read: Callable[[INetStream, str], Awaitable[bytes]],
                        timeout: float | None = None) -> bytes:
        peer = str(h)
        async with client_stream(self.host, h, PIECES_PROTOCOL, timeout=timeout or self.cfg.piece_timeout,
                                 what="pieces request") as stream:
            await stream.write(body)
            await _expect_ok(stream, peer)
            result: bytes = await read(stream, peer)
            return result

    async def _watch(self, h: ID) -> None:
        """Long-poll the holder's have-map until it has everything or fails."""
        peer, known = str(h), 0
        try:
            while known < self.count:
                try:
                    raw = await self._exchange(h, self.request.ask(Kind.HAVE, known=known), self._read_have,
                                               timeout=self.cfg.have_wait + self.cfg.piece_timeout)
                except PayloadNotFoundError:
                    continue  # it waited have_wait and has nothing yet: ask again
                except TransportError as exc:
                    self._failed(peer, exc)
                    self._drop(peer)
                    return
                uploads = int.from_bytes(raw[:2], "big")
                have = decode_bitfield(self.count, raw[2:])
                known = len(have)
                self.sched.holder_has(peer, have, conn_class=self.conn_class(h), uploads=uploads)
                self.poke()
        finally:
            self.watching -= 1
            self.poke()

    async def _read_have(self, stream: INetStream, peer: str) -> bytes:
        uploads, count = HAVE_HEADER.unpack(await read_exactly(stream, HAVE_HEADER.size))
        if count != self.count:
            raise MalformedReplyError(f"have-map of {count} pieces for a payload of {self.count}", peer)
        return U32.pack(uploads)[2:] + await read_exactly(stream, (count + 7) // 8)

    def _drop(self, peer: str) -> None:
        for rid in self.sched.holder_failed(peer):
            scope = self.scopes.pop(rid, None)
            if scope is not None:
                scope.cancel()
        self.poke()

    async def _piece(self, req: Request, scope: trio.CancelScope) -> None:
        peer = req.holder
        h = self.ids[peer]
        with scope:
            try:
                await self._exchange(h, self.request.ask(Kind.PIECE, choices=req.candidates),
                                     lambda stream, p: self._read_piece(stream, p, req))
            except (HashMismatchError, MalformedReplyError, PayloadNotFoundError) as exc:
                self._failed(peer, exc)
                self.sched.request_failed(req.id, trio.current_time(), Failure.LYING
                                          if not isinstance(exc, PayloadNotFoundError) else Failure.GONE)
                self._drop(peer)
            except RemoteBusyError:
                self.sched.request_failed(req.id, trio.current_time(), Failure.BUSY)
            except TransportError as exc:
                self.losses[peer] = self.losses.get(peer, 0) + 1
                self.sched.request_failed(req.id, trio.current_time(), Failure.LOST)
                if self.losses[peer] >= self.cfg.max_losses:
                    self._failed(peer, exc)
                    self._drop(peer)
        self.scopes.pop(req.id, None)
        self.poke()

    async def _read_piece(self, stream: INetStream, peer: str, req: Request) -> bytes:
        index, length = PIECE_HEADER.unpack(await read_exactly(stream, PIECE_HEADER.size))
        if not self.sched.piece_started(req.id, index, trio.current_time()):
            raise MalformedReplyError(f"sent piece {index}, not one of {list(req.candidates)}", peer)
        want = piece_span(self.size, index)[1]
        if length != want:
            raise MalformedReplyError(f"piece {index} of {length} bytes, expected {want}", peer)
        data = await read_exactly(stream, length)
        self.stats.downloaded += len(data)
        self.stats.by_holder[peer] = self.stats.by_holder.get(peer, 0) + len(data)
        part = self.part
        if part is None or piece_hash(data) != part.hashes[index]:
            raise HashMismatchError(f"piece {index} does not match its hash", peer)
        part.put(index, data)
        self.sched.piece_done(req.id, trio.current_time())
        self.partials.notify()
        return data


def _status_error(status: int, peer: str) -> TransferError:
    if status == Status.NOT_FOUND:
        return PayloadNotFoundError("holder does not have the payload or piece", peer)
    if status == Status.BUSY:
        return RemoteBusyError("holder is at its upload limit", peer)
    if status == Status.BAD_REQUEST:
        return MalformedReplyError("holder rejected our request as malformed", peer)
    return MalformedReplyError(f"unknown status byte {status}", peer)

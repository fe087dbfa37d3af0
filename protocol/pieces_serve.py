"""Serving ``/distro/pieces/1.0.0``: every piece this peer holds, of whole payloads and of partial ones.

A peer serves a piece the moment it has verified it, so the pieces a slow origin sent once fan out from the
fetchers that got them. Which piece to send, when a request offers several, is the holder's choice: the one
it has started uploading least (protocol/swarm_schedule.py ``pick_to_serve``), which is what lets an origin
send each piece about once. Hostile requests cost little: the request is parsed field by field under a
timeout, uploads and held-open HAVE requests are capped, and a stalled reader is reset.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable

import trio
from libp2p.abc import INetStream

from .errors import BadRequestError
from .host import P2PHost
from .partials import PartialPayloads
from .pieces import piece_count, piece_hashes, piece_span
from .pieces_wire import (
    HAVE_HEADER,
    PIECE_HEADER,
    PIECES_PROTOCOL,
    Kind,
    PiecesConfig,
    PiecesRequest,
    Status,
    encode_bitfield,
    hashes_body,
    read_request,
)
from .store import PayloadStore
from .swarm_schedule import Decline, pick_to_serve
from .wire import reply_within, reset_quietly

logger = logging.getLogger(__name__)

_KEPT_LISTS = 64  # piece-hash lists of whole payloads, computed on first request


class PiecesServer:
    def __init__(self, host: P2PHost, store: PayloadStore, partials: PartialPayloads,
                 config: PiecesConfig | None = None, *,
                 on_upload: Callable[[int], None] | None = None) -> None:
        self.host = host
        self.store = store
        self.partials = partials
        self.config = config or PiecesConfig()
        self._on_upload = on_upload
        self.uploads_in_progress = 0
        self._waiters = 0
        self._lists: OrderedDict[tuple[int, bytes], list[bytes]] = OrderedDict()
        self._started: OrderedDict[tuple[int, bytes], dict[int, int]] = OrderedDict()
        self.uploaded_bytes = 0
        self.pieces_served = 0
        self.bad_requests = 0
        self.busy = 0
        self.last_request_at: float | None = None  # trio time of the last well-formed request (leaving.py)

    def install(self) -> None:
        self.host.set_handler(PIECES_PROTOCOL, self._handle)

    async def _handle(self, stream: INetStream) -> None:
        try:
            with trio.fail_after(self.config.request_timeout):
                request = await read_request(stream)
        except BadRequestError as exc:
            self.bad_requests += 1
            logger.debug("bad pieces request from %s: %s", stream.muxed_conn.peer_id, exc)
            await self._status(stream, Status.BAD_REQUEST)
            return
        except trio.TooSlowError:
            self.bad_requests += 1
            await reset_quietly(stream)
            return
        self.last_request_at = trio.current_time()
        if request.run_id != self.store.run_id:
            await self._status(stream, Status.NOT_FOUND)
        elif request.kind == Kind.HAVE:
            await self._have(stream, request)
        elif request.kind == Kind.HASHES:
            await self._hashes(stream, request)
        else:
            await self._piece(stream, request)

    # --- what we hold ------------------------------------------------------------------------------------

    def _held(self, step: int, root: bytes) -> tuple[int, set[int], list[bytes]] | None:
        """(size, pieces held, piece hashes) of a payload we hold wholly or in part."""
        whole = self.store.get(step, root)
        if whole is not None:
            key = (step, root)
            hashes = self._lists.get(key)
            if hashes is None:
                hashes = self._lists[key] = piece_hashes(whole)
                while len(self._lists) > _KEPT_LISTS:
                    self._lists.popitem(last=False)
            return len(whole), set(range(piece_count(len(whole)))), hashes
        part = self.partials.get(step, root)
        if part is not None:
            return part.size, part.have, part.hashes
        return None

    def _piece_bytes(self, step: int, root: bytes, index: int) -> bytes | None:
        whole = self.store.get(step, root)
        if whole is not None:
            start, length = piece_span(len(whole), index)
            return whole[start : start + length]
        part = self.partials.get(step, root)
        return None if part is None else part.piece(index)

    # --- the three requests -------------------------------------------------------------------------------

    async def _have(self, stream: INetStream, request: PiecesRequest) -> None:
        held = self._held(request.step, request.root)
        if (held is None or len(held[1]) <= request.known) and self._waiters < self.config.max_have_waiters:
            self._waiters += 1
            try:
                with trio.move_on_after(self.config.have_wait):
                    while held is None or len(held[1]) <= request.known:
                        await self.partials.wait_changed()
                        held = self._held(request.step, request.root)
            finally:
                self._waiters -= 1
        if held is None:
            await self._status(stream, Status.NOT_FOUND)
            return
        size, have, _ = held
        count = piece_count(size)
        body = HAVE_HEADER.pack(min(self.uploads_in_progress, 0xFFFF), count) + encode_bitfield(count, have)
        await reply_within(stream, self.config.serve_timeout, bytes([Status.OK]), body)

    async def _hashes(self, stream: INetStream, request: PiecesRequest) -> None:
        held = self._held(request.step, request.root)
        if held is None:
            await self._status(stream, Status.NOT_FOUND)
            return
        body = hashes_body(held[0], held[2])
        await reply_within(stream, self.config.serve_timeout, bytes([Status.OK]), body)

    async def _piece(self, stream: INetStream, request: PiecesRequest) -> None:
        key = (request.step, request.root)
        held = self._held(*key)
        started = self._started.setdefault(key, {})
        while len(self._started) > _KEPT_LISTS:
            self._started.popitem(last=False)
        got = Decline.NOT_HELD if held is None else pick_to_serve(
            request.choices, held[1], started, uploading=self.uploads_in_progress,
            slots=self.config.upload_slots)
        if got is Decline.BUSY:
            self.busy += 1
            await self._status(stream, Status.BUSY)
            return
        data = None if isinstance(got, Decline) else self._piece_bytes(*key, got)
        if isinstance(got, Decline) or data is None:
            await self._status(stream, Status.NOT_FOUND)
            return
        started[got] = started.get(got, 0) + 1
        self.uploads_in_progress += 1
        try:
            if await reply_within(stream, self.config.serve_timeout,
                                  bytes([Status.OK]) + PIECE_HEADER.pack(got, len(data)), data):
                self.pieces_served += 1
                self.uploaded_bytes += len(data)
                if self._on_upload is not None:
                    self._on_upload(len(data))
        finally:
            self.uploads_in_progress -= 1

    async def _status(self, stream: INetStream, status: Status) -> None:
        await reply_within(stream, self.config.request_timeout, bytes([status]))

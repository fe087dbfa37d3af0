"""Serving ``/distro/pieces/1.2.0``: every piece this peer holds, of whole payloads and of partial ones.

A peer serves a piece the moment it has verified it, so the pieces a slow origin sent once fan out from the
fetchers that got them. Which piece to send, when a request offers several, is the holder's choice: the one
it has started uploading least (protocol/swarm_pick.py ``pick_to_serve``), which is what lets an origin
send each piece about once. Hostile requests cost little: the request is parsed field by field under a
timeout, sessions and uploads are capped, an idle session is closed, and a stalled reader is reset. A
request refused as BUSY is told when to come back (protocol/swarm_turns.py ``Waitlist``).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from functools import partial

import trio
from libp2p.abc import INetStream
from libp2p.network.stream.exceptions import StreamEOF

from .errors import BadRequestError
from .host import P2PHost
from .partials import PartialPayloads
from .pieces import PIECE_BYTES, piece_count, piece_hashes, piece_span
from .pieces_wire import (
    HAVE_HEADER,
    PIECE_HEADER,
    PIECES_PROTOCOL,
    U16,
    Kind,
    Message,
    PiecesConfig,
    Status,
    encode_bitfield,
    hashes_body,
    read_message,
    read_open,
)
from .swarm_first_copies import FirstCopies, PeerRates
from .swarm_pick import Decline, own_first_copies_left, pick_to_serve
from .swarm_turns import Waitlist
from .transfer import ServedPayloads
from .wire import BufferedReader, ShortReadError, read_opening, reply_within, reset_quietly

logger = logging.getLogger(__name__)

_KEPT_LISTS = 64  # piece-hash lists of whole payloads, computed on first request
_KEPT_OWN = 4  # own payloads whose first copies take precedence (a step's, and an overlapped next one)


class PiecesServer:
    def __init__(self, host: P2PHost, store: ServedPayloads, partials: PartialPayloads,
                 config: PiecesConfig | None = None, *,
                 on_upload: Callable[[int], None] | None = None, rates: PeerRates | None = None) -> None:
        """``rates``: the rates this peer's fetches measured (swarm_first_copies.py), shared with them;
        without it the first-copy rule finds nobody fast and stands aside."""
        self.host = host
        self.store = store
        self.partials = partials
        self.config = config or PiecesConfig()
        self.rates = rates or PeerRates()
        self.first_copies = FirstCopies(self.config.first_copy_factor, self.config.first_copy_window)
        self._on_upload = on_upload
        self.uploads_in_progress = 0
        self._slot_freed = trio.lowlevel.ParkingLot()  # requests held for a free upload slot
        self.waitlist = Waitlist(self.config.upload_slots, PIECE_BYTES / self.config.schedule.prior_rate)
        self._uploads = 0  # ids of uploads, for the waitlist's timing
        self._sessions = 0
        self._lists: OrderedDict[tuple[int, bytes], list[bytes]] = OrderedDict()
        self._started: OrderedDict[tuple[int, bytes], dict[int, int]] = OrderedDict()
        self._own: OrderedDict[tuple[int, bytes], None] = OrderedDict()  # our own payloads, newest last
        self.uploaded_bytes = 0
        self.pieces_served = 0
        # Pieces served whole, by kind: what a slow uplink carries beyond its own payload is repeats and
        # relays (bench/exchange.py reports these per peer).
        self.served_by_kind = {"own_first": 0, "own_repeat": 0, "relay": 0}
        self.bad_requests = 0
        self.busy = 0
        self.uploads_cut = 0  # pieces begun and not finished: the bytes sent were for nothing
        self.last_request_at: float | None = None  # trio time of the last well-formed request (leaving.py)

    def install(self) -> None:
        self.host.set_handler(PIECES_PROTOCOL, self._handle)

    def own_upload_rate(self) -> float:
        """Our uplink as our uploads measured it (bytes/s; before any, the schedule's prior)."""
        return self.waitlist.upload_rate(PIECE_BYTES)

    def peer_uplinks(self) -> list[float]:
        """Our peers' uplinks as our fetches measured them: a piece's rate times the slots it shared."""
        return [rate * self.config.upload_slots for rate in self.rates.values()]

    def mark_own(self, step: int, root: bytes) -> None:
        """A payload we authored: while pieces of it that somebody asked for were never sent, requests
        for other payloads' pieces are answered BUSY (``pick_to_serve``'s ``relay_waits``)."""
        self._own[(step, root)] = None
        while len(self._own) > _KEPT_OWN:
            self._own.popitem(last=False)

    def _relay_waits(self, key: tuple[int, bytes]) -> bool:
        return key not in self._own and self._own_first_copies_left()

    def _own_first_copies_left(self) -> bool:
        for own in self._own:
            whole = self.store.get(*own)  # our own payloads are whole; only the piece count is needed
            if whole is not None and own_first_copies_left(self._started.get(own), piece_count(len(whole))):
                return True
        return False

    async def _handle(self, stream: INetStream) -> None:
        reader = BufferedReader(stream)  # every read of this session goes through it
        opening = await read_opening(stream, partial(read_open, reader), self.config.request_timeout,
                                     partial(self._status, stream, Status.BAD_REQUEST), "pieces session")
        if opening is None:
            self.bad_requests += 1
            return
        self.last_request_at = trio.current_time()
        if opening.run_id != self.store.run_id:
            await self._status(stream, Status.NOT_FOUND)
            return
        if self._sessions >= self.config.max_sessions:
            self.busy += 1
            await self._status(stream, Status.BUSY)
            return
        self._sessions += 1
        try:
            await self._session(stream, reader, (opening.step, opening.root))
        finally:
            self._sessions -= 1

    async def _session(self, stream: INetStream, reader: BufferedReader, key: tuple[int, bytes]) -> None:
        """Answer the fetcher's messages in turn until it closes the stream, idles, or used up its count.

        Messages are read by a task of their own, so a HAVE held open for news ends as soon as the next
        message arrives (a fetcher sends its piece request without waiting for the poll's answer)."""
        if not await reply_within(stream, self.config.request_timeout, bytes([Status.OK]), close=False):
            return
        send, receive = trio.open_memory_channel[Message](1)
        read = [0]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._read_messages, stream, reader, send, read)
            handled = 0
            async for message in receive:
                handled += 1
                self.last_request_at = trio.current_time()
                if message.op == Kind.PIECE:
                    if not await self._piece(stream, key, message.choices):
                        break
                    continue
                if message.op == Kind.HAVE:
                    status, body = await self._have(key, message, partial(_more, read, handled))
                else:
                    held = self._held(*key)
                    status, body = (Status.NOT_FOUND, b"") if held is None else (
                        Status.OK, hashes_body(held[0], held[2]))
                timeout = self.config.serve_timeout
                if not await reply_within(stream, timeout, bytes([status]), body, close=False):
                    break
            nursery.cancel_scope.cancel()

    async def _read_messages(self, stream: INetStream, reader: BufferedReader,
                             send: trio.MemorySendChannel[Message], read: list[int]) -> None:
        async with send:
            for _ in range(self.config.max_session_messages):
                try:
                    with trio.fail_after(self.config.session_idle):
                        message = await read_message(reader)
                except (ShortReadError, StreamEOF):
                    return  # the fetcher is done with us
                except (BadRequestError, trio.TooSlowError) as exc:
                    self.bad_requests += 1
                    logger.debug("pieces session from %s ended: %r", stream.muxed_conn.peer_id, exc)
                    await reset_quietly(stream)
                    return
                read[0] += 1
                self.partials.notify()  # wakes a HAVE of this session held open (and, harmlessly, others)
                await send.send(message)
            await reset_quietly(stream)

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

    async def _have(self, key: tuple[int, bytes], message: Message, next_message: Callable[[], bool]
                    ) -> tuple[Status, bytes]:
        """Our have-map once we hold a piece the fetcher neither holds nor asked for, or what we hold after
        ``have_wait`` or when the fetcher's next message arrives."""
        held = self._held(*key)
        offered = self._offered(key, held)
        with trio.move_on_after(self.config.have_wait):
            while all(message.holds(i) for i in offered) and not next_message():
                await self.partials.wait_changed()
                held = self._held(*key)
                offered = self._offered(key, held)
        if held is not None and message.count != piece_count(held[0]):
            self.bad_requests += 1
            return Status.BAD_REQUEST, b""
        if held is None or not offered:
            return Status.NOT_FOUND, b""
        count = piece_count(held[0])
        return Status.OK, HAVE_HEADER.pack(min(self.uploads_in_progress, 0xFFFF), count) + encode_bitfield(
            count, offered)

    def _offered(self, key: tuple[int, bytes], held: tuple[int, set[int], list[bytes]] | None) -> set[int]:
        """The pieces of a payload (``held``: ``_held``'s answer for it) a HAVE tells of: those we hold, or
        none while ``_relay_waits`` (they would be refused as BUSY). Told of them, fetchers asked and were
        refused again and again: on a slow testbed uplink (mixed 8, bench/exchange.py) the answers and
        refusals were a few hundred small frames a round on the line its own first copies were waiting
        for. The poll is answered once relays are served again (``_piece`` wakes it), or after
        ``have_wait`` with nothing."""
        if held is None or self._relay_waits(key):
            return set()
        return held[1]

    async def _piece(self, stream: INetStream, key: tuple[int, bytes], choices: tuple[int, ...]) -> bool:
        """Answer a PIECE message; False when the stream is no longer usable."""
        held = self._held(*key)
        started = self._started.setdefault(key, {})
        while len(self._started) > _KEPT_LISTS:
            self._started.popitem(last=False)
        fetcher = str(stream.muxed_conn.peer_id)
        if key in self._own:
            self.first_copies.asked(fetcher, trio.current_time())
        got: int | Decline = Decline.NOT_HELD
        if held is not None:
            got, may_wait = self._choose(key, choices, held[1], started, fetcher)
            if got is Decline.BUSY and may_wait:
                got = await self._wait_for_slot(key, choices, held[1], started, fetcher)
        data = None if isinstance(got, Decline) else self._piece_bytes(*key, got)
        now = trio.current_time()
        if isinstance(got, Decline) or data is None:
            if got is not Decline.BUSY:
                return await reply_within(stream, self.config.request_timeout, bytes([Status.NOT_FOUND]),
                                          close=False)
            self.busy += 1
            wait_ms = min(round(self.waitlist.turn(fetcher, now) * 1000), 0xFFFF)
            return await reply_within(stream, self.config.request_timeout,
                                      bytes([Status.BUSY]) + U16.pack(wait_ms), close=False)
        self.waitlist.served(fetcher)
        relays_wait = key in self._own and self._own_first_copies_left()
        kind = "relay" if key not in self._own else "own_repeat" if started.get(got) else "own_first"
        started[got] = started.get(got, 0) + 1
        if relays_wait and not self._own_first_copies_left():
            self.partials.notify()  # the HAVE polls held while relays waited (``_offered``) answer now
        self.uploads_in_progress += 1
        self._uploads += 1
        upload = self._uploads
        self.waitlist.started(upload, now)
        ok = False
        try:
            ok = await reply_within(stream, self.config.serve_timeout,
                                    bytes([Status.OK]) + PIECE_HEADER.pack(got, len(data)), data, close=False)
            if ok:
                self.pieces_served += 1
                self.served_by_kind[kind] += 1
                self.uploaded_bytes += len(data)
                if self._on_upload is not None:
                    self._on_upload(len(data))
            return ok
        finally:
            self.uploads_in_progress -= 1
            ended = trio.current_time()
            self.waitlist.finished(upload, ended, complete=ok)
            if not ok:
                self.uploads_cut += 1
            if key in self._own:
                self.first_copies.asked(fetcher, ended)
                if ok:
                    own_rate = self.own_upload_rate()
                    self.first_copies.delivered(key, got, fetcher, ended, own_rate, self.rates)
            self._slot_freed.unpark_all()

    def _choose(self, key: tuple[int, bytes], choices: tuple[int, ...], have: set[int],
                started: dict[int, int], fetcher: str) -> tuple[int | Decline, bool]:
        """The piece to send ``fetcher`` (``pick_to_serve``, then the first-copy rule for our own payload),
        and whether a BUSY may wait for a free slot: not when what keeps it is the rule or our own first
        copies (a free slot would not change that)."""
        relay_waits = self._relay_waits(key)
        got = pick_to_serve(choices, have, started, uploading=self.uploads_in_progress,
                            slots=self.config.upload_slots, relay_waits=relay_waits)
        if key in self._own and self.first_copies.keeps(key, got, started, fetcher, trio.current_time(),
                                                        self.own_upload_rate(), self.rates):
            return Decline.BUSY, False
        return got, not relay_waits

    async def _wait_for_slot(self, key: tuple[int, bytes], choices: tuple[int, ...], have: set[int],
                             started: dict[int, int], fetcher: str) -> int | Decline:
        """Hold a request refused for a full uplink until an upload ends, when one should end soon
        (``Waitlist.hold_for``): the slot goes to it with no round trip between, where a refusal left it
        idle until some fetcher's turn came (and was a message each way)."""
        got: int | Decline = Decline.BUSY
        hold = self.waitlist.hold_for(trio.current_time(), self.config.slot_wait)
        if hold <= 0:
            return got
        with trio.move_on_after(hold):
            may_wait = True
            while got is Decline.BUSY and may_wait:
                await self._slot_freed.park()
                got, may_wait = self._choose(key, choices, have, started, fetcher)
        return got

    async def _status(self, stream: INetStream, status: Status) -> None:
        await reply_within(stream, self.config.request_timeout, bytes([status]))


def _more(read: list[int], handled: int) -> bool:
    """Whether the session's reader took in a message after the one being handled."""
    return read[0] > handled

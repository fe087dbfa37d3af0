"""What a swarm fetch says to one holder over its piece session (protocol/pieces_wire.py): opening it, the
piece-hash list, HAVE long polls and piece requests, each reply checked as it arrives. The fetch's driver
and its retries per holder are protocol/swarm_fetch.py, which mixes this in.
"""

from __future__ import annotations

import trio

from .errors import HashMismatchError, MalformedReplyError, PayloadNotFoundError, TransportError
from .host import P2PHost
from .partials import PartialPayload, PartialPayloads
from .pieces import piece_count, piece_matches, piece_span
from .pieces_wire import (
    PIECES_PROTOCOL,
    Kind,
    Message,
    PiecesConfig,
    SessionOpen,
    expect_ok,
    read_hash_list,
    read_have_reply,
    read_piece_header,
)
from .rpc import client_stream
from .swarm_first_copies import PeerRates
from .swarm_lanes import Lane, Lost
from .swarm_request import ConnClass, FetchStats, SwarmRequest
from .swarm_schedule import ALL, Failure, PieceScheduler, Request
from .wire import BufferedStream, read_exactly


class HolderTalk:
    """The session side of a fetch; the state it reads is the fetch's (set in ``_Fetch.__init__``)."""

    host: P2PHost
    request: SwarmRequest
    cfg: PiecesConfig
    partials: PartialPayloads
    conn_class: ConnClass
    stats: FetchStats
    rates: PeerRates | None
    errors: list[tuple[str, TransportError]]
    lanes: dict[str, Lane]
    sched: PieceScheduler | None
    part: PartialPayload | None
    size: int
    count: int
    _by_root: bool
    _listing: trio.Lock
    _listed: trio.Event
    _changed: trio.Event

    def _known_rate(self, peer: str) -> float | None:
        """What earlier fetches measured from ``peer``: a new fetch starts that holder from it, not from the
        1 MB/s prior, so a slow holder's first request here is neither ranked first nor cancelled at the
        prior's limit while its reply still waits in its uplink's queue (the piece it had begun, wasted)."""
        return None if self.rates is None else self.rates.known(peer)

    def poke(self) -> None:
        self._changed.set()

    async def _converse(self, lane: Lane) -> None:
        peer, complete = str(lane.holder), lane.complete
        if not complete:
            await self._listing_settled()
        opening = SessionOpen(self.request.run_id, self.request.step, self.request.root)
        async with client_stream(self.host, lane.holder, PIECES_PROTOCOL, timeout=self.cfg.fetch_timeout,
                                 what="pieces session") as raw:
            stream = BufferedStream(raw)
            await stream.write(opening.encode())
            await expect_ok(stream, peer)
            while self.sched is None:  # a partial holder is here only once no complete one could list
                if not await self._list(stream, peer):
                    if complete:
                        raise PayloadNotFoundError("a source does not hold the payload", peer)
                    await trio.sleep(self.cfg.have_wait)  # it has nothing yet
            if complete:
                self.sched.holder_has(peer, ALL, conn_class=self.conn_class(lane.holder),
                                      rate=self._known_rate(peer))
                self.poke()
            while not self.sched.complete:
                req, lane.pending = lane.pending, None
                if req is not None:
                    lane.current = req
                    await self._piece(stream, peer, lane, req)
                    lane.current = None
                elif complete or lane.known >= self.count:
                    lane.work = trio.Event()
                    await lane.work.wait()
                elif self.sched.offers(peer):
                    # Nothing new it could tell us is needed before we ask it: a poll answered at each of
                    # its new pieces was most of a swarm's messages (bench/swarm_cpu.py). The driver wakes
                    # the lane when it has a request for it, or when it no longer offers anything.
                    lane.work, lane.quiet = trio.Event(), True
                    await lane.work.wait()
                    lane.quiet = False
                else:
                    await self._have(stream, peer, lane)
                    if lane.current is not None:  # a request went out during the poll; its reply follows
                        await self._piece(stream, peer, lane, lane.current, sent=True)
                        lane.current = None

    async def _listing_settled(self) -> None:
        """Until the piece-hash list is in, or no complete holder is left to give it: a partial holder's
        session opens only then. At a step's start partial holders have nothing yet, and their sessions
        (stream and protocol set-up, five frames each way, 42 a peer at 8 peers) were most of the burst of
        small frames that filled a slow origin's uplink for the first seconds, its answers to the complete
        sessions queued behind them while its first copies waited (bench/exchange.py --capture-uplink)."""
        while self.sched is None and not all(x.over for x in self.lanes.values() if x.complete):
            with trio.move_on_after(self.cfg.have_wait):
                await self._listed.wait()

    async def _list(self, stream: BufferedStream, peer: str) -> bool:
        """Ask this holder for the piece-hash list unless another session already got it; False when it
        does not have it."""
        async with self._listing:
            if self.sched is not None:
                return True
            if self.request.size is not None and piece_count(self.request.size) == 1:
                self._start(self.request.size, [b""], register=False)  # one piece: checked against the root
                return True
            await stream.write(Message(Kind.HASHES).encode())
            listed = await read_hash_list(stream, peer, cap=self.cfg.max_payload_bytes,
                                          announced=self.request.size, root=self.request.root)
            if listed is None:
                return False
            size, hashes = listed
            self._start(size, hashes, register=True)
            return True

    def _start(self, size: int, hashes: list[bytes], *, register: bool) -> None:
        self.size, self.count = size, piece_count(size)
        step, root = self.request.step, self.request.root
        self.part = (self.partials.acquire(step, root, size, hashes) if register
                     else PartialPayload(size, hashes))
        self.sched = PieceScheduler(size, have=self.part.have, config=self.cfg.schedule,
                                    order_key=self.host.peer_id.to_bytes() + root)
        self._by_root = not register
        self._listed.set()

    async def _have(self, stream: BufferedStream, peer: str, lane: Lane) -> None:
        """A HAVE long poll; a piece request assigned meanwhile goes out at once (the holder then ends the
        poll) and becomes the lane's current request, its reply following the poll's."""
        # The wake-up exists before the write yields: a request assigned while the HAVE was being written
        # set the previous event and then waited out the whole poll (up to ``have_wait``).
        lane.work = trio.Event()
        sched = self.sched
        holding = set() if sched is None else sched.no_news_from(peer)
        await stream.write(Message.have(self.count, holding).encode())

        async def send_assigned() -> None:
            if lane.pending is None:
                await lane.work.wait()
            req, lane.pending = lane.pending, None
            if req is not None:
                # Current from here on, so that a failed poll reply fails this request too: held only in a
                # local, it stayed in flight in the schedule with no session to finish or cancel it, and
                # its piece was never asked of anyone else (a fetch stalled one piece short).
                lane.current = req
                with trio.CancelScope(shield=True):  # never half a message on the stream
                    await stream.write(Message(Kind.PIECE, choices=req.candidates).encode())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send_assigned)
            await self._have_reply(stream, peer, lane)
            nursery.cancel_scope.cancel()

    async def _have_reply(self, stream: BufferedStream, peer: str, lane: Lane) -> None:
        with trio.fail_after(self.cfg.have_wait + self.cfg.piece_timeout):
            reply = await read_have_reply(stream, peer, self.count)
        if reply is None:
            return  # nothing yet; ask again
        uploads, have = reply
        lane.known = len(have)
        if self.sched is not None:
            self.sched.holder_has(peer, have, conn_class=self.conn_class(lane.holder), uploads=uploads,
                                  rate=self._known_rate(peer))
        self.poke()

    async def _piece(self, stream: BufferedStream, peer: str, lane: Lane, req: Request, *,
                     sent: bool = False) -> None:
        sched, part = self.sched, self.part
        if sched is None or part is None:
            return
        lane.scope = trio.CancelScope()
        with lane.scope:
            if not sent:
                await stream.write(Message(Kind.PIECE, choices=req.candidates).encode())
            with trio.fail_after(self.cfg.piece_timeout):
                head = await read_piece_header(stream, peer)
                if isinstance(head, float):  # BUSY: rest there as long as it said
                    sched.request_failed(req.id, trio.current_time(), Failure.BUSY, retry_after=head)
                    self.poke()
                    return
                index, length = head
                if not sched.piece_started(req.id, index):
                    raise MalformedReplyError(f"sent piece {index}, not one of {list(req.candidates)}", peer)
                want = piece_span(self.size, index)[1]
                if length != want:
                    raise MalformedReplyError(f"piece {index} of {length} bytes, expected {want}", peer)
                data = await read_exactly(stream, length)
        if lane.scope.cancelled_caught:
            raise Lost()
        self.stats.downloaded += len(data)
        self.stats.by_holder[peer] = self.stats.by_holder.get(peer, 0) + len(data)
        hashes = None if self._by_root else part.hashes
        if not piece_matches(data, index, hashes, self.size, self.request.root):
            raise HashMismatchError(f"piece {index} does not match its hash", peer)
        part.put(index, data)
        rate = sched.piece_done(req.id, trio.current_time())
        if rate is not None and self.rates is not None:
            self.rates.observe(peer, rate)
        self.partials.notify()
        self.poke()

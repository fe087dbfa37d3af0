"""Wire format and settings of ``/distro/pieces/1.2.0``: a session per (fetcher, holder, payload).

Why sessions: opening a py-libp2p stream costs ~8 ms of CPU on each side (multistream-select, yamux), and
a stream per piece made a swarm fetch of one 1.45 MB payload by 3 peers cost 8x the CPU of a whole-payload
pull. One stream carries every request of one fetcher to one holder for one payload, strictly alternating:
  open    = version:u8 (=1) | run_id_len:u8 (1..64) | run_id | step:u64 | root:32   (the payload
            protocol's request layout: transfer.PayloadRequest)
  answer  = status:u8                      OK, or NOT_FOUND (another run), BUSY (too many sessions)
  then, repeated:
  message = op:u8, then
    HAVE    count:u32 | bitfield[ceil(count / 8)]   the pieces the fetcher holds or has asked for
                             (count <= MAX_PIECES); answered once the holder offers one outside it, or
                             after ``have_wait`` with what it offers (NOT_FOUND while that is nothing).
                             It offers what it holds, except while it refuses relays (pieces_serve.py
                             ``_offered``)
    HASHES  (nothing)        the size and piece-hash list, which the fetcher checks against the root
    PIECE   n:u8 (1..16) | n x index:u32     "any one of these": the holder picks (pick_to_serve)
  reply   = status:u8, then if OK:
    HAVE    uploads:u16 | count:u32 | bitfield[ceil(count / 8)]   (bit i: byte i // 8, high bit first)
    HASHES  size:u64 | count:u32 | count x 32 bytes   (the size is bound by the root: an inclusion list
                                                     names a payload by root alone)
    PIECE   index:u32 | length:u32 | body[length]
  and a PIECE refused as BUSY:
    PIECE   retry_after_ms:u16   when to ask this holder again (protocol/swarm_turns.py; 1.1.0 added it)

1.2.0 made HAVE name the fetcher's pieces, not their number: answered at each piece the holder gained,
news of pieces the fetcher already had was most of a swarm's messages (bench/swarm_cpu.py).

Lengths and counts are checked against what the fetcher already knows from the signed announcement (the
payload size gives the piece count and every piece's length) before any buffer exists.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import ClassVar

from libp2p.custom_types import TProtocol

from .errors import (
    BadRequestError,
    HashMismatchError,
    MalformedReplyError,
    PayloadTooLargeError,
    TransferError,
)
from .pieces import PIECE_HASH_BYTES, piece_count, root_of
from .swarm_schedule import ScheduleConfig
from .transfer import PayloadRequest, check_address, read_request, status_error
from .wire import ByteReader, ShortReadError, read_exactly

PIECES_PROTOCOL = TProtocol("/distro/pieces/1.2.0")
MAX_CHOICES = 16
MAX_PIECES = 1 << 16  # a HAVE's count (its bitfield is then at most 8 KiB): 8 GiB payloads at 128 KiB pieces
U8 = struct.Struct(">B")
U16 = struct.Struct(">H")
U32 = struct.Struct(">I")
PIECE_HEADER = struct.Struct(">II")
HAVE_HEADER = struct.Struct(">HI")


class Kind(IntEnum):  # a message's op
    HAVE = 1
    HASHES = 2
    PIECE = 3


class Status(IntEnum):
    OK = 0
    NOT_FOUND = 1
    BAD_REQUEST = 2
    BUSY = 3


@dataclass(frozen=True)
class PiecesConfig:
    # The per-payload memory bound, as TransferConfig's (the daemon passes one cap to both).
    max_payload_bytes: int = 16 * 1024 * 1024
    # One piece request, dial included. 128 KiB at 2 Mbit/s takes 0.5 s, shared by a few fetchers.
    piece_timeout: float = 20.0
    # How long a holder holds a HAVE message waiting for a new piece before it answers with what it has.
    have_wait: float = 2.0
    # The whole fetch of one payload.
    fetch_timeout: float = 60.0
    # How long the server waits for a session's opening bytes (slow-loris bound).
    request_timeout: float = 10.0
    # How long a session may sit without a message (the fetcher is busy with other holders meanwhile).
    session_idle: float = 60.0
    # Messages one session may carry (a payload has at most a few hundred pieces).
    max_session_messages: int = 4096
    # How long the server spends writing one reply before giving up on a stalled reader.
    serve_timeout: float = 60.0
    # Piece uploads at once, over every payload and fetcher; beyond it the answer is BUSY. Few, so each
    # piece leaves fast and its receiver can pass it on (the flow model in tests/protocol/
    # test_swarm_schedule.py: a slow origin took 6.4 s with 2 slots, 7.4 s with 4, 8.0 s with 8; bound 5.8 s).
    upload_slots: int = 2
    # A request that finds every slot taken waits at the holder when the first upload should end within
    # this many seconds (swarm_turns.Waitlist.hold_for), else it is answered BUSY at once. The flow model,
    # mean of 5 payload sizes, 4 and 8 peers: 0.25 s left mixed lines as without holding (8 peers: 2.00x
    # the bound) and home lines better (1.04 -> 1.02x); 1.0 s made mixed 8 2.45x (bench/flow.py run_one).
    slot_wait: float = 0.25
    # First copies of our own payload go only to fetchers that download from us at least this many times
    # our upload rate, while one of them asked within ``first_copy_window`` seconds
    # (swarm_first_copies.py; 0 turns it off). The flow model, mean of 5 payload sizes, the testbed's mixed
    # lines at 8 peers: 1.40x the bound -> 1.21x (testbed latency), 1.41x -> 1.20x (internet latency);
    # factor 3: 1.22x / 1.17x; home lines unchanged (bench/flow.py run_one).
    first_copy_factor: float = 2.0
    first_copy_window: float = 2.0
    # Sessions open at once, over every payload and fetcher; beyond it a new one is answered BUSY.
    max_sessions: int = 256
    # A holder that timed out or reset this many times is dropped for the rest of the fetch.
    max_losses: int = 3
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)

    # The fields in seconds: what :meth:`dilated` scales.
    DURATIONS: ClassVar[tuple[str, ...]] = ("piece_timeout", "have_wait", "fetch_timeout", "request_timeout",
                                            "session_idle", "serve_timeout", "slot_wait", "first_copy_window")

    def __post_init__(self) -> None:
        if min(self.max_payload_bytes, self.upload_slots, self.max_sessions, self.max_losses,
               self.max_session_messages) < 1:
            raise ValueError("PiecesConfig sizes and counts must be >= 1")
        if self.first_copy_factor < 0:
            raise ValueError("PiecesConfig.first_copy_factor must be >= 0 (0: off)")
        if self.schedule.choices > MAX_CHOICES:
            raise ValueError(f"PiecesConfig.schedule.choices must be <= {MAX_CHOICES} (the wire's cap)")
        for name in self.DURATIONS:
            if getattr(self, name) <= 0:
                raise ValueError(f"PiecesConfig.{name} must be > 0")

    def dilated(self, factor: float) -> PiecesConfig:
        """Every duration here and in ``schedule`` times ``factor``, its rates divided by it
        (:meth:`ScheduleConfig.dilated` says why)."""
        if not factor > 0:
            raise ValueError(f"PiecesConfig.dilated: factor must be > 0, got {factor}")
        return replace(self, schedule=self.schedule.dilated(factor),
                       **{n: getattr(self, n) * factor for n in self.DURATIONS})


@dataclass(frozen=True)
class SessionOpen:
    run_id: bytes
    step: int
    root: bytes

    def __post_init__(self) -> None:
        check_address(self.run_id, self.step, self.root, "root")

    def encode(self) -> bytes:
        return PayloadRequest(self.run_id, self.step, self.root).encode()


@dataclass(frozen=True)
class Message:
    op: Kind
    count: int = 0  # HAVE: the payload's pieces ...
    # ... and the bitfield of those the fetcher holds or asked for, kept as sent: a stranger's count of up
    # to MAX_PIECES never becomes a set of that many numbers (bits past ``count`` mean nothing).
    bitfield: bytes = b""
    choices: tuple[int, ...] = ()  # PIECE

    @classmethod
    def have(cls, count: int, holding: Iterable[int]) -> Message:
        pieces = list(holding)
        if any(not 0 <= i < count for i in pieces):
            raise BadRequestError(f"a held piece outside 0..{count - 1}")
        return cls(Kind.HAVE, count=count, bitfield=encode_bitfield(count, pieces))

    def __post_init__(self) -> None:
        if not 0 <= self.count <= MAX_PIECES:
            raise BadRequestError(f"piece count {self.count} outside 0..{MAX_PIECES}")
        if self.op == Kind.HAVE and len(self.bitfield) != (self.count + 7) // 8:
            raise BadRequestError(f"a bitfield of {len(self.bitfield)} bytes for {self.count} pieces")
        if self.op == Kind.PIECE and not 1 <= len(self.choices) <= MAX_CHOICES:
            raise BadRequestError(f"a piece request names 1..{MAX_CHOICES} pieces, got {len(self.choices)}")
        if any(not 0 <= i < 2**32 for i in self.choices):
            raise BadRequestError("piece index out of range")

    def encode(self) -> bytes:
        if self.op == Kind.HAVE:
            return bytes([self.op]) + U32.pack(self.count) + self.bitfield
        if self.op == Kind.PIECE:
            return bytes([self.op, len(self.choices)]) + b"".join(U32.pack(i) for i in self.choices)
        return bytes([self.op])

    def holds(self, piece: int) -> bool:
        """Whether a HAVE says the fetcher holds (or asked for) ``piece``."""
        return 0 <= piece < self.count and bool(self.bitfield[piece // 8] & (0x80 >> (piece % 8)))


async def read_open(stream: ByteReader) -> SessionOpen:
    """A session's opening has the payload protocol's request layout (transfer.read_request: parsed field
    by field, never more than 106 bytes, whatever the sender claims)."""
    request = await read_request(stream)
    return SessionOpen(request.run_id, request.step, request.payload_hash)


async def read_message(stream: ByteReader) -> Message:
    """The next message of a session (ShortReadError when the fetcher closed it)."""
    (op,) = await read_exactly(stream, 1)
    if op not in Kind._value2member_map_:
        raise BadRequestError(f"unknown op {op}")
    try:
        if op == Kind.HAVE:
            (count,) = U32.unpack(await read_exactly(stream, U32.size))
            if count > MAX_PIECES:
                raise BadRequestError(f"piece count {count} outside 0..{MAX_PIECES}")
            return Message(Kind.HAVE, count=count, bitfield=await read_exactly(stream, (count + 7) // 8))
        if op == Kind.PIECE:
            (n,) = await read_exactly(stream, 1)
            if not 1 <= n <= MAX_CHOICES:
                raise BadRequestError(f"a piece request names 1..{MAX_CHOICES} pieces, got {n}")
            raw = await read_exactly(stream, n * U32.size)
            return Message(Kind.PIECE, choices=tuple(U32.unpack_from(raw, k * U32.size)[0] for k in range(n)))
    except ShortReadError as exc:
        raise BadRequestError(f"truncated message: {exc}") from exc
    return Message(Kind.HASHES)


def encode_bitfield(count: int, have: Iterable[int]) -> bytes:
    out = bytearray((count + 7) // 8)
    for i in have:
        if 0 <= i < count:
            out[i // 8] |= 0x80 >> (i % 8)
    return bytes(out)


def decode_bitfield(count: int, raw: bytes) -> set[int]:
    """Indices set in ``raw``; bits past ``count`` are ignored (the length was checked by the caller)."""
    return {i for i in range(count) if raw[i // 8] & (0x80 >> (i % 8))}


HASHES_HEADER = struct.Struct(">QI")


def hashes_body(size: int, hashes: list[bytes]) -> bytes:
    return HASHES_HEADER.pack(size, len(hashes)) + b"".join(hashes)


def split_hashes(raw: bytes, count: int) -> list[bytes]:
    return [raw[k * PIECE_HASH_BYTES : (k + 1) * PIECE_HASH_BYTES] for k in range(count)]


def refusal(status: int, peer: str) -> TransferError:
    """The typed error of a reply status other than OK: the payload protocol's mapping, one for both."""
    return status_error(status, 0, peer, "payload or piece") or MalformedReplyError(
        f"status {status} where a refusal was expected", peer)


async def expect_ok(stream: ByteReader, peer: str) -> None:
    (status,) = await read_exactly(stream, 1)
    if status != Status.OK:
        raise refusal(status, peer)


async def _found(stream: ByteReader, peer: str) -> bool:
    """A reply's status: True for OK, False for NOT_FOUND (the holder has nothing yet), else its refusal."""
    (status,) = await read_exactly(stream, 1)
    if status == Status.NOT_FOUND:
        return False
    if status != Status.OK:
        raise refusal(status, peer)
    return True


async def read_hash_list(stream: ByteReader, peer: str, *, cap: int, announced: int | None,
                         root: bytes) -> tuple[int, list[bytes]] | None:
    """A HASHES reply: the payload size and its piece hashes, checked against the cap, the announced size
    and the root before the fetcher trusts any of it; None when the holder does not have the list."""
    if not await _found(stream, peer):
        return None
    size, count = HASHES_HEADER.unpack(await read_exactly(stream, HASHES_HEADER.size))
    if not 0 <= size <= cap:
        raise PayloadTooLargeError(f"list for {size} bytes, cap is {cap}", peer)
    if announced is not None and size != announced:
        raise MalformedReplyError(f"list for {size} bytes, announced {announced}", peer)
    if count != piece_count(size):
        raise MalformedReplyError(f"{count} piece hashes for {size} bytes", peer)
    hashes = split_hashes(await read_exactly(stream, count * PIECE_HASH_BYTES), count)
    if root_of(size, hashes) != root:
        raise HashMismatchError("piece-hash list does not match the root", peer)
    return size, hashes


async def read_have_reply(stream: ByteReader, peer: str, count: int) -> tuple[int, set[int]] | None:
    """A HAVE reply: the holder's uploads in progress and the pieces it holds; None when it holds nothing
    yet. A have-map for another piece count is malformed."""
    if not await _found(stream, peer):
        return None
    uploads, got = HAVE_HEADER.unpack(await read_exactly(stream, HAVE_HEADER.size))
    if got != count:
        raise MalformedReplyError(f"have-map of {got} pieces for a payload of {count}", peer)
    return uploads, decode_bitfield(count, await read_exactly(stream, (count + 7) // 8))


async def read_piece_header(stream: ByteReader, peer: str) -> tuple[int, int] | float:
    """The head of a PIECE reply: (index, length) of the piece that follows, or, from a BUSY holder, the
    seconds it said to wait before asking again."""
    (status,) = await read_exactly(stream, 1)
    if status == Status.BUSY:
        (wait_ms,) = U16.unpack(await read_exactly(stream, U16.size))
        return int(wait_ms) / 1000
    if status != Status.OK:
        raise refusal(status, peer)
    index, length = PIECE_HEADER.unpack(await read_exactly(stream, PIECE_HEADER.size))
    return int(index), int(length)

"""Gossip message bytes <-> typed round messages (:mod:`.messages`).

Gossip carries only the small signed messages of the round protocol (announcements, inclusion lists, votes,
statuses, heartbeats, goodbyes). The encoding is a msgpack array ``[CODEC_VERSION, message.to_dict()]``: the
dict's ``kind`` field is the type tag and :func:`.messages.message_from_dict` the strict door for its fields.

Peer bytes are unpacked with every msgpack cap set from the 32 KiB gossip limit (buffer, bin, str, array,
map), ``strict_map_key`` and an ``ext_hook`` that refuses extension types, and a fresh unpack per call (no
shared ``Unpacker`` that a failure could leave in a bad state). Every failure is a :class:`CodecError` with
a bounded ``reason``.

Authorship: libp2p's strict signing proves who *published* a message (``from_id``); :func:`check_author`
then requires that the peer the message speaks for (announcer, leader, voter) is that signer, so a peer can
never vote, propose or say goodbye in another peer's name. Payload authorship is signed apart from that
(protocol/authorship.py): every announcement, list entry and equivocation proof must carry its author's
signature, so a leader cannot put words in an honest peer's mouth.
"""

from __future__ import annotations

from typing import Any

import msgpack

from .claims import forged_part
from .gossip_config import MAX_ANNOUNCEMENT_BYTES
from .messages import (
    Announcement,
    Certificate,
    Goodbye,
    Heartbeat,
    InclusionList,
    Message,
    MessageError,
    Status,
    Vote,
    message_from_dict,
)

CODEC_VERSION = 3  # 2: payload authorship signatures; 3: signed prevotes/precommits, pol, certificates
# An inclusion list holds at most 1024 entries by type, but the 32 KiB gossip cap bounds any
# honest message far below that; the array cap is one more guard on top of the byte cap.
_MAX_ARRAY = 1100
_MAX_MAP = 16
_MAX_STR = 256
_MAX_BIN = 64

CODEC_ERROR_REASONS: tuple[str, ...] = (
    "too_large", "unpack", "envelope", "version", "message", "author", "signature",
)


class CodecError(ValueError):
    """Gossip bytes that are not a well-formed message of ours; ``reason`` is a metric-safe label.

    ``refused`` is the decoded message when only an authorship signature inside it failed: it is still
    signed by its publisher, so it is evidence against that publisher (a leader that forged list entries).
    """

    def __init__(self, reason: str, detail: str, refused: Message | None = None) -> None:
        if reason not in CODEC_ERROR_REASONS:
            raise ValueError(f"unknown codec error reason {reason!r}")
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.refused = refused


def _refuse_ext(code: int, data: bytes) -> Any:
    raise CodecError("unpack", f"msgpack extension type {code} is not allowed")


def encode_message(message: Message, limit: int = MAX_ANNOUNCEMENT_BYTES) -> bytes:
    """Our own message as gossip bytes; ValueError if it would exceed the gossip limit (a local bug)."""
    data: bytes = msgpack.packb([CODEC_VERSION, message.to_dict()], use_bin_type=True)
    if len(data) > limit:
        raise ValueError(f"{type(message).__name__} encodes to {len(data)} bytes, above the {limit}-byte cap")
    return data


def decode_message(data: bytes, limit: int = MAX_ANNOUNCEMENT_BYTES) -> Message:
    """Peer bytes -> a validated message; raises only :class:`CodecError`."""
    if not isinstance(data, bytes | bytearray):
        raise CodecError("unpack", f"expected bytes, got {type(data).__name__}")
    if len(data) > limit:
        raise CodecError("too_large", f"{len(data)} bytes, cap {limit}")
    try:
        obj = msgpack.unpackb(
            bytes(data),
            raw=False,
            use_list=True,
            strict_map_key=True,
            max_bin_len=_MAX_BIN,
            max_str_len=_MAX_STR,
            max_array_len=_MAX_ARRAY,
            max_map_len=_MAX_MAP,
            max_ext_len=0,
            ext_hook=_refuse_ext,
        )
    except CodecError:
        raise
    except Exception as exc:  # msgpack raises ValueError, ExtraData, FormatError, StackError, ...
        raise CodecError("unpack", f"{type(exc).__name__}: {exc}"[:200]) from None
    if not isinstance(obj, list) or len(obj) != 2:
        raise CodecError("envelope", "expected a [version, message] array")
    version, body = obj
    if type(version) is not int or version != CODEC_VERSION:
        raise CodecError("version", f"unsupported codec version {version!r}"[:80])
    try:
        return message_from_dict(body)
    except MessageError as exc:
        raise CodecError("message", str(exc)[:200]) from None
    except (TypeError, ValueError) as exc:  # e.g. an unhashable value where a key was expected
        raise CodecError("message", f"{type(exc).__name__}: {exc}"[:200]) from None


def author_of(message: Message) -> str | None:
    """The peer a message speaks for, which must be the peer that signed it; None for a certificate, which
    speaks for the quorum whose precommits it carries and may be relayed by anyone."""
    if isinstance(message, Certificate):
        return None
    if isinstance(message, Announcement | Heartbeat | Goodbye | Status):
        return message.peer_id
    if isinstance(message, InclusionList):
        return message.leader
    if isinstance(message, Vote):
        return message.voter
    raise CodecError("message", f"unknown message type {type(message).__name__}")


def check_author(message: Message, signer: str) -> None:
    """Raise :class:`CodecError` ("author") unless ``signer`` (libp2p ``from_id``) is the message's author."""
    author = author_of(message)
    if author is not None and author != signer:
        raise CodecError("author", f"{type(message).__name__} for {author[:60]!r} signed by {signer[:60]!r}")


def decode_signed(data: bytes, signer: str, run_id: bytes) -> Message:
    """Decode, bind to the signer and to our run, check every signed claim: the full check the gossip
    validator runs (in two parts, so it can refuse by kind before the signature checks)."""
    return check_signed(decode_message(data), signer, run_id)


def check_signed(message: Message, signer: str, run_id: bytes) -> Message:
    """Bind a decoded message to its signer and our run, and check every signed claim it makes."""
    check_author(message, signer)
    if message.run_id != run_id:
        raise CodecError("message", "message for another run")
    forged = forged_part(message)
    if forged is not None:
        raise CodecError("signature", f"{type(message).__name__}: {forged} is not signed by its author",
                         refused=message)
    return message

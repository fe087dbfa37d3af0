"""Typed protocol messages the round state machine consumes and emits.

These are plain values: serialization and signing belong to the transport, which turns them into dicts with
:meth:`to_dict` and back with ``from_dict``. Every field is checked when a message is built, so a value that
exists is always well formed; ``from_dict`` is the strict door for peer data (exact key set, exact types,
sizes), and every failure is a :class:`MessageError` whose ``reason`` is a bounded metric label.

Hashes and run ids are raw 32-byte sha256 digests (msgpack ``bin``), never hex strings: fixed size, half the
bytes, and nothing to normalise. Peer ids are the transport's authenticated peer id strings; the state machine
trusts the transport to have bound ``peer_id``/``leader`` to the message's signer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from .ballots import Certificate, Status, Vote
from .evidence import Equivocation
from .inclusion_list import InclusionList
from .message_fields import (
    HASH_BYTES,
    MAX_EPOCH,
    MAX_LIST_PEERS,
    MAX_PAYLOAD_BYTES,
    MAX_PEER_ID_CHARS,
    MAX_STEP,
    MESSAGE_ERROR_REASONS,
    RUN_ID_BYTES,
    SIGNATURE_BYTES,
    FlatMessage,
    MessageError,
    check_bytes,
    check_int,
    check_peer_id,
)

__all__ = [
    "HASH_BYTES",
    "MAX_EPOCH",
    "MAX_LIST_PEERS",
    "MAX_PAYLOAD_BYTES",
    "MAX_PEER_ID_CHARS",
    "MAX_STEP",
    "MESSAGE_ERROR_REASONS",
    "RUN_ID_BYTES",
    "Announcement",
    "Certificate",
    "Equivocation",
    "Goodbye",
    "Heartbeat",
    "InclusionList",
    "Message",
    "MessageError",
    "Status",
    "Vote",
    "check_peer_id",
    "message_from_dict",
]


@dataclass(frozen=True)
class Announcement(FlatMessage):
    """"I have a payload for ``step``": small enough for gossip; the bytes move on a stream.

    ``weights_hash`` is the sender's weights digest when it computed this step, so divergence between
    replicas shows up within one round. ``signature`` is the author's signature over (run, step, author,
    payload hash) (protocol/authorship.py): a leader copies it into its list, where it proves the entry.
    """

    KIND: ClassVar[str] = "announcement"
    FIELDS: ClassVar[tuple[str, ...]] = (
        "run_id", "step", "peer_id", "payload_hash", "payload_size", "weights_hash", "signature",
    )

    run_id: bytes
    step: int
    peer_id: str
    payload_hash: bytes
    payload_size: int
    weights_hash: bytes
    signature: bytes

    def __post_init__(self) -> None:
        check_bytes("run_id", self.run_id, RUN_ID_BYTES)
        check_int("step", self.step, 0, MAX_STEP)
        check_peer_id("peer_id", self.peer_id)
        check_bytes("payload_hash", self.payload_hash, HASH_BYTES)
        check_int("payload_size", self.payload_size, 1, MAX_PAYLOAD_BYTES)
        check_bytes("weights_hash", self.weights_hash, HASH_BYTES)
        check_bytes("signature", self.signature, SIGNATURE_BYTES)



@dataclass(frozen=True)
class Heartbeat(FlatMessage):
    """Liveness plus progress: ``step`` is the step the sender is working on (its next undecided step).

    Progress lets a peer that stalled (partition minority, missed lists) notice the majority moved on.
    """

    KIND: ClassVar[str] = "heartbeat"
    FIELDS: ClassVar[tuple[str, ...]] = ("run_id", "peer_id", "step", "weights_hash")

    run_id: bytes
    peer_id: str
    step: int
    weights_hash: bytes

    def __post_init__(self) -> None:
        check_bytes("run_id", self.run_id, RUN_ID_BYTES)
        check_peer_id("peer_id", self.peer_id)
        check_int("step", self.step, 0, MAX_STEP)
        check_bytes("weights_hash", self.weights_hash, HASH_BYTES)



@dataclass(frozen=True)
class Goodbye(FlatMessage):
    """Graceful leave: the sender takes no part in ``step`` or later, so nobody should wait for it.

    The step tells a late-delivered older announcement (goodbye stands) from a genuine rejoin (a message for
    ``step`` or later from the same peer cancels the goodbye).
    """

    KIND: ClassVar[str] = "goodbye"
    FIELDS: ClassVar[tuple[str, ...]] = ("run_id", "peer_id", "step")

    run_id: bytes
    peer_id: str
    step: int

    def __post_init__(self) -> None:
        check_bytes("run_id", self.run_id, RUN_ID_BYTES)
        check_peer_id("peer_id", self.peer_id)
        check_int("step", self.step, 0, MAX_STEP)



Message = Announcement | InclusionList | Vote | Status | Certificate | Heartbeat | Goodbye

_KINDS: dict[str, type[Message]] = {
    cls.KIND: cls for cls in (Announcement, InclusionList, Vote, Status, Certificate, Heartbeat, Goodbye)
}


def message_from_dict(data: Mapping[str, Any]) -> Message:
    """Decode any message by its ``kind`` field; raises :class:`MessageError` for anything malformed."""
    if not isinstance(data, Mapping):
        raise MessageError("type", f"message must be a mapping, got {type(data).__name__}")
    kind = data.get("kind")
    cls = _KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise MessageError("kind", f"unknown message kind {kind!r}"[:80])
    return cls.from_dict(data)

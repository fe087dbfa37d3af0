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

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from .evidence import Equivocation
from .message_fields import (
    HASH_BYTES,
    MAX_EPOCH,
    MAX_EVIDENCE,
    MAX_LIST_PEERS,
    MAX_PAYLOAD_BYTES,
    MAX_PEER_ID_CHARS,
    MAX_STEP,
    MESSAGE_ERROR_REASONS,
    RUN_ID_BYTES,
    SIGNATURE_BYTES,
    MessageError,
    check_bytes,
    check_int,
    check_keys,
    check_peer_id,
    check_seq,
    check_sorted_ids,
    id_bytes,
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
class Announcement:
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

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.KIND, **{f: getattr(self, f) for f in self.FIELDS}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Announcement:
        check_keys(cls.KIND, data, cls.FIELDS)
        return cls(**{f: data[f] for f in cls.FIELDS})


@dataclass(frozen=True)
class InclusionList:
    """A leader's proposal for one step: exactly these payloads are aggregated, by every honest peer.

    ``epoch`` and ``leader`` say who proposed it when (the designated leader of that epoch); they are not
    part of the decision: :meth:`digest` covers the content only, so a later epoch's leader re-proposing a
    list (as the agreement rule requires) proposes the very same value.

    Besides ``entries`` it carries the membership facts the leader observed, because membership is
    replicated state derived from applied lists (see ``membership.Roster``): ``warming`` names newcomers
    that announced but are still warming up, ``departed`` names roster peers that said goodbye. Putting them
    in the list makes every replica update its roster identically, which keeps leader ranks and quorums
    identical too.

    ``signatures[i]`` is the author's signature over ``entries[i]`` (protocol/authorship.py), checked at the
    gossip door, so a leader can only include payloads their authors signed. ``evidence`` carries proofs of
    equivocation (protocol/evidence.py): every replica that applies the list bans those authors.
    """

    KIND: ClassVar[str] = "inclusion_list"
    FIELDS: ClassVar[tuple[str, ...]] = (
        "run_id", "step", "epoch", "leader", "entries", "warming", "departed", "evidence",
    )

    run_id: bytes
    step: int
    epoch: int
    leader: str
    entries: tuple[tuple[str, bytes], ...]
    warming: tuple[str, ...] = ()
    departed: tuple[str, ...] = ()
    signatures: tuple[bytes, ...] = ()
    evidence: tuple[Equivocation, ...] = ()

    def __post_init__(self) -> None:
        check_bytes("run_id", self.run_id, RUN_ID_BYTES)
        check_int("step", self.step, 0, MAX_STEP)
        check_int("epoch", self.epoch, 0, MAX_EPOCH)
        check_peer_id("leader", self.leader)
        for name in ("entries", "warming", "departed", "signatures", "evidence"):
            if type(getattr(self, name)) is not tuple:
                raise MessageError("type", f"{name} must be a tuple")
            if len(getattr(self, name)) > MAX_LIST_PEERS:
                raise MessageError("size", f"{name} has more than {MAX_LIST_PEERS} peers")
        for i, entry in enumerate(self.entries):
            if type(entry) is not tuple or len(entry) != 2:
                raise MessageError("type", f"entries[{i}] must be a (peer_id, payload_hash) pair")
            check_peer_id(f"entries[{i}].peer_id", entry[0])
            check_bytes(f"entries[{i}].payload_hash", entry[1], HASH_BYTES)
        if len(self.signatures) != len(self.entries):
            raise MessageError("size", "every entry needs exactly one author signature")
        for i, signature in enumerate(self.signatures):
            check_bytes(f"entries[{i}].signature", signature, SIGNATURE_BYTES)
        if len(self.evidence) > MAX_EVIDENCE:
            raise MessageError("size", f"evidence has more than {MAX_EVIDENCE} proofs")
        if not all(isinstance(e, Equivocation) for e in self.evidence):
            raise MessageError("type", "evidence must hold Equivocation proofs")
        check_sorted_ids("evidence", tuple(e.peer for e in self.evidence))
        for name in ("warming", "departed"):
            for i, peer in enumerate(getattr(self, name)):
                check_peer_id(f"{name}[{i}]", peer)
        included = tuple(p for p, _ in self.entries)
        check_sorted_ids("entries", included)
        check_sorted_ids("warming", self.warming)
        check_sorted_ids("departed", self.departed)
        groups = (set(included), set(self.warming), set(self.departed))
        if groups[0] & groups[1] or groups[0] & groups[2] or groups[1] & groups[2]:
            raise MessageError("overlap", "a peer appears in more than one of entries, warming, departed")

    @property
    def peers(self) -> tuple[str, ...]:
        """Included peer ids, sorted: the order the optimizer aggregates in."""
        return tuple(p for p, _ in self.entries)

    def digest(self) -> bytes:
        """Identity of the decided value (not a signature): run, step, the three peer groups and the
        equivocators proven. Equal digests mean the same aggregation, roster update and bans on every
        replica. Entry signatures are proof, not content, so they are left out.
        """
        h = hashlib.sha256(b"distro-node/inclusion-list/v2\0")
        h.update(self.run_id)
        h.update(self.step.to_bytes(8, "big"))
        # Length-prefixed fields: no two different lists can produce the same byte stream.
        h.update(b"E" + len(self.entries).to_bytes(4, "big"))
        for peer, payload_hash in self.entries:
            h.update(id_bytes(peer) + payload_hash)
        for tag, group in ((b"W", self.warming), (b"D", self.departed)):
            h.update(tag + len(group).to_bytes(4, "big"))
            for peer in group:
                h.update(id_bytes(peer))
        h.update(b"X" + len(self.evidence).to_bytes(4, "big"))
        for proof in self.evidence:
            h.update(proof.digest_bytes())
        return h.digest()

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.KIND,
            "run_id": self.run_id,
            "step": self.step,
            "epoch": self.epoch,
            "leader": self.leader,
            "entries": [[p, h, sig] for (p, h), sig in zip(self.entries, self.signatures, strict=True)],
            "warming": list(self.warming),
            "departed": list(self.departed),
            "evidence": [proof.to_wire() for proof in self.evidence],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InclusionList:
        check_keys(cls.KIND, data, cls.FIELDS)
        raw_entries = check_seq("entries", data["entries"], MAX_LIST_PEERS)
        entries: list[tuple[Any, Any]] = []
        signatures: list[Any] = []
        for i, item in enumerate(raw_entries):
            triple = check_seq(f"entries[{i}]", item, 3)
            if len(triple) != 3:
                raise MessageError("type", f"entries[{i}] must be [peer_id, payload_hash, signature]")
            entries.append((triple[0], triple[1]))
            signatures.append(triple[2])
        raw_evidence = check_seq("evidence", data["evidence"], MAX_EVIDENCE)
        return cls(
            run_id=data["run_id"],
            step=data["step"],
            epoch=data["epoch"],
            leader=data["leader"],
            entries=tuple(entries),
            warming=check_seq("warming", data["warming"], MAX_LIST_PEERS),
            departed=check_seq("departed", data["departed"], MAX_LIST_PEERS),
            signatures=tuple(signatures),
            evidence=tuple(Equivocation.from_wire(e, f"evidence[{i}]") for i, e in enumerate(raw_evidence)),
        )


@dataclass(frozen=True)
class Heartbeat:
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

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.KIND, **{f: getattr(self, f) for f in self.FIELDS}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Heartbeat:
        check_keys(cls.KIND, data, cls.FIELDS)
        return cls(**{f: data[f] for f in cls.FIELDS})


@dataclass(frozen=True)
class Goodbye:
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

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.KIND, **{f: getattr(self, f) for f in self.FIELDS}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Goodbye:
        check_keys(cls.KIND, data, cls.FIELDS)
        return cls(**{f: data[f] for f in cls.FIELDS})


@dataclass(frozen=True)
class Vote:
    """``voter`` accepts the list with content ``digest`` proposed in ``epoch`` of ``step``.

    A list is decided once a strict majority of the active roster voted for it in one epoch; each peer votes
    at most once per epoch. That is what keeps a partition's minority from deciding anything.
    """

    KIND: ClassVar[str] = "vote"
    FIELDS: ClassVar[tuple[str, ...]] = ("run_id", "step", "epoch", "voter", "digest")

    run_id: bytes
    step: int
    epoch: int
    voter: str
    digest: bytes

    def __post_init__(self) -> None:
        check_bytes("run_id", self.run_id, RUN_ID_BYTES)
        check_int("step", self.step, 0, MAX_STEP)
        check_int("epoch", self.epoch, 0, MAX_EPOCH)
        check_peer_id("voter", self.voter)
        check_bytes("digest", self.digest, HASH_BYTES)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.KIND, **{f: getattr(self, f) for f in self.FIELDS}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Vote:
        check_keys(cls.KIND, data, cls.FIELDS)
        return cls(**{f: data[f] for f in cls.FIELDS})


@dataclass(frozen=True)
class Status:
    """``peer_id`` entered ``epoch`` of ``step`` (so it will not vote in an earlier epoch) and reports its
    latest vote (``voted_epoch`` -1 and ``voted_digest`` None if it has not voted).

    The leader of an epoch after the first must re-propose the most recently voted list among a majority
    of statuses: that is how a list that may already be decided somewhere survives a leader change.
    """

    KIND: ClassVar[str] = "status"
    FIELDS: ClassVar[tuple[str, ...]] = ("run_id", "step", "epoch", "peer_id", "voted_epoch", "voted_digest")

    run_id: bytes
    step: int
    epoch: int
    peer_id: str
    voted_epoch: int
    voted_digest: bytes | None

    def __post_init__(self) -> None:
        check_bytes("run_id", self.run_id, RUN_ID_BYTES)
        check_int("step", self.step, 0, MAX_STEP)
        check_int("epoch", self.epoch, 1, MAX_EPOCH)
        check_peer_id("peer_id", self.peer_id)
        check_int("voted_epoch", self.voted_epoch, -1, self.epoch - 1)
        if self.voted_epoch < 0:
            if self.voted_digest is not None:
                raise MessageError("overlap", "voted_digest must be None when voted_epoch is -1")
        else:
            check_bytes("voted_digest", self.voted_digest, HASH_BYTES)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.KIND, **{f: getattr(self, f) for f in self.FIELDS}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Status:
        check_keys(cls.KIND, data, cls.FIELDS)
        return cls(**{f: data[f] for f in cls.FIELDS})


Message = Announcement | InclusionList | Vote | Status | Heartbeat | Goodbye

_KINDS: dict[str, type[Announcement | InclusionList | Vote | Status | Heartbeat | Goodbye]] = {
    cls.KIND: cls for cls in (Announcement, InclusionList, Vote, Status, Heartbeat, Goodbye)
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

"""Field rules shared by the gossip messages: size limits, :class:`MessageError` and the strict checks.

Apart from the message classes so each class reads as its fields and rules, and so the limits can be
imported (consensus/config.py, membership.py) without the classes. Pure: standard library only, because
the round machine in consensus/ imports it through messages.py.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Self

# Statement -> this node's signature over it (protocol/signatures.py makes one from a key); a plain function,
# so the round machine can be handed one and stay pure.
Signer = Callable[[bytes], bytes]

HASH_BYTES = 32
RUN_ID_BYTES = 32
SIGNATURE_BYTES = 64  # ed25519 (protocol/authorship.py)
MAX_PEER_ID_CHARS = 128
MAX_STEP = 2**63 - 1
# Hard ceiling on an announced payload size; the machine applies its own, smaller, configured cap.
MAX_PAYLOAD_BYTES = 1 << 30
# An inclusion list names at most this many peers in each of its three groups; it keeps a list well under
# the 1 MiB gossip cap (1024 x (52-char id + 32-byte hash) is about 90 KB).
MAX_LIST_PEERS = 1024
# Equivocation proofs one inclusion list carries (protocol/evidence.py); more wait for the next list.
MAX_EVIDENCE = 4
# Epochs of one step's agreement; a stalled step advances one per leader timeout, so this is plenty.
MAX_EPOCH = 2**31 - 1

MESSAGE_ERROR_REASONS: tuple[str, ...] = ("kind", "keys", "type", "size", "range", "order", "overlap")


class MessageError(ValueError):
    """A message field is missing, mistyped, out of range or inconsistent.

    ``reason`` is one of :data:`MESSAGE_ERROR_REASONS` (safe as a metric label); ``detail`` names the field.
    """

    def __init__(self, reason: str, detail: str) -> None:
        if reason not in MESSAGE_ERROR_REASONS:
            raise ValueError(f"unknown message error reason {reason!r}")
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def check_int(name: str, value: object, lo: int, hi: int) -> int:
    # bool is an int subclass; a peer sending True for a step is malformed, not step 1.
    if type(value) is not int:
        raise MessageError("type", f"{name} must be an int, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise MessageError("range", f"{name}={value} outside [{lo}, {hi}]")
    return value


def check_bytes(name: str, value: object, size: int) -> bytes:
    if type(value) is not bytes:
        raise MessageError("type", f"{name} must be bytes, got {type(value).__name__}")
    if len(value) != size:
        raise MessageError("size", f"{name} must be {size} bytes, got {len(value)}")
    return value


def check_peer_id(name: str, value: object) -> str:
    """Peer ids are printable ASCII without spaces, so they sort the same everywhere and are safe to log."""
    if type(value) is not str:
        raise MessageError("type", f"{name} must be a str, got {type(value).__name__}")
    if not 1 <= len(value) <= MAX_PEER_ID_CHARS:
        raise MessageError("size", f"{name} must have 1..{MAX_PEER_ID_CHARS} chars, got {len(value)}")
    if not all("!" <= ch <= "~" for ch in value):
        raise MessageError("type", f"{name} must be printable ASCII without spaces")
    return value


def check_sorted_ids(name: str, values: tuple[str, ...]) -> None:
    # Strictly increasing = sorted and duplicate-free: one canonical form, so equal lists have equal digests.
    for a, b in itertools.pairwise(values):
        if not a < b:
            raise MessageError("order", f"{name} must be strictly sorted by peer id ({a!r} then {b!r})")


def check_keys(kind: str, data: Mapping[str, Any], fields: tuple[str, ...]) -> None:
    if not isinstance(data, Mapping):
        raise MessageError("type", f"{kind} must be a mapping, got {type(data).__name__}")
    expected = {"kind", *fields}
    keys = set(data.keys())
    if keys != expected:
        missing = sorted(str(k) for k in expected - keys)
        extra = sorted(str(k) for k in keys - expected)[:5]
        raise MessageError("keys", f"{kind}: missing {missing}, unexpected {extra}")
    if data["kind"] != kind:
        raise MessageError("kind", f"expected kind {kind!r}, got {data['kind']!r}")


def check_seq(name: str, value: object, limit: int) -> tuple[Any, ...]:
    if not isinstance(value, list | tuple):
        raise MessageError("type", f"{name} must be a list, got {type(value).__name__}")
    if len(value) > limit:
        raise MessageError("size", f"{name} has {len(value)} items, limit {limit}")
    return tuple(value)


def id_bytes(peer_id: str) -> bytes:
    """A peer id length-prefixed for hashing, so no two different id sequences give the same bytes."""
    raw = peer_id.encode()
    return len(raw).to_bytes(2, "big") + raw


class FlatMessage:
    """``to_dict``/``from_dict`` for a message whose fields are all plain values (no nested messages):
    the dict is ``kind`` plus exactly ``FIELDS``, and the dataclass's own checks judge the values."""

    KIND: ClassVar[str]
    FIELDS: ClassVar[tuple[str, ...]]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.KIND, **{f: getattr(self, f) for f in self.FIELDS}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        check_keys(cls.KIND, data, cls.FIELDS)
        return cls(**{f: data[f] for f in cls.FIELDS})


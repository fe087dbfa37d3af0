"""Proof of equivocation: one author's signatures over two different payload hashes for one step.

Why it travels inside inclusion lists: a ban must fall at the same step on every honest replica (a ban
changes which lists a replica proposes and votes for, node/peer/bans.py), but an equivocation is usually
seen by a few replicas only (the two announcements went to different peers, or a leader's list entry
differs from the announcement a voter holds). A replica that holds the proof hands it to the leaders it
becomes, the decided list carries it, and every replica that applies that list bans the author from the
next step. The proof needs no trust in whoever carries it: the two signatures are checked at the gossip door
(protocol/codec.py) against the author's key, which its peer id contains.

Pure: standard library only, because messages.py (imported by the round machine) uses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .message_fields import (
    HASH_BYTES,
    MAX_STEP,
    SIGNATURE_BYTES,
    MessageError,
    check_bytes,
    check_int,
    check_peer_id,
    check_seq,
    id_bytes,
)

Signed = tuple[bytes, bytes]  # (payload_hash, the author's signature over it)


@dataclass(frozen=True)
class Equivocation:
    """``peer`` signed both ``first`` and ``second`` for ``step``; ``first`` has the smaller hash, so one
    pair of statements has one form and lists carrying it have one digest."""

    peer: str
    step: int
    first: Signed
    second: Signed

    def __post_init__(self) -> None:
        check_peer_id("evidence.peer", self.peer)
        check_int("evidence.step", self.step, 0, MAX_STEP)
        for name in ("first", "second"):
            pair = getattr(self, name)
            if type(pair) is not tuple or len(pair) != 2:
                raise MessageError("type", f"evidence.{name} must be a (payload_hash, signature) pair")
            check_bytes(f"evidence.{name}.payload_hash", pair[0], HASH_BYTES)
            check_bytes(f"evidence.{name}.signature", pair[1], SIGNATURE_BYTES)
        if not self.first[0] < self.second[0]:
            raise MessageError("order", "evidence hashes must differ, the smaller first")

    @classmethod
    def of(cls, peer: str, step: int, a: Signed, b: Signed) -> Equivocation:
        """The proof from two signed statements in any order (their hashes must differ)."""
        first, second = (a, b) if a[0] < b[0] else (b, a)
        return cls(peer, step, first, second)

    def digest_bytes(self) -> bytes:
        """What an inclusion list's digest covers: who, when and the two hashes (signatures are proof, not
        content: any valid pair names the same misbehaviour)."""
        return id_bytes(self.peer) + self.step.to_bytes(8, "big") + self.first[0] + self.second[0]

    def to_wire(self) -> list[Any]:
        return [self.peer, self.step, self.first[0], self.first[1], self.second[0], self.second[1]]

    @classmethod
    def from_wire(cls, item: object, where: str) -> Equivocation:
        fields = check_seq(where, item, 6)
        if len(fields) != 6:
            raise MessageError("type", f"{where} must be [peer, step, hash, signature, hash, signature]")
        peer, step, h1, s1, h2, s2 = fields
        return cls(peer, step, (h1, s1), (h2, s2))


__all__ = ["Equivocation", "Signed"]

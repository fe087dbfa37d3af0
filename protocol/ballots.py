"""Signed votes, statuses and decision certificates: the messages of Byzantine agreement on a step's list.

Why every vote carries its voter's signature over (run, step, epoch, phase, digest), beside libp2p's signed
gossip: gossip signing proves who *published* a message, and a vote has to be shown to peers that never saw
it published. A leader re-proposing a list shows the quorum of prevotes that justified it (its ``pol``,
protocol/inclusion_list.py), and a replica that decided a step shows the quorum of precommits that decided it
(a :class:`Certificate`), to a laggard or to a joiner. Both are checked by anyone, against keys the peer ids
contain (protocol/signatures.py), so nobody has to take the word of whoever relays them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from .inclusion_list import Endorsements, InclusionList, check_endorsements, endorsements_from_wire
from .message_fields import (
    HASH_BYTES,
    MAX_EPOCH,
    MAX_STEP,
    RUN_ID_BYTES,
    SIGNATURE_BYTES,
    FlatMessage,
    MessageError,
    check_bytes,
    check_int,
    check_keys,
    check_peer_id,
    id_bytes,
)

PREVOTE = 0
PRECOMMIT = 1
PHASES = (PREVOTE, PRECOMMIT)

_DOMAIN = b"distro-node/vote/v1\0"


def vote_statement(run_id: bytes, step: int, epoch: int, phase: int, voter: str, digest: bytes) -> bytes:
    """The exact bytes a voter signs: domain-separated and length-prefixed."""
    if len(run_id) != RUN_ID_BYTES or len(digest) != HASH_BYTES or phase not in PHASES:
        raise ValueError("run id and digest must be 32 bytes, phase 0 or 1")
    return (_DOMAIN + run_id + step.to_bytes(8, "big") + epoch.to_bytes(4, "big") + bytes([phase])
            + id_bytes(voter) + digest)


@dataclass(frozen=True)
class Vote(FlatMessage):
    """``voter`` prevotes (phase 0) or precommits (phase 1) the list with content ``digest`` proposed in
    ``epoch`` of ``step``; ``signature`` signs exactly that (:func:`vote_statement`).

    Each honest peer casts at most one vote per phase and epoch; a list is decided by a quorum of precommits
    in one epoch (protocol/consensus/agreement.py).
    """

    KIND: ClassVar[str] = "vote"
    FIELDS: ClassVar[tuple[str, ...]] = ("run_id", "step", "epoch", "phase", "voter", "digest", "signature")

    run_id: bytes
    step: int
    epoch: int
    phase: int
    voter: str
    digest: bytes
    signature: bytes

    def __post_init__(self) -> None:
        check_bytes("run_id", self.run_id, RUN_ID_BYTES)
        check_int("step", self.step, 0, MAX_STEP)
        check_int("epoch", self.epoch, 0, MAX_EPOCH)
        check_int("phase", self.phase, PREVOTE, PRECOMMIT)
        check_peer_id("voter", self.voter)
        check_bytes("digest", self.digest, HASH_BYTES)
        check_bytes("signature", self.signature, SIGNATURE_BYTES)



@dataclass(frozen=True)
class Status(FlatMessage):
    """``peer_id`` entered ``epoch`` of ``step``: it will cast no vote in an earlier epoch.

    Statuses line replicas up on one epoch (a peer that hears of a later epoch from the roster jumps there),
    tell a leader when enough peers reached its epoch, and ask replicas that already decided the step for
    their certificate (protocol/consensus/laggards.py).
    """

    KIND: ClassVar[str] = "status"
    FIELDS: ClassVar[tuple[str, ...]] = ("run_id", "step", "epoch", "peer_id")

    run_id: bytes
    step: int
    epoch: int
    peer_id: str

    def __post_init__(self) -> None:
        check_bytes("run_id", self.run_id, RUN_ID_BYTES)
        check_int("step", self.step, 0, MAX_STEP)
        check_int("epoch", self.epoch, 1, MAX_EPOCH)
        check_peer_id("peer_id", self.peer_id)



@dataclass(frozen=True)
class Certificate:
    """Proof that ``decided`` was decided: the precommits of a quorum of the step's roster for its content
    in ``decided.epoch``. Anyone may relay one; whether the voters form a quorum is the roster's call, made
    by the round machine, and the signatures are checked at the gossip door."""

    KIND: ClassVar[str] = "certificate"
    FIELDS: ClassVar[tuple[str, ...]] = ("decided", "precommits")

    decided: InclusionList
    precommits: Endorsements

    def __post_init__(self) -> None:
        if not isinstance(self.decided, InclusionList):
            raise MessageError("type", "decided must be an inclusion list")
        check_endorsements("precommits", self.precommits)
        if not self.precommits:
            raise MessageError("size", "a certificate needs precommits")

    @property
    def run_id(self) -> bytes:
        return self.decided.run_id

    @property
    def step(self) -> int:
        return self.decided.step

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.KIND,
            "decided": self.decided.to_dict(),
            "precommits": [[voter, signature] for voter, signature in self.precommits],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Certificate:
        check_keys(cls.KIND, data, cls.FIELDS)
        body = data["decided"]
        if not isinstance(body, Mapping) or body.get("kind") != InclusionList.KIND:
            raise MessageError("type", "decided must be an inclusion list")
        return cls(InclusionList.from_dict(body), endorsements_from_wire("precommits", data["precommits"]))


__all__ = [
    "PHASES",
    "PRECOMMIT",
    "PREVOTE",
    "Certificate",
    "Status",
    "Vote",
    "vote_statement",
]

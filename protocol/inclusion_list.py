"""The inclusion list: a leader's proposal of exactly which payloads one step aggregates.

Its own module because votes and certificates (protocol/ballots.py) refer to it, and both are messages.
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
    MAX_STEP,
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

Endorsements = tuple[tuple[str, bytes], ...]  # (voter, its signature over one vote statement), voters sorted


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

    ``pol_epoch`` and ``pol`` justify a re-proposal (protocol/consensus/agreement.py): a quorum of signed
    prevotes for this very content in an earlier epoch of the step (-1 and empty for a fresh list). Like
    ``epoch`` and ``leader`` they are proof, not content, and stay out of :meth:`digest`.
    """

    KIND: ClassVar[str] = "inclusion_list"
    FIELDS: ClassVar[tuple[str, ...]] = (
        "run_id", "step", "epoch", "leader", "entries", "warming", "departed", "evidence", "pol_epoch", "pol",
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
    pol_epoch: int = -1
    pol: Endorsements = ()

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
        check_int("pol_epoch", self.pol_epoch, -1, self.epoch - 1)
        check_endorsements("pol", self.pol)
        if (self.pol_epoch < 0) != (not self.pol):
            raise MessageError("overlap", "pol must be empty exactly when pol_epoch is -1")
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
            "pol_epoch": self.pol_epoch,
            "pol": [[voter, signature] for voter, signature in self.pol],
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
            pol_epoch=data["pol_epoch"],
            pol=endorsements_from_wire("pol", data["pol"]),
        )


def check_endorsements(name: str, value: object) -> None:
    """Voters sorted and distinct (one canonical form), each with one well-formed signature."""
    if type(value) is not tuple:
        raise MessageError("type", f"{name} must be a tuple")
    if len(value) > MAX_LIST_PEERS:
        raise MessageError("size", f"{name} has more than {MAX_LIST_PEERS} voters")
    for i, item in enumerate(value):
        if type(item) is not tuple or len(item) != 2:
            raise MessageError("type", f"{name}[{i}] must be a (voter, signature) pair")
        check_peer_id(f"{name}[{i}].voter", item[0])
        check_bytes(f"{name}[{i}].signature", item[1], SIGNATURE_BYTES)
    check_sorted_ids(name, tuple(voter for voter, _ in value))


def endorsements_from_wire(name: str, raw: object) -> Endorsements:
    items = check_seq(name, raw, MAX_LIST_PEERS)
    pairs: list[tuple[Any, Any]] = []
    for i, item in enumerate(items):
        pair = check_seq(f"{name}[{i}]", item, 2)
        if len(pair) != 2:
            raise MessageError("type", f"{name}[{i}] must be [voter, signature]")
        pairs.append((pair[0], pair[1]))
    return tuple(pairs)

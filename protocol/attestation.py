"""Signed state attestations and the chain of them that lets a newcomer trust a roster without trusting its
bootstrap peer.

An attestation is a peer's ed25519 signature over (run, step, state digest), the digest covering the whole
:class:`~.membership.SyncState` at that step boundary (next step, every roster entry with its counters).
Honest replicas hold bit-identical round state at a boundary, so they sign the same bytes.

A :class:`Link` is one such state with the signatures gathered for it. A chain starts at a root that the run
id itself commits to: a permissioned run's manifest names its founder, so the root is the one-peer roster
``{founder}`` (f = 0: the founder's signature alone certifies a state, at any step, as its signature alone
admits peers). From a trusted roster R trusted at step s, a later link is trusted when f(R) + 1 distinct
active peers of R signed it: at least one of them is honest, and an honest peer signs only the state its own
rounds decided. That is a light client's skipping check: no step in between is replayed, and one link may
stand for many roster changes as long as f + 1 of the older roster are still there to sign.

Why a horizon (``max_skip`` steps): a roster's members are trusted to stay honest for a while, not forever.
Peers that left long ago hold keys that cost them nothing to misuse, so a link may follow the roster it is
checked against by at most ``max_skip`` steps (the root, the run's authority, is exempt). Honest peers
attest at every change of the active set and every few steps, so an honest chain always has a link within
reach.

Everything here is pure (no host, no clock); ``decode_chain`` is the strict door for a stranger's bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import msgpack

from .membership import MembershipError, Roster, SyncState
from .message_fields import (
    HASH_BYTES,
    MAX_LIST_PEERS,
    RUN_ID_BYTES,
    SIGNATURE_BYTES,
    MessageError,
    Signer,
    check_peer_id,
)
from .signatures import signed_by
from .wire import refuse_msgpack_ext

DOMAIN = b"distro-node/state-attestation/v1\0"
MAX_CHAIN_LINKS = 32
MAX_CHAIN_BYTES = 8 * 1024 * 1024  # 32 links of 1024 peers each (roster and signatures, ~190 KB a link) fit
CHAIN_ERROR_REASONS: tuple[str, ...] = (
    "malformed", "run", "order", "skip", "signature", "outsider", "too_few", "too_long",
)


class ChainError(ValueError):
    """A link or chain that certifies nothing; ``reason`` (one of ``CHAIN_ERROR_REASONS``) is metric-safe."""

    def __init__(self, reason: str, detail: str) -> None:
        if reason not in CHAIN_ERROR_REASONS:
            raise ValueError(f"unknown chain error reason {reason!r}")
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def state_digest(state: SyncState) -> bytes:
    """A digest of the round state a snapshot carries (next step and the whole roster with its counters)."""
    doc = msgpack.packb(state.to_dict(), use_bin_type=True)
    return hashlib.sha256(b"distro-node/sync-state/v1\0" + doc).digest()


def statement(run_id: bytes, step: int, digest: bytes) -> bytes:
    """The bytes an attestation signs, domain-separated from every other statement of ours."""
    return DOMAIN + run_id + step.to_bytes(8, "big") + digest


def attest(sign: Signer, run_id: bytes, state: SyncState) -> tuple[bytes, bytes]:
    """Our (digest, signature) for ``state``."""
    digest = state_digest(state)
    return digest, sign(statement(run_id, state.next_step, digest))


@dataclass(frozen=True)
class Link:
    """A state and the attestations gathered for it (signer -> signature)."""

    state: SyncState
    signatures: Mapping[str, bytes]

    def __post_init__(self) -> None:
        object.__setattr__(self, "signatures", MappingProxyType(dict(sorted(self.signatures.items()))))

    @property
    def step(self) -> int:
        return self.state.next_step

    @property
    def digest(self) -> bytes:
        return state_digest(self.state)

    def with_signatures(self, more: Mapping[str, bytes]) -> Link:
        return Link(self.state, {**self.signatures, **more})

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state.to_dict(), "sigs": [[p, s] for p, s in self.signatures.items()]}

    @classmethod
    def from_dict(cls, data: object) -> Link:
        if not isinstance(data, Mapping) or set(data) != {"state", "sigs"}:
            raise ChainError("malformed", "a link must have exactly 'state' and 'sigs'")
        try:
            state = SyncState.from_dict(data["state"])
        except MembershipError as exc:
            raise ChainError("malformed", f"link state: {exc}") from None
        rows = data["sigs"]
        if not isinstance(rows, list) or len(rows) > MAX_LIST_PEERS:
            raise ChainError("malformed", f"a link's sigs must be a list of at most {MAX_LIST_PEERS}")
        sigs: dict[str, bytes] = {}
        for row in rows:
            if not isinstance(row, list) or len(row) != 2:
                raise ChainError("malformed", "a signature row must be [peer_id, signature]")
            peer, sig = row
            try:
                check_peer_id("signer", peer)
            except MessageError as exc:
                raise ChainError("malformed", str(exc)) from None
            if type(sig) is not bytes or len(sig) != SIGNATURE_BYTES or peer in sigs:
                raise ChainError("malformed", "a signature must be 64 bytes, one per signer")
            sigs[peer] = sig
        return cls(state, sigs)


@dataclass(frozen=True)
class TrustedRoster:
    """A roster whose active peers' word counts, the step it governs (None: the root, valid at any step) and
    where the trust came from (said in logs and join events)."""

    roster: Roster
    step: int | None
    source: str

    @classmethod
    def root(cls, founder: str) -> TrustedRoster:
        return cls(Roster.genesis([founder]), None, "the founder the manifest names")

    @property
    def needed(self) -> int:
        """f + 1 of the active peers: at least one of them is honest."""
        return self.roster.faults_tolerated() + 1

    def covers(self, step: int, max_skip: int) -> bool:
        """Whether this roster may vouch for a state at ``step`` (not before it, at most ``max_skip`` on)."""
        return self.step is None or self.step <= step <= self.step + max_skip


def verify_link(trusted: TrustedRoster, link: Link, run_id: bytes, max_skip: int) -> TrustedRoster:
    """The roster ``link`` certifies, if f + 1 active peers of ``trusted`` signed its state; else
    ChainError."""
    if trusted.step is not None and link.step <= trusted.step:
        raise ChainError("order", f"link at step {link.step} is not after the trusted step {trusted.step}")
    if not trusted.covers(link.step, max_skip):
        raise ChainError("skip", f"link at step {link.step} is more than {max_skip} steps after the "
                                 f"trusted step {trusted.step}")
    said = statement(run_id, link.step, link.digest)
    valid = forged = outsiders = 0
    for peer, sig in link.signatures.items():
        if not trusted.roster.is_eligible(peer):
            outsiders += 1
        elif signed_by(peer, said, sig):
            valid += 1
            if valid >= trusted.needed:  # enough: the other signatures need no check
                break
        else:
            forged += 1
    if valid >= trusted.needed:
        source = f"the roster the chain certifies at step {link.step}"
        return TrustedRoster(link.state.roster, link.step, source)
    reason = "signature" if forged else "outsider" if outsiders else "too_few"
    raise ChainError(reason, f"link at step {link.step}: {valid} valid signature(s) of {trusted.source}'s "
                             f"active peers, {trusted.needed} needed ({forged} forged, {outsiders} from "
                             "outside it)")


def verify_chain(root: TrustedRoster, links: Sequence[Link], run_id: bytes, max_skip: int) -> TrustedRoster:
    """The roster the last link certifies, every link checked against the one before (the first against
    ``root``); ``root`` itself for an empty chain."""
    if len(links) > MAX_CHAIN_LINKS:
        raise ChainError("too_long", f"{len(links)} links, cap {MAX_CHAIN_LINKS}")
    trusted = root
    for link in links:
        trusted = verify_link(trusted, link, run_id, max_skip)
    return trusted


def encode_chain(run_id: bytes, links: Iterable[Link]) -> bytes:
    return msgpack.packb({"run_id": run_id, "links": [link.to_dict() for link in links]}, use_bin_type=True)


def decode_chain(data: bytes, run_id: bytes) -> tuple[Link, ...]:
    """A stranger's chain bytes -> links (unverified: see :func:`verify_chain`); ChainError if malformed or
    for another run."""
    if len(data) > MAX_CHAIN_BYTES:
        raise ChainError("malformed", f"{len(data)} bytes exceed the cap {MAX_CHAIN_BYTES}")
    try:
        doc = msgpack.unpackb(data, raw=False, strict_map_key=True,
                              max_bin_len=max(SIGNATURE_BYTES, HASH_BYTES), max_str_len=256,
                              max_array_len=MAX_LIST_PEERS, max_map_len=8,
                              ext_hook=refuse_msgpack_ext)
    except Exception as exc:  # msgpack raises several unrelated types for malformed input
        raise ChainError("malformed", f"chain does not unpack: {type(exc).__name__}") from None
    if not isinstance(doc, dict) or set(doc) != {"run_id", "links"}:
        raise ChainError("malformed", "a chain must have exactly 'run_id' and 'links'")
    if type(doc["run_id"]) is not bytes or len(doc["run_id"]) != RUN_ID_BYTES:
        raise ChainError("malformed", "run_id must be 32 bytes")
    if doc["run_id"] != run_id:
        raise ChainError("run", "chain of another run")
    raw = doc["links"]
    if not isinstance(raw, list) or len(raw) > MAX_CHAIN_LINKS:
        raise ChainError("too_long" if isinstance(raw, list) else "malformed",
                         f"links must be a list of at most {MAX_CHAIN_LINKS}")
    return tuple(Link.from_dict(item) for item in raw)


__all__ = ["CHAIN_ERROR_REASONS", "DOMAIN", "MAX_CHAIN_BYTES", "MAX_CHAIN_LINKS", "ChainError", "Link",
           "TrustedRoster", "attest", "decode_chain", "encode_chain", "state_digest", "statement",
           "verify_chain", "verify_link"]

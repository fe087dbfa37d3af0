"""``/distro/state/1.0.0``: state sync for joiners and resyncing peers.

A donor serves a *snapshot*: its weights and optimizer state as opaque byte parts (the node serializes them,
never with pickle), the weights hash, and the round machine's :class:`~.membership.SyncState` for the step
those weights are at. Two requests, both small capped msgpack maps:

* ``meta``: describe a snapshot (step, weights hash, sync state, and for each part its size, chunk size, the
  sha256 of every chunk and of the whole). The donor may take a moment (it snapshots at its next step
  boundary) and may answer NOT_READY (e.g. a founder whose run has not started).
* ``chunk``: one chunk of a part the donor still holds, named by the part's sha256.

Why chunks with per-chunk hashes: a joiner pulls the chunks of one snapshot from several donors that
described the same snapshot (same weights hash), spreading the upload, and can tell which donor sent a bad
chunk and take it from another. Whether a description is right is decided by the node, by how many peers
of a roster it trusts gave the same one (node/peer/state_trust.py); this module only guarantees "these are
the bytes described".
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import trio
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID

from .errors import FetchFailedError, MalformedReplyError, TransferError, TransportError
from .host import P2PHost
from .membership import MembershipError, SyncState
from .rpc import RpcStatus, call, install_rpc
from .wire import refuse_msgpack_ext

logger = logging.getLogger(__name__)

STATE_PROTOCOL = TProtocol("/distro/state/1.0.0")
PART_NAMES: tuple[str, ...] = ("weights", "optim")
MAX_REQUEST_BYTES = 256
MAX_CHUNK_BYTES = 4 * 1024 * 1024
DEFAULT_CHUNK_BYTES = 1024 * 1024
MAX_CHUNKS = 8192
# A meta reply holds one 32-byte hash per chunk plus a roster of up to 1024 peers.
MAX_META_BYTES = 2 * (MAX_CHUNKS * 40) + 256 * 1024
HASH_BYTES = 32


class SnapshotError(TransferError):
    """A snapshot description or chunk from a donor is malformed or does not match what was described."""


@dataclass(frozen=True)
class PartInfo:
    size: int
    chunk_size: int
    chunk_hashes: tuple[bytes, ...]
    sha256: bytes

    def to_dict(self) -> dict[str, Any]:
        return {"size": self.size, "chunk": self.chunk_size, "hashes": list(self.chunk_hashes),
                "sha256": self.sha256}


@dataclass(frozen=True)
class SnapshotMeta:
    """What a donor says it holds; ``snapshot_id`` names it in chunk requests."""

    snapshot_id: bytes
    step: int
    weights_hash: bytes
    state: SyncState
    parts: Mapping[str, PartInfo]

    def to_bytes(self) -> bytes:
        doc = {
            "id": self.snapshot_id,
            "step": self.step,
            "weights_hash": self.weights_hash,
            "state": self.state.to_dict(),
            "parts": {name: info.to_dict() for name, info in self.parts.items()},
        }
        return msgpack.packb(doc, use_bin_type=True)


@dataclass(frozen=True)
class Snapshot:
    meta: SnapshotMeta
    data: Mapping[str, bytes]

    @classmethod
    def build(
        cls,
        step: int,
        weights_hash: bytes,
        state: SyncState,
        parts: Mapping[str, bytes],
        chunk_size: int = DEFAULT_CHUNK_BYTES,
    ) -> Snapshot:
        if set(parts) - set(PART_NAMES):
            raise ValueError(f"unknown snapshot parts {sorted(set(parts) - set(PART_NAMES))}")
        if not 1 <= chunk_size <= MAX_CHUNK_BYTES:
            raise ValueError(f"chunk_size must be in 1..{MAX_CHUNK_BYTES}")
        infos: dict[str, PartInfo] = {}
        for name, data in sorted(parts.items()):
            hashes = tuple(
                hashlib.sha256(data[i : i + chunk_size]).digest() for i in range(0, len(data), chunk_size)
            )
            if len(hashes) > MAX_CHUNKS:
                raise ValueError(f"part {name!r} needs {len(hashes)} chunks, cap {MAX_CHUNKS}")
            infos[name] = PartInfo(len(data), chunk_size, hashes, hashlib.sha256(data).digest())
        ident = hashlib.sha256(b"distro-node/snapshot/v1\0")
        ident.update(step.to_bytes(8, "big") + weights_hash)
        ident.update(msgpack.packb(state.to_dict(), use_bin_type=True))
        for name, info in infos.items():
            ident.update(name.encode() + b"\0" + info.sha256)
        meta = SnapshotMeta(ident.digest(), step, weights_hash, state, infos)
        return cls(meta, dict(parts))


def _unpack(data: bytes, limit: int) -> Any:
    if len(data) > limit:
        raise ValueError(f"{len(data)} bytes exceed the cap {limit}")
    return msgpack.unpackb(
        data, raw=False, strict_map_key=True, max_bin_len=MAX_CHUNK_BYTES,
        max_str_len=256, max_array_len=max(MAX_CHUNKS, 4096), max_map_len=16, ext_hook=refuse_msgpack_ext,
    )


def _int(doc: Mapping[str, Any], key: str, lo: int, hi: int) -> int:
    value = doc.get(key)
    if type(value) is not int or not lo <= value <= hi:
        raise SnapshotError(f"snapshot field {key!r} must be an int in [{lo}, {hi}]")
    return value


def _digest(value: object, name: str) -> bytes:
    if type(value) is not bytes or len(value) != HASH_BYTES:
        raise SnapshotError(f"snapshot field {name!r} must be {HASH_BYTES} bytes")
    return value


def parse_meta(data: bytes, max_state_bytes: int) -> SnapshotMeta:
    """Strictly parse a donor's meta reply; SnapshotError naming the bad field."""
    try:
        doc = _unpack(data, MAX_META_BYTES)
    except Exception as exc:
        raise SnapshotError(f"meta does not unpack: {type(exc).__name__}") from None
    if not isinstance(doc, dict) or set(doc) != {"id", "step", "weights_hash", "state", "parts"}:
        raise SnapshotError("meta must have exactly id, step, weights_hash, state, parts")
    try:
        state = SyncState.from_dict(doc["state"])
    except MembershipError as exc:
        raise SnapshotError(f"meta state: {exc}") from None
    raw_parts = doc["parts"]
    if not isinstance(raw_parts, dict) or not set(raw_parts) <= set(PART_NAMES) or "weights" not in raw_parts:
        raise SnapshotError(f"meta parts must be a subset of {PART_NAMES} with 'weights'")
    parts: dict[str, PartInfo] = {}
    for name, raw in raw_parts.items():
        if not isinstance(raw, dict) or set(raw) != {"size", "chunk", "hashes", "sha256"}:
            raise SnapshotError(f"part {name!r} must have size, chunk, hashes, sha256")
        size = _int(raw, "size", 0, max_state_bytes)
        chunk = _int(raw, "chunk", 1, MAX_CHUNK_BYTES)
        hashes = raw["hashes"]
        if not isinstance(hashes, list) or len(hashes) != math.ceil(size / chunk):
            raise SnapshotError(f"part {name!r} must list one hash per chunk")
        parts[name] = PartInfo(size, chunk, tuple(_digest(h, "hashes") for h in hashes),
                               _digest(raw["sha256"], "sha256"))
    step = _int(doc, "step", 0, 2**63 - 1)
    if state.next_step != step:
        raise SnapshotError("meta step differs from its sync state's next_step")
    return SnapshotMeta(_digest(doc["id"], "id"), step, _digest(doc["weights_hash"], "weights_hash"),
                        state, parts)


# Why the provider is a callback: only the node knows when its weights are at a step boundary (not in the
# middle of an apply), so it decides when to cut the snapshot; None means "not ready, ask later".
SnapshotProvider = Callable[[ID, bool], Awaitable[Snapshot | None]]


class StateServer:
    """Serves snapshots cut by ``provider``; keeps the last ``keep`` for chunk requests (bounded memory).

    ``admit`` judges each requester first: a refused one (banned, or over its request rate) is answered
    ``BUSY`` before anything is read from the state. A snapshot description costs its cut (serializing and
    hashing the whole state, GBs at the large presets) unless the cached one still fits, so any connected
    host asking again and again must not be able to make us do that work at will.
    """

    def __init__(self, host: P2PHost, run_id: bytes, provider: SnapshotProvider, *, keep: int = 2,
                 timeout: float = 120.0, admit: Callable[[ID, str], bool] | None = None) -> None:
        self.host = host
        self.admit = admit
        self.run_id = run_id
        self.provider = provider
        self.keep = keep
        self.timeout = timeout
        self._snapshots: OrderedDict[bytes, Snapshot] = OrderedDict()
        self.served_chunks = 0

    def install(self) -> None:
        install_rpc(self.host, STATE_PROTOCOL, self._handle, max_request=MAX_REQUEST_BYTES,
                    timeout=self.timeout)

    def offer(self, snapshot: Snapshot) -> None:
        """Keep ``snapshot`` available for chunk requests (the newest ``keep`` are kept)."""
        self._snapshots[snapshot.meta.snapshot_id] = snapshot
        self._snapshots.move_to_end(snapshot.meta.snapshot_id)
        while len(self._snapshots) > self.keep:
            self._snapshots.popitem(last=False)

    def _holding(self, part: object, sha256: object) -> Snapshot | None:
        """A held snapshot with this exact part. By content, not by snapshot id: donors with equal weights
        hold byte-identical weight parts inside different snapshots (their optimizer states differ)."""
        if not isinstance(part, str) or not isinstance(sha256, bytes):
            return None
        for snapshot in reversed(self._snapshots.values()):
            info = snapshot.meta.parts.get(part)
            if info is not None and info.sha256 == sha256:
                return snapshot
        return None

    async def _handle(self, remote: ID, body: bytes) -> tuple[RpcStatus, bytes]:
        try:
            req = _unpack(body, MAX_REQUEST_BYTES)
        except Exception:
            return RpcStatus.BAD_REQUEST, b""
        if not isinstance(req, dict) or req.get("run_id") != self.run_id:
            return RpcStatus.BAD_REQUEST, b""
        op = req.get("op")
        if self.admit is not None and not self.admit(remote, op if op in ("meta", "chunk") else "other"):
            return RpcStatus.BUSY, b""
        if op == "meta" and set(req) == {"op", "run_id", "genesis"} and isinstance(req["genesis"], bool):
            snapshot = await self.provider(remote, req["genesis"])
            if snapshot is None:
                return RpcStatus.NOT_READY, b""
            self.offer(snapshot)
            return RpcStatus.OK, snapshot.meta.to_bytes()
        if op == "chunk" and set(req) == {"op", "run_id", "sha256", "part", "index"}:
            part, index = req["part"], req["index"]
            snapshot = self._holding(part, req["sha256"])
            if snapshot is None:
                return RpcStatus.NOT_FOUND, b""
            info = snapshot.meta.parts[part]
            if type(index) is not int or not 0 <= index < len(info.chunk_hashes):
                return RpcStatus.BAD_REQUEST, b""
            start = index * info.chunk_size
            self.served_chunks += 1
            return RpcStatus.OK, bytes(snapshot.data[part][start : start + info.chunk_size])
        return RpcStatus.BAD_REQUEST, b""


async def fetch_meta(
    host: P2PHost, peer_id: ID, run_id: bytes, *, genesis: bool, timeout: float, max_state_bytes: int
) -> SnapshotMeta:
    req = msgpack.packb({"op": "meta", "run_id": run_id, "genesis": genesis}, use_bin_type=True)
    data = await call(host, peer_id, STATE_PROTOCOL, req, max_reply=MAX_META_BYTES, timeout=timeout)
    return parse_meta(data, max_state_bytes)


async def fetch_part(
    host: P2PHost,
    donors: Sequence[ID],
    run_id: bytes,
    meta: SnapshotMeta,
    part: str,
    *,
    timeout: float,
    parallel: int = 4,
    on_wrong: Callable[[ID], None] | None = None,
) -> bytes:
    """All chunks of ``part``, spread round-robin over ``donors`` (each holding a part with that sha256); a
    chunk that fails or does not match its hash is retried from the next donor. A donor that sent a chunk
    that does not match is reported to ``on_wrong`` and not asked for more. FetchFailedError if some chunk
    could not be had from anyone."""
    info = meta.parts.get(part)
    if info is None:
        raise SnapshotError(f"snapshot has no part {part!r}")
    if not donors:
        raise FetchFailedError(meta.snapshot_id, [])
    buf = bytearray(info.size)
    failures: list[tuple[str, TransportError]] = []
    limit = trio.Semaphore(parallel)
    missing: list[int] = []
    wrong: set[ID] = set()

    async def one(index: int) -> None:
        async with limit:
            for attempt in range(len(donors)):
                donor = donors[(index + attempt) % len(donors)]
                if donor in wrong:
                    continue
                req = msgpack.packb({"op": "chunk", "run_id": run_id, "sha256": info.sha256, "part": part,
                                     "index": index}, use_bin_type=True)
                try:
                    data = await call(host, donor, STATE_PROTOCOL, req, max_reply=info.chunk_size,
                                      timeout=timeout)
                except TransportError as exc:
                    failures.append((str(donor), exc))
                    continue
                start = index * info.chunk_size
                want = min(info.chunk_size, info.size - start)
                if len(data) != want or hashlib.sha256(data).digest() != info.chunk_hashes[index]:
                    failures.append((str(donor), MalformedReplyError(f"chunk {index} of {part} is wrong",
                                                                     str(donor))))
                    if donor not in wrong:
                        wrong.add(donor)
                        if on_wrong is not None:
                            on_wrong(donor)
                    continue
                buf[start : start + want] = data
                return
            missing.append(index)  # raised after the nursery, so no exception group reaches the caller

    async with trio.open_nursery() as nursery:
        for index in range(len(info.chunk_hashes)):
            nursery.start_soon(one, index)
    if missing:
        raise FetchFailedError(meta.snapshot_id, failures[-len(donors):])
    out = bytes(buf)
    if hashlib.sha256(out).digest() != info.sha256:
        raise SnapshotError(f"part {part!r} does not hash to the described sha256")
    return out

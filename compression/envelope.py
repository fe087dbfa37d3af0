"""The msgpack envelope: key names, per-spec limits, the capped unpack and the header schema check.

Everything here runs before any tensor work and only looks at sizes, types and small header fields, so a
hostile payload costs at most one bounded msgpack parse.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import msgpack

from .errors import PayloadError
from .payload import FORMAT_VERSION, Header, PayloadSpec, TensorSpec
from .sizes import FieldSizes, field_sizes

K_VERSION = "version"
K_RUN_ID = "run_id"
K_STEP = "step"
K_PEER_ID = "peer_id"
K_STRATEGY = "strategy"
K_LAYOUT = "layout_digest"
K_SETTINGS = "settings_digest"
K_TENSORS = "tensors"
TOP_KEYS = frozenset({K_VERSION, K_RUN_ID, K_STEP, K_PEER_ID, K_STRATEGY, K_LAYOUT, K_SETTINGS, K_TENSORS})

F_INDICES = "idx"
F_VALUES = "val"
F_SCALE = "scale"

MAX_RUN_ID_LEN = 64
MAX_PEER_ID_LEN = 128
DIGEST_LEN = 32
# Envelope bytes outside the tensor fields: keys, digests, run id, peer id, step, strategy, msgpack headers.
_HEADER_SLACK = 1024
# Per tensor: name (<= 5-byte str header), entry map header, 3 x (key + <= 5-byte bin header).
_PER_TENSOR_OVERHEAD = 5 + 1 + 3 * (len(F_SCALE) + 1 + 5)
_DETAIL_MAX = 200


@dataclass(frozen=True)
class Plan:
    """What a payload of one spec must look like, derived once per spec from local facts only."""

    tensors: tuple[TensorSpec, ...]
    sizes: tuple[FieldSizes, ...]
    names: frozenset[str]
    max_nbytes: int
    max_bin_len: int
    max_str_len: int
    max_map_len: int

    def entry_keys(self, i: int) -> frozenset[str]:
        s = self.sizes[i]
        keys = {F_VALUES}
        if not self.tensors[i].dense:
            keys.add(F_INDICES)
        if s.scale:
            keys.add(F_SCALE)
        return frozenset(keys)


@lru_cache(maxsize=32)
def _plan(tensors: tuple[TensorSpec, ...], strategy: str, index_codec: str, value_codec: str) -> Plan:
    sizes = tuple(field_sizes(t, index_codec, value_codec) for t in tensors)
    name_lens = [len(t.name.encode()) for t in tensors]
    body = sum(s.total for s in sizes)
    largest = max((max(s.indices, s.values, s.scale) for s in sizes), default=0)
    return Plan(
        tensors=tensors,
        sizes=sizes,
        names=frozenset(t.name for t in tensors),
        max_nbytes=body
        + sum(name_lens)
        + _PER_TENSOR_OVERHEAD * len(tensors)
        + len(strategy.encode())
        + _HEADER_SLACK,
        max_bin_len=max(largest, MAX_RUN_ID_LEN, DIGEST_LEN),
        max_str_len=max([MAX_PEER_ID_LEN, len(strategy.encode()), *name_lens]),
        # Two spare entries: one extra or repeated key is then reported as a schema error, not a parse error.
        max_map_len=max(len(TOP_KEYS), len(tensors)) + 2,
    )


def plan_for(spec: PayloadSpec) -> Plan:
    return _plan(spec.tensors, spec.strategy, spec.index_codec, spec.value_codec)


def max_encoded_nbytes(spec: PayloadSpec) -> int:
    """Upper bound on a valid encoded payload: the cap to apply to a stream before reading it."""
    return plan_for(spec).max_nbytes


def short(text: str) -> str:
    """Keep peer-controlled text in error details (and logs) bounded."""
    return text if len(text) <= _DETAIL_MAX else text[: _DETAIL_MAX - 3] + "..."


def _reject_ext(code: int, data: bytes) -> Any:
    raise PayloadError("malformed", f"msgpack ext type {code} is not allowed")


def _unique_pairs(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    # A repeated key would let two different byte strings carry one content, or hide a field: reject it.
    out = dict(pairs)
    if len(out) != len(pairs):
        raise PayloadError("schema", "repeated key in a msgpack map")
    return out


def unpack(data: bytes, plan: Plan) -> Any:
    """Parse with every msgpack limit set from the spec; any parser failure becomes ``malformed``."""
    try:
        # unpackb builds a fresh unpacker per call, so no state survives a failed parse.
        return msgpack.unpackb(
            data,
            raw=False,
            strict_map_key=True,
            use_list=True,
            ext_hook=_reject_ext,
            object_pairs_hook=_unique_pairs,
            max_str_len=plan.max_str_len,
            max_bin_len=plan.max_bin_len,
            max_array_len=0,
            max_map_len=plan.max_map_len,
            max_ext_len=0,
        )
    except PayloadError:
        raise
    except Exception as exc:  # the parser is a library boundary: any failure on peer bytes is "malformed"
        raise PayloadError("malformed", short(f"msgpack: {type(exc).__name__}: {exc}")) from None


def _describe_keys(found: set[Any], expected: frozenset[str]) -> str:
    missing = sorted(expected - found)
    extra = sorted(repr(k) for k in found - expected)
    return short(f"missing {missing}, unexpected [{', '.join(extra)}]")


def _field(obj: dict[str, Any], key: str, kind: type) -> Any:
    value = obj[key]
    # type() rather than isinstance: msgpack booleans are ints to isinstance.
    if type(value) is not kind:
        raise PayloadError(
            "schema", f"header field {key!r} must be {kind.__name__}, got {type(value).__name__}"
        )
    return value


def check_header(
    obj: Any,
    spec: PayloadSpec,
    *,
    run_id: bytes,
    sender: str | None,
    step: int | None,
) -> tuple[Header, dict[str, Any]]:
    """Schema, version, run, peer, layout, settings and step checks; returns the header and the tensor map."""
    if type(obj) is not dict:
        raise PayloadError("schema", f"payload must be a map, got {type(obj).__name__}")
    if K_VERSION in obj and type(obj[K_VERSION]) is int and obj[K_VERSION] != FORMAT_VERSION:
        raise PayloadError("version", f"format version {obj[K_VERSION]}, expected {FORMAT_VERSION}")
    if obj.keys() != TOP_KEYS:
        raise PayloadError("schema", "header keys: " + _describe_keys(set(obj), TOP_KEYS))
    version = _field(obj, K_VERSION, int)
    got_run = _field(obj, K_RUN_ID, bytes)
    got_step = _field(obj, K_STEP, int)
    peer_id = _field(obj, K_PEER_ID, str)
    strategy = _field(obj, K_STRATEGY, str)
    layout = _field(obj, K_LAYOUT, bytes)
    settings = _field(obj, K_SETTINGS, bytes)
    tensors = _field(obj, K_TENSORS, dict)
    if got_run != run_id:
        raise PayloadError("run_id", f"run id {got_run.hex()[:16]}..., expected {run_id.hex()[:16]}...")
    if sender is not None and peer_id != sender:
        raise PayloadError("peer_id", short(f"payload claims peer {peer_id!r} but came from {sender!r}"))
    if layout != spec.layout_digest:
        raise PayloadError("layout", f"layout digest {layout.hex()[:16]}... differs from the local model's")
    if strategy != spec.strategy:
        raise PayloadError("settings", short(f"strategy {strategy!r}, expected {spec.strategy!r}"))
    if settings != spec.settings_digest():
        raise PayloadError("settings", f"settings digest {settings.hex()[:16]}... differs from the local one")
    if got_step < 0:
        raise PayloadError("step", f"negative step {got_step}")
    if step is not None and got_step != step:
        raise PayloadError("step", f"step {got_step}, expected {step}")
    header = Header(
        run_id=got_run,
        step=got_step,
        peer_id=peer_id,
        strategy=strategy,
        layout_digest=layout,
        settings_digest=settings,
        version=version,
    )
    return header, tensors


def check_fields(tensors: dict[str, Any], plan: Plan) -> list[dict[str, bytes]]:
    """Tensor set, entry keys, field types and exact byte lengths; returns entries in spec order."""
    if tensors.keys() != plan.names:
        raise PayloadError("tensor_set", "tensors: " + _describe_keys(set(tensors), plan.names))
    entries: list[dict[str, bytes]] = []
    for i, t in enumerate(plan.tensors):
        entry = tensors[t.name]
        if type(entry) is not dict:
            raise PayloadError(
                "schema", f"tensor {t.name!r}: entry must be a map, got {type(entry).__name__}"
            )
        keys = plan.entry_keys(i)
        if entry.keys() != keys:
            raise PayloadError("schema", f"tensor {t.name!r}: " + _describe_keys(set(entry), keys))
        sizes = plan.sizes[i]
        for key, expected in ((F_INDICES, sizes.indices), (F_VALUES, sizes.values), (F_SCALE, sizes.scale)):
            if key not in keys:
                continue
            field = entry[key]
            if type(field) is not bytes:
                raise PayloadError(
                    "dtype", f"tensor {t.name!r} field {key!r}: must be bin, got {type(field).__name__}"
                )
            if len(field) != expected:
                raise PayloadError(
                    "length", f"tensor {t.name!r} field {key!r}: {len(field)} bytes, expected {expected}"
                )
        entries.append(entry)
    return entries

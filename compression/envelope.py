"""The msgpack envelope: key names, per-spec limits, the capped unpack, the header and field checks.

Format version 2 is one flat msgpack map. Seven single-letter header keys bind the payload to a run, step,
sender, strategy, model layout and settings; then one ``bin`` per field kind holds that field for every
tensor, concatenated in the order of ``PayloadSpec.tensors``. Tensor names and per-tensor keys are not on
the wire: both sides derive the tensor list from their local model, and the layout and settings digests in
the header prove they derived the same one, so every byte offset follows from the local spec alone.

Everything here runs before any tensor work and only looks at sizes, types and small header fields, so a
hostile payload costs at most one bounded msgpack parse.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import msgpack

from .errors import PayloadError
from .payload import FORMAT_VERSION, Header
from .sizes import FieldSizes, field_sizes
from .spec import PayloadSpec, TensorSpec

# Header keys. Single letters: at 19 tensors the v1 names and per-tensor keys were 3/4 of the bytes sent.
K_VERSION = "v"
K_RUN_ID = "r"
K_STEP = "n"
K_PEER_ID = "p"
K_STRATEGY = "s"
K_LAYOUT = "l"
K_SETTINGS = "c"
HEADER_KEYS: tuple[str, ...] = (K_VERSION, K_RUN_ID, K_STEP, K_PEER_ID, K_STRATEGY, K_LAYOUT, K_SETTINGS)

# Field keys: each value is the concatenation of that field over all tensors, in spec order.
F_INDICES = "i"
F_VALUES = "d"
F_SCALE = "q"
FIELD_KEYS: tuple[str, ...] = (F_INDICES, F_VALUES, F_SCALE)

# Readable names for error details and docs; the wire only carries the letters.
KEY_NAMES: dict[str, str] = {
    K_VERSION: "version",
    K_RUN_ID: "run_id",
    K_STEP: "step",
    K_PEER_ID: "peer_id",
    K_STRATEGY: "strategy",
    K_LAYOUT: "layout_digest",
    K_SETTINGS: "settings_digest",
    F_INDICES: "indices",
    F_VALUES: "values",
    F_SCALE: "scale",
}
# Format 1 spelled the version key out; finding it lets a mixed-version swarm report "version", not "schema".
LEGACY_VERSION_KEY = "version"

MAX_RUN_ID_LEN = 64
MAX_PEER_ID_LEN = 128
DIGEST_LEN = 32
# Largest msgpack encoding of a valid step (uint64).
_MAX_STEP_NBYTES = 9
# Two spare map entries: one extra or repeated key is then reported as a schema error, not a parse error.
_SPARE_MAP_ENTRIES = 2
_DETAIL_MAX = 200


def _bin_nbytes(n: int) -> int:
    """Shortest msgpack ``bin`` encoding of ``n`` bytes (bin8 / bin16 / bin32 header plus data)."""
    return n + (2 if n < 1 << 8 else 3 if n < 1 << 16 else 5)


def _str_nbytes(n: int) -> int:
    """Shortest msgpack ``str`` encoding of ``n`` UTF-8 bytes (fixstr / str8 / str16 / str32)."""
    return n + (1 if n < 32 else 2 if n < 1 << 8 else 3 if n < 1 << 16 else 5)


def _uint_nbytes(v: int) -> int:
    """Shortest msgpack encoding of a non-negative int (positive fixint / uint8 / 16 / 32 / 64)."""
    return 1 if v < 128 else 2 if v < 1 << 8 else 3 if v < 1 << 16 else 5 if v < 1 << 32 else 9


@dataclass(frozen=True)
class Plan:
    """What a payload of one spec must look like, derived once per spec from local facts only.

    ``offsets[i][f]`` is where tensor ``i``'s part of field ``f`` starts inside that field's bin; field
    ``f`` is present on the wire iff ``f in totals``.
    """

    tensors: tuple[TensorSpec, ...]
    sizes: tuple[FieldSizes, ...]
    offsets: tuple[dict[str, int], ...]
    totals: dict[str, int]
    keys: frozenset[str]
    max_nbytes: int
    max_bin_len: int
    max_str_len: int
    max_map_len: int


def _sizes_of(s: FieldSizes) -> dict[str, int]:
    return {F_INDICES: s.indices, F_VALUES: s.values, F_SCALE: s.scale}


@lru_cache(maxsize=32)
def _plan(
    tensors: tuple[TensorSpec, ...], strategy: str, index_codec: str, value_codec: str, layout_len: int
) -> Plan:
    sizes = tuple(field_sizes(t, index_codec, value_codec) for t in tensors)
    running = dict.fromkeys(FIELD_KEYS, 0)
    offsets: list[dict[str, int]] = []
    for s in sizes:
        offsets.append(dict(running))
        for key, n in _sizes_of(s).items():
            running[key] += n
    # Values are always present (k >= 1); indices only if some tensor is sparse, scales only if the value
    # codec has them. An absent field is never sent as an empty bin: every byte on the wire carries data.
    totals = {F_VALUES: running[F_VALUES]}
    if any(not t.dense for t in tensors):
        totals[F_INDICES] = running[F_INDICES]
    if running[F_SCALE]:
        totals[F_SCALE] = running[F_SCALE]
    totals = {key: totals[key] for key in FIELD_KEYS if key in totals}
    keys = (*HEADER_KEYS, *totals)
    strategy_len = len(strategy.encode())
    # Exact: the encoding of a valid payload with the longest run id and peer id and a uint64 step.
    max_nbytes = (
        1  # fixmap header: at most 10 keys
        + sum(_str_nbytes(len(k)) for k in keys)
        + _uint_nbytes(FORMAT_VERSION)
        + _bin_nbytes(MAX_RUN_ID_LEN)
        + _MAX_STEP_NBYTES
        + _str_nbytes(MAX_PEER_ID_LEN)
        + _str_nbytes(strategy_len)
        + _bin_nbytes(layout_len)
        + _bin_nbytes(DIGEST_LEN)
        + sum(_bin_nbytes(n) for n in totals.values())
    )
    return Plan(
        tensors=tensors,
        sizes=sizes,
        offsets=tuple(offsets),
        totals=totals,
        keys=frozenset(keys),
        max_nbytes=max_nbytes,
        max_bin_len=max(*totals.values(), MAX_RUN_ID_LEN, layout_len, DIGEST_LEN),
        max_str_len=max(MAX_PEER_ID_LEN, strategy_len, *(len(k) for k in keys)),
        max_map_len=len(keys) + _SPARE_MAP_ENTRIES,
    )


def plan_for(spec: PayloadSpec) -> Plan:
    return _plan(spec.tensors, spec.strategy, spec.index_codec, spec.value_codec, len(spec.layout_digest))


def max_encoded_nbytes(spec: PayloadSpec) -> int:
    """Exact size of the largest valid encoded payload: the cap to apply to a stream before reading it."""
    return plan_for(spec).max_nbytes


def short(text: str) -> str:
    """Keep peer-controlled text in error details (and logs) bounded."""
    return text if len(text) <= _DETAIL_MAX else text[: _DETAIL_MAX - 3] + "..."


def label(key: object) -> str:
    """``'d' (values)`` for a known key, the bounded repr otherwise: details stay readable without names."""
    name = KEY_NAMES.get(key) if isinstance(key, str) else None
    return repr(key) if name is None else f"{key!r} ({name})"


def _reject_ext(code: int, data: bytes) -> Any:
    raise PayloadError("malformed", f"msgpack ext type {code} is not allowed")


def _unique_pairs(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    # A repeated key would let two different byte strings carry one content, or hide a field: reject it.
    out = dict(pairs)
    if len(out) != len(pairs):
        raise PayloadError("schema", "repeated key in a msgpack map")
    return out


def unpack(data: bytes | bytearray, plan: Plan) -> Any:
    """Parse with every msgpack limit set from the spec; any parser failure becomes ``malformed``.

    No valid payload holds an array, a nested map or an ext value, so arrays and ext are refused by the
    parser itself (length 0) and the only map is bounded by the key count: a hostile document cannot make
    the parser build more than a handful of objects besides the bins, whose sizes are capped too.
    """
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
    missing = [label(k) for k in sorted(expected - found)]
    extra = sorted(label(k) for k in found - expected)
    return short(f"missing [{', '.join(missing)}], unexpected [{', '.join(extra)}]")


def _field(obj: dict[str, Any], key: str, kind: type) -> Any:
    value = obj[key]
    # type() rather than isinstance: msgpack booleans are ints to isinstance.
    if type(value) is not kind:
        raise PayloadError(
            "schema", f"header field {label(key)} must be {kind.__name__}, got {type(value).__name__}"
        )
    return value


def check_header(
    obj: Any,
    spec: PayloadSpec,
    plan: Plan,
    *,
    run_id: bytes,
    sender: str | None,
    step: int | None,
) -> Header:
    """Schema, version, run, peer, layout, settings and step checks; the field bins are left to
    :func:`check_fields`."""
    if type(obj) is not dict:
        raise PayloadError("schema", f"payload must be a map, got {type(obj).__name__}")
    for key in (K_VERSION, LEGACY_VERSION_KEY):
        claimed = obj.get(key)
        if type(claimed) is int and claimed != FORMAT_VERSION:
            raise PayloadError("version", f"format version {claimed}, expected {FORMAT_VERSION}")
    if obj.keys() != plan.keys:
        raise PayloadError("schema", "keys: " + _describe_keys(set(obj), plan.keys))
    version = _field(obj, K_VERSION, int)
    got_run = _field(obj, K_RUN_ID, bytes)
    got_step = _field(obj, K_STEP, int)
    peer_id = _field(obj, K_PEER_ID, str)
    strategy = _field(obj, K_STRATEGY, str)
    layout = _field(obj, K_LAYOUT, bytes)
    settings = _field(obj, K_SETTINGS, bytes)
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
    return Header(
        run_id=got_run,
        step=got_step,
        peer_id=peer_id,
        strategy=strategy,
        layout_digest=layout,
        settings_digest=settings,
        version=version,
    )


@dataclass(frozen=True)
class TensorFields:
    """One tensor's slices of the field bins (zero-copy views); None where the spec has no such field."""

    indices: memoryview | None
    values: memoryview
    scale: memoryview | None


def check_fields(obj: dict[str, Any], plan: Plan) -> list[TensorFields]:
    """Field types and exact byte lengths, then the deterministic split into per-tensor slices.

    The key set was checked by :func:`check_header`. Each bin's length must equal the sum over the local
    spec's tensors, so every tensor's slice has exactly its expected length before any tensor work. A peer
    with another tensor list (and forged digests) fails here as ``length``: no per-tensor count exists.
    """
    views: dict[str, memoryview] = {}
    for key, expected in plan.totals.items():
        field = obj[key]
        if type(field) is not bytes:
            raise PayloadError("dtype", f"field {label(key)}: must be bin, got {type(field).__name__}")
        if len(field) != expected:
            raise PayloadError(
                "length",
                f"field {label(key)}: {len(field)} bytes, expected {expected} "
                f"for the {len(plan.tensors)} tensors of the local spec",
            )
        views[key] = memoryview(field)

    out: list[TensorFields] = []
    for t, s, at in zip(plan.tensors, plan.sizes, plan.offsets, strict=True):
        out.append(
            TensorFields(
                indices=None if t.dense else views[F_INDICES][at[F_INDICES] : at[F_INDICES] + s.indices],
                values=views[F_VALUES][at[F_VALUES] : at[F_VALUES] + s.values],
                scale=views[F_SCALE][at[F_SCALE] : at[F_SCALE] + s.scale] if F_SCALE in views else None,
            )
        )
    return out

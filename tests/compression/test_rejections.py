"""Every rejection class of threats.md (W1, W2, W5, B8) raises PayloadError with its reason label."""

from __future__ import annotations

import struct
from typing import Any

import msgpack
import numpy as np
import pytest
import torch
from compression_fixtures import (
    PEER,
    RUN_ID,
    SMALL_SHAPES,
    STEP,
    get_part,
    header_for,
    random_payload,
    repack,
    set_part,
    small_spec,
    spec_from_shapes,
    valid_bytes,
)
from distro_node.compression.envelope import (
    F_INDICES,
    F_SCALE,
    F_VALUES,
    K_LAYOUT,
    K_PEER_ID,
    K_RUN_ID,
    K_SETTINGS,
    K_STEP,
    K_VERSION,
    LEGACY_VERSION_KEY,
)
from distro_node.compression.errors import REASONS, PayloadError
from distro_node.compression.payload import Header, Payload, PayloadSpec, SparseTensor
from distro_node.compression.wire import decode, encode, max_encoded_nbytes


def reject(data: bytes, spec: PayloadSpec, **kwargs: Any) -> PayloadError:
    kwargs.setdefault("run_id", RUN_ID)
    with pytest.raises(PayloadError) as err:
        decode(data, spec, **kwargs)
    assert err.value.reason in REASONS
    return err.value


def with_tensor(payload: Payload, name: str, indices: np.ndarray | None, values: np.ndarray) -> Payload:
    tensors = dict(payload.tensors)
    tensors[name] = SparseTensor(
        values=torch.from_numpy(values.astype(np.float32)),
        indices=None if indices is None else torch.from_numpy(indices.astype(np.int64)),
    )
    return Payload(tensors=tensors)


SPEC = small_spec()


def test_valid_payload_accepted() -> None:
    header, payload = decode(
        valid_bytes(SPEC), SPEC, run_id=RUN_ID, sender=PEER, step=STEP, max_value_norm=1e3
    )
    assert header.peer_id == PEER and set(payload.tensors) == {t.name for t in SPEC.tensors}


# ---- W1: malformed envelopes -------------------------------------------------------------------------------


@pytest.mark.parametrize("cut", [0, 1, 2, 10, 100, -100, -1])
def test_truncated(cut: int) -> None:
    assert reject(valid_bytes(SPEC)[:cut], SPEC).reason == "malformed"


def test_trailing_bytes() -> None:
    assert reject(valid_bytes(SPEC) + b"\x00", SPEC).reason == "malformed"


def test_over_the_size_cap_before_parsing() -> None:
    data = valid_bytes(SPEC) + b"\x00" * max_encoded_nbytes(SPEC)
    assert reject(data, SPEC).reason == "too_large"


def test_map_header_bit_flip() -> None:
    data = valid_bytes(SPEC)
    assert data[0] == 0x89  # fixmap with 9 keys: 7 header keys, indices and values
    assert reject(bytes([0x8A]) + data[1:], SPEC).reason == "malformed"
    assert reject(bytes([0x88]) + data[1:], SPEC).reason == "malformed"


@pytest.mark.parametrize(
    "prefix",
    [
        b"\xc6\xff\xff\xff\xff",  # bin32 of 4 GiB
        b"\xc6\x00\x00\x00\x01",  # bin32 of 2**24 * ... (16 MiB)
        b"\xdb\xff\xff\xff\xff",  # str32 of 4 GiB
        b"\xdd\xff\xff\xff\xff",  # array32 of 2**32 - 1 items
        b"\xdf\xff\xff\xff\xff",  # map32 of 2**32 - 1 pairs
        b"\xc9\xff\xff\xff\xff\x01",  # ext32
        b"\xc1",  # never-used byte
    ],
)
def test_huge_length_fields_at_top(prefix: bytes) -> None:
    assert reject(prefix + b"\x00" * 16, SPEC).reason == "malformed"


@pytest.mark.parametrize("key", [F_INDICES, F_VALUES, K_RUN_ID])
def test_huge_length_field_inside_payload(key: str) -> None:
    data = valid_bytes(SPEC)
    marker = b"\xa1" + key.encode()  # the one-letter key, then the field's bin header
    at = data.index(marker) + len(marker)
    header_len = {0xC4: 2, 0xC5: 3, 0xC6: 5}[data[at]]
    forged = data[:at] + b"\xc6\xff\xff\xff\xff" + data[at + header_len :]
    assert reject(forged, SPEC).reason == "malformed"


def test_deep_nesting() -> None:
    spec = spec_from_shapes([("w", (512, 512))])  # a cap large enough that depth, not size, is tested
    nested = b"\x81\xa1a" * 2000 + b"\xc0"
    assert len(nested) < max_encoded_nbytes(spec)
    assert reject(nested, spec).reason == "malformed"
    assert reject(b"\x91" * 2000 + b"\xc0", spec).reason == "malformed"  # arrays are not allowed at all


def test_ext_type_rejected() -> None:
    data = msgpack.packb({K_VERSION: msgpack.ExtType(1, b"x")})
    assert reject(data, SPEC).reason == "malformed"


def test_non_string_map_key() -> None:
    assert reject(msgpack.packb({1: 2}), SPEC).reason == "malformed"


def test_repeated_map_key() -> None:
    good = msgpack.unpackb(valid_bytes(SPEC))
    # one pair more than the valid map, the step key twice: the second would silently win in a plain dict
    body = b"".join(msgpack.packb(k) + msgpack.packb(v) for k, v in good.items())
    data = bytes([0x80 + len(good) + 1]) + body + msgpack.packb(K_STEP) + msgpack.packb(STEP + 1)
    assert reject(data, SPEC).reason == "schema"


@pytest.mark.parametrize("doc", [[], 5, "x", b"x", None, True])
def test_top_level_not_a_map(doc: object) -> None:
    assert reject(msgpack.packb(doc, use_bin_type=True), SPEC).reason == "schema"


@pytest.mark.parametrize("key", ["extra", "tensors", LEGACY_VERSION_KEY + "_", "x" * 40])
def test_extra_top_level_key(key: str) -> None:
    err = reject(repack(valid_bytes(SPEC), lambda d: d.update({key: 1})), SPEC)
    assert err.reason == "schema" and key in err.detail


@pytest.mark.parametrize(("key", "name"), [(K_SETTINGS, "settings_digest"), (F_INDICES, "indices")])
def test_missing_top_level_key(key: str, name: str) -> None:
    err = reject(repack(valid_bytes(SPEC), lambda d: d.pop(key)), SPEC)
    assert err.reason == "schema" and repr(key) in err.detail and name in err.detail


def test_field_keys_follow_the_spec() -> None:
    # fp32 has no scales: a scale field is an unexpected key, not ignored padding
    err = reject(repack(valid_bytes(SPEC), lambda d: d.update({F_SCALE: b"\0" * 4})), SPEC)
    assert err.reason == "schema" and "scale" in err.detail
    # int8 has scales: leaving them out is a missing key
    int8 = small_spec(value_codec="int8")
    err = reject(repack(valid_bytes(int8), lambda d: d.pop(F_SCALE)), int8)
    assert err.reason == "schema" and "scale" in err.detail
    # an all-dense spec carries no index field at all, not even an empty one
    dense = spec_from_shapes([("a", (4,)), ("b", (2, 2))], k=4, chunk=4)
    assert all(t.dense for t in dense.tensors) and F_INDICES not in msgpack.unpackb(valid_bytes(dense))
    err = reject(repack(valid_bytes(dense), lambda d: d.update({F_INDICES: b""})), dense)
    assert err.reason == "schema" and "indices" in err.detail


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (K_STEP, "7"),
        (K_STEP, True),
        (K_STEP, 7.0),
        (K_RUN_ID, RUN_ID.hex()),
        (K_PEER_ID, PEER.encode()),
        (K_LAYOUT, None),
        (K_SETTINGS, {}),
        (K_VERSION, "2"),
    ],
)
def test_wrong_header_types(key: str, value: object) -> None:
    err = reject(repack(valid_bytes(SPEC), lambda d: d.update({key: value})), SPEC)
    assert err.reason == "schema" and repr(key) in err.detail


@pytest.mark.parametrize("version", [1, 3])
def test_other_version(version: int) -> None:
    err = reject(repack(valid_bytes(SPEC), lambda d: d.update({K_VERSION: version})), SPEC)
    assert err.reason == "version"


def test_format_1_payload_is_a_version_error() -> None:
    """A v1 peer in a v2 swarm: its long key names must still give "version", the actionable reason."""
    v1 = {
        LEGACY_VERSION_KEY: 1,
        "run_id": RUN_ID,
        "step": STEP,
        "peer_id": PEER,
        "strategy": SPEC.strategy,
        "layout_digest": SPEC.layout_digest,
        "settings_digest": SPEC.settings_digest(),
        "tensors": {t.name: {"val": b""} for t in SPEC.tensors},
    }
    err = reject(msgpack.packb(v1, use_bin_type=True), SPEC)
    assert err.reason == "version" and "1" in err.detail


@pytest.mark.parametrize(
    ("key", "value"), [(F_VALUES, "abc"), (F_VALUES, {}), (F_INDICES, 5), (F_INDICES, None)]
)
def test_field_of_wrong_type(key: str, value: object) -> None:
    err = reject(repack(valid_bytes(SPEC), lambda d: d.update({key: value})), SPEC)
    assert err.reason == "dtype" and repr(key) in err.detail


def test_array_anywhere_is_refused_by_the_parser() -> None:
    # no valid payload holds an array, so the parser refuses them outright (max_array_len=0)
    for key in (F_VALUES, F_INDICES, K_STEP):
        err = reject(repack(valid_bytes(SPEC), lambda d, key=key: d.update({key: [1.0, 2.0]})), SPEC)
        assert err.reason == "malformed"


@pytest.mark.parametrize(
    ("shapes", "reason"),
    [
        (SMALL_SHAPES[:-1], "length"),
        (SMALL_SHAPES[1:], "length"),
        # more values than the largest field the spec allows: refused by the parser's bin cap
        ((*SMALL_SHAPES, ("ghost", (5,))), "malformed"),
    ],
)
def test_tensor_set(shapes: tuple[tuple[str, tuple[int, ...]], ...], reason: str) -> None:
    """A peer with one tensor fewer or more, even behind forged digests, cannot line up its bytes."""
    other = spec_from_shapes(shapes)
    data = encode(header_for(SPEC), random_payload(other), other, allow_invalid=True)
    assert reject(data, SPEC).reason == reason


# ---- W2: bad content ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "name", "delta", "reason"),
    [
        (F_VALUES, "layer.0.norm.weight", -1, "length"),
        (F_VALUES, "gain", -4, "length"),
        (F_INDICES, "layer.0.norm.weight", -1, "length"),
        (F_INDICES, "embed.weight", 3, "length"),
        # the values bin is the largest field, and the parser's bin cap is exactly the largest field
        (F_VALUES, "gain", 1, "malformed"),
    ],
)
def test_wrong_byte_lengths(field: str, name: str, delta: int, reason: str) -> None:
    """One tensor's part short or long: the field's total is off, so nothing is split or decoded."""

    def edit(d: dict[str, Any]) -> None:
        old = get_part(d, SPEC, name, field)
        set_part(d, SPEC, name, field, old[:delta] if delta < 0 else old + b"\0" * delta)

    err = reject(repack(valid_bytes(SPEC), edit), SPEC)
    assert err.reason == reason
    if reason == "length":
        assert repr(field) in err.detail and "expected" in err.detail


@pytest.mark.parametrize(
    ("value_codec", "reason"),
    [("fp32", "too_large"), ("bf16", "too_large"), ("1bit", "length"), ("int8", None)],
)
def test_values_sized_for_another_codec(value_codec: str, reason: str | None) -> None:
    """Value bytes of another dtype (digests forged) never get past the size cap and length checks."""
    spec = small_spec(value_codec="int8")
    other = small_spec(value_codec=value_codec)

    def edit(d: dict[str, Any]) -> None:
        d[F_VALUES] = msgpack.unpackb(valid_bytes(other))[F_VALUES]

    data = repack(valid_bytes(spec), edit)
    if reason is None:
        decode(data, spec, run_id=RUN_ID)
    else:
        assert reject(data, spec).reason == reason


def test_wrong_scale_length() -> None:
    spec = small_spec(value_codec="int8")
    name = spec.tensors[0].name
    err = reject(repack(valid_bytes(spec), lambda d: set_part(d, spec, name, F_SCALE, b"\0" * 3)), spec)
    assert err.reason == "length" and "scale" in err.detail


U16_SPEC = spec_from_shapes([("w", (20, 15))], k=3, chunk=20)  # 300 positions per chunk: u16 indices


@pytest.mark.parametrize("bad", [300, 0xFFFF, 0x8000])
def test_index_out_of_range_u16(bad: int) -> None:
    assert U16_SPEC.tensors[0].chunk_numel == 300
    data = valid_bytes(U16_SPEC)

    def edit(d: dict[str, Any]) -> None:
        idx = bytearray(d[F_INDICES])  # one tensor: the field is exactly its indices
        idx[4:6] = bad.to_bytes(2, "little")  # last index of chunk 0
        d[F_INDICES] = bytes(idx)

    err = reject(repack(data, edit), U16_SPEC)
    assert err.reason == "index_range" and "'w'" in err.detail


@pytest.mark.parametrize("codec", ["auto", "packed"])
def test_index_out_of_range_small_chunk(codec: str) -> None:
    spec = small_spec(index_codec=codec)
    bias = next(t for t in spec.tensors if t.name == "bias")
    assert bias.chunk_numel == 5 and not bias.dense
    payload = random_payload(spec)
    bad = with_tensor(payload, "bias", np.array([[0, 1, 2, 7]]), np.ones((1, 4)))
    with pytest.raises(ValueError):
        encode(header_for(spec), bad, spec)
    data = encode(header_for(spec), bad, spec, allow_invalid=True)
    err = reject(data, spec)
    assert err.reason == "index_range" and "bias" in err.detail


def test_enum_rank_out_of_range() -> None:
    spec = spec_from_shapes([("w", (32, 32))], k=2, chunk=16, index_codec="enum")
    # 4 chunks, C(256, 2) = 32640 -> 15 bits per chunk

    def edit(d: dict[str, Any]) -> None:
        idx = bytearray(d[F_INDICES])
        idx[0], idx[1] = 0xFF, 0x7F  # rank 32767 >= 32640 in chunk 0
        d[F_INDICES] = bytes(idx)

    err = reject(repack(valid_bytes(spec), edit), spec)
    assert err.reason == "index_range" and "chunk 0" in err.detail


@pytest.mark.parametrize(("value_codec", "bad"), [("fp32", np.nan), ("fp32", np.inf), ("bf16", -np.inf)])
def test_non_finite_values(value_codec: str, bad: float) -> None:
    spec = small_spec(value_codec=value_codec)
    payload = random_payload(spec)
    name = spec.tensors[2].name
    values = payload.tensors[name].values.numpy().copy()
    values[1, 2] = bad
    payload = with_tensor(payload, name, payload.tensors[name].indices.numpy(), values)
    with pytest.raises(ValueError):
        encode(header_for(spec), payload, spec)
    err = reject(encode(header_for(spec), payload, spec, allow_invalid=True), spec)
    assert err.reason == "non_finite" and name in err.detail


def test_non_finite_int8_scale() -> None:
    spec = small_spec(value_codec="int8")
    name = spec.tensors[0].name
    nan = struct.pack("<f", float("nan"))
    err = reject(repack(valid_bytes(spec), lambda d: set_part(d, spec, name, F_SCALE, nan)), spec)
    assert err.reason == "non_finite" and name in err.detail and "values" in err.detail


def test_error_names_the_tensor_in_the_middle_of_a_field() -> None:
    """Content errors name the tensor whose slice holds the bad byte, found from the local spec alone."""
    spec = small_spec(value_codec="fp32")
    name = "conv.weight"  # neither the first nor the last tensor
    part = bytearray(get_part(msgpack.unpackb(valid_bytes(spec)), spec, name, F_VALUES))
    part[4:8] = struct.pack("<f", float("inf"))
    err = reject(repack(valid_bytes(spec), lambda d: set_part(d, spec, name, F_VALUES, bytes(part))), spec)
    assert err.reason == "non_finite" and repr(name) in err.detail


def test_norm_bound() -> None:
    data = encode(header_for(SPEC), random_payload(SPEC, scale=1e6), SPEC)
    assert reject(data, SPEC, max_value_norm=1e3).reason == "norm"
    decode(data, SPEC, run_id=RUN_ID, max_value_norm=1e9)


# ---- B8: duplicates and order ------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["auto", "packed"])
def test_duplicate_index(codec: str) -> None:
    spec = small_spec(index_codec=codec)
    name = spec.tensors[0].name
    payload = random_payload(spec)
    idx = np.sort(payload.tensors[name].indices.numpy(), axis=1)
    idx[3, 2] = idx[3, 1]
    payload = with_tensor(payload, name, idx, payload.tensors[name].values.numpy())
    with pytest.raises(ValueError):
        encode(header_for(spec), payload, spec)
    err = reject(encode(header_for(spec), payload, spec, allow_invalid=True), spec)
    assert err.reason == "duplicate_index" and name in err.detail and "chunk 3" in err.detail


def test_unsorted_indices() -> None:
    name = "w"

    def edit(d: dict[str, Any]) -> None:
        idx = bytearray(get_part(d, U16_SPEC, name, F_INDICES))
        idx[0:2], idx[2:4] = idx[2:4], idx[0:2]  # swap the first two indices of chunk 0
        set_part(d, U16_SPEC, name, F_INDICES, bytes(idx))

    err = reject(repack(valid_bytes(U16_SPEC), edit), U16_SPEC)
    assert err.reason == "index_order" and "chunk 0" in err.detail


def test_enum_cannot_carry_duplicates() -> None:
    spec = small_spec(index_codec="enum")
    name = spec.tensors[0].name
    payload = random_payload(spec)
    idx = np.sort(payload.tensors[name].indices.numpy(), axis=1)
    idx[0, 1] = idx[0, 0]
    payload = with_tensor(payload, name, idx, payload.tensors[name].values.numpy())
    with pytest.raises(ValueError, match="enum"):
        encode(header_for(spec), payload, spec, allow_invalid=True)


# ---- W5 and bindings: run, peer, layout, settings, step ----------------------------------------------------


def encode_with(spec: PayloadSpec, **changes: Any) -> bytes:
    h = header_for(spec)
    header = Header(**{**h.__dict__, **changes})
    return encode(header, random_payload(spec), spec, allow_invalid=True)


def test_wrong_run_id() -> None:
    assert reject(encode_with(SPEC, run_id=b"\x02" * 32), SPEC).reason == "run_id"
    assert reject(valid_bytes(SPEC), SPEC, run_id=b"\x03" * 32).reason == "run_id"


def test_wrong_peer() -> None:
    assert reject(valid_bytes(SPEC), SPEC, sender="12D3KooWSomeoneElse").reason == "peer_id"


def test_wrong_layout_digest() -> None:
    assert reject(encode_with(SPEC, layout_digest=b"\x00" * 32), SPEC).reason == "layout"
    other = spec_from_shapes([("embed.weight", (128, 32))])
    assert reject(
        valid_bytes(SPEC), PayloadSpec(**{**SPEC.__dict__, "layout_digest": other.layout_digest})
    ).reason == ("layout")


def test_wrong_settings() -> None:
    assert reject(encode_with(SPEC, settings_digest=b"\x00" * 32), SPEC).reason == "settings"
    assert reject(encode_with(SPEC, strategy="diloco"), SPEC).reason == "settings"
    # bf16 fields are smaller than fp32 ones, so they parse and the digest is what tells them apart
    assert reject(valid_bytes(small_spec(value_codec="bf16")), SPEC).reason == "settings"
    other_k = PayloadSpec(**{**SPEC.__dict__, "settings": {"k": 5, "chunk": 16}})
    assert reject(valid_bytes(SPEC), other_k).reason == "settings"


def test_step_policy() -> None:
    assert reject(valid_bytes(SPEC), SPEC, step=STEP + 1).reason == "step"
    assert reject(encode_with(SPEC, step=-1), SPEC).reason == "step"

"""Wire API contracts beyond round trips: accepted input types, local-mistake errors, output ownership."""

from __future__ import annotations

import warnings
from typing import Any

import msgpack
import pytest
import torch
from compression_fixtures import (
    RUN_ID,
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
    F_VALUES,
    HEADER_KEYS,
    K_VERSION,
    MAX_PEER_ID_LEN,
    MAX_RUN_ID_LEN,
)
from distro_node.compression.errors import PayloadError
from distro_node.compression.indices import INDEX_CODECS
from distro_node.compression.payload import FORMAT_VERSION, Header, Payload, PayloadSpec, SparseTensor
from distro_node.compression.sizes import payload_body_nbytes
from distro_node.compression.values import VALUE_CODECS
from distro_node.compression.wire import decode, encode, max_encoded_nbytes

SPEC = small_spec()


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview])
def test_bytes_like_input(wrap: Any) -> None:
    _, payload = decode(wrap(valid_bytes(SPEC)), SPEC, run_id=RUN_ID)
    assert set(payload.tensors) == {t.name for t in SPEC.tensors}


def test_non_bytes_input_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        decode("not bytes", SPEC, run_id=RUN_ID)  # type: ignore[arg-type]


@pytest.mark.parametrize("index_codec", sorted(INDEX_CODECS))
@pytest.mark.parametrize("value_codec", sorted(VALUE_CODECS))
def test_decoded_tensors_are_owned_and_writable(index_codec: str, value_codec: str) -> None:
    spec = small_spec(index_codec, value_codec)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns when wrapping read-only numpy buffers
        _, payload = decode(valid_bytes(spec), spec, run_id=RUN_ID)
    for t in payload.tensors.values():
        assert t.values.dtype == torch.float32
        t.values.add_(1.0)
        if t.indices is not None:
            assert t.indices.dtype == torch.int64
            t.indices.add_(0)


def test_one_bit_padding_must_be_zero() -> None:
    spec = small_spec(value_codec="1bit")
    name = "bias"  # 4 values -> one byte, 4 padding bits

    def edit(d: dict[str, Any]) -> None:
        set_part(d, spec, name, F_VALUES, bytes([get_part(d, spec, name, F_VALUES)[0] | 0x80]))

    with pytest.raises(PayloadError) as err:
        decode(repack(valid_bytes(spec), edit), spec, run_id=RUN_ID)
    assert err.value.reason == "malformed" and name in err.value.detail


def test_encode_refuses_header_not_matching_spec() -> None:
    h = header_for(SPEC)
    for change in ({"layout_digest": b"\0" * 32}, {"strategy": "x"}, {"step": -1}, {"run_id": b"r" * 65}):
        with pytest.raises(ValueError, match="header"):
            encode(Header(**{**h.__dict__, **change}), random_payload(SPEC), SPEC)


def test_encode_refuses_wrong_structure() -> None:
    payload = random_payload(SPEC)
    name = SPEC.tensors[0].name
    missing = Payload(tensors={k: v for k, v in payload.tensors.items() if k != name})
    with pytest.raises(ValueError, match="differ"):
        encode(header_for(SPEC), missing, SPEC)
    t = payload.tensors[name]
    for bad in (
        SparseTensor(t.values[:, :2], t.indices),
        SparseTensor(t.values),
        SparseTensor(t.values, t.indices[:1]),
    ):
        with pytest.raises(ValueError, match=repr(name)):
            encode(header_for(SPEC), Payload(tensors={**payload.tensors, name: bad}), SPEC)


def test_format_2_layout() -> None:
    """The documented v2 layout: one flat map, one-letter keys, no tensor names anywhere on the wire."""
    doc = msgpack.unpackb(valid_bytes(SPEC))
    assert FORMAT_VERSION == 2 and doc[K_VERSION] == 2
    assert list(doc) == [*HEADER_KEYS, "i", "d"]
    assert all(len(k) == 1 for k in doc)
    data = valid_bytes(SPEC)
    assert not any(t.name.encode() in data for t in SPEC.tensors if len(t.name) > 4)
    assert sum(len(doc[k]) for k in ("i", "d")) == payload_body_nbytes(SPEC)


BIG_SPEC = spec_from_shapes([("big", (512, 512)), ("v", (3,))], k=16, chunk=16)  # bin16 and bin32 fields


@pytest.mark.parametrize(
    "spec",
    [SPEC, small_spec("enum", "int8"), small_spec("packed", "1bit"), small_spec(k=1), BIG_SPEC],
    ids=["auto-fp32", "enum-int8", "packed-1bit", "k1", "bin32"],
)
def test_size_cap_is_exact(spec: PayloadSpec) -> None:
    """max_encoded_nbytes is the size of the largest valid payload: longest run and peer ids, uint64 step."""
    header = Header(
        run_id=b"r" * MAX_RUN_ID_LEN,
        step=2**64 - 1,
        peer_id="p" * MAX_PEER_ID_LEN,
        strategy=spec.strategy,
        layout_digest=spec.layout_digest,
        settings_digest=spec.settings_digest(),
    )
    data = encode(header, random_payload(spec), spec)
    assert len(data) == max_encoded_nbytes(spec)
    got, _ = decode(data, spec, run_id=header.run_id, sender=header.peer_id, step=header.step)
    assert got == header
    # the typical payload is the body plus about 200 bytes, whatever the number of tensors
    assert len(valid_bytes(spec)) - payload_body_nbytes(spec) < 200


def test_encode_refuses_step_outside_msgpack_ints() -> None:
    h = header_for(SPEC)
    with pytest.raises(ValueError, match="step"):
        encode(Header(**{**h.__dict__, "step": 2**64}), random_payload(SPEC), SPEC, allow_invalid=True)

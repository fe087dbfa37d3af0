"""Wire API contracts beyond round trips: accepted input types, local-mistake errors, output ownership."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from compression_fixtures import RUN_ID, header_for, random_payload, repack, small_spec, valid_bytes
from distro_node.compression.errors import PayloadError
from distro_node.compression.indices import INDEX_CODECS
from distro_node.compression.payload import Header, Payload, SparseTensor
from distro_node.compression.values import VALUE_CODECS
from distro_node.compression.wire import decode, encode

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
        d["tensors"][name]["val"] = bytes([d["tensors"][name]["val"][0] | 0x80])

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

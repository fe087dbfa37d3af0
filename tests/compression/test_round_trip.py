"""Property tests: every index codec x value codec round-trips arbitrary small payloads through the wire."""

from __future__ import annotations

import numpy as np
import torch
from compression_fixtures import PEER, RUN_ID, STEP, header_for, random_payload, spec_from_shapes
from distro_node.compression.indices import INDEX_CODECS
from distro_node.compression.payload import Payload, PayloadSpec, SparseTensor
from distro_node.compression.values import VALUE_CODECS
from distro_node.compression.wire import decode, encode, max_encoded_nbytes
from hypothesis import given, settings
from hypothesis import strategies as st

shape_st = st.lists(st.integers(1, 40), min_size=0, max_size=3).map(tuple)


@st.composite
def specs(draw: st.DrawFn) -> PayloadSpec:
    shapes = draw(st.lists(shape_st, min_size=1, max_size=4))
    return spec_from_shapes(
        [(f"t{i}", s) for i, s in enumerate(shapes)],
        k=draw(st.integers(1, 8)),
        chunk=draw(st.sampled_from([3, 4, 8, 16])),
        index_codec=draw(st.sampled_from(sorted(INDEX_CODECS))),
        value_codec=draw(st.sampled_from(sorted(VALUE_CODECS))),
    )


def _canonical(indices: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(indices, axis=1)
    return np.take_along_axis(indices, order, axis=1), np.take_along_axis(values, order, axis=1)


def _check_values(codec: str, got: np.ndarray, sent: np.ndarray) -> None:
    assert got.dtype == np.float32
    if codec == "fp32":
        np.testing.assert_array_equal(got, sent)
    elif codec == "bf16":
        np.testing.assert_allclose(got, sent, rtol=2**-8, atol=0)
    elif codec == "int8":
        scale = float(np.abs(sent).max()) / 127
        assert float(np.abs(got - sent).max()) <= scale / 2 * 1.001 + 1e-30
    else:
        np.testing.assert_array_equal(got, np.where(sent >= 0, 1.0, -1.0))


@settings(max_examples=80, deadline=None)
@given(spec=specs(), seed=st.integers(0, 2**32 - 1), scale=st.sampled_from([1e-30, 1e-3, 1.0, 1e30]))
def test_round_trip(spec: PayloadSpec, seed: int, scale: float) -> None:
    payload = random_payload(spec, seed, scale)
    data = encode(header_for(spec), payload, spec)
    assert len(data) <= max_encoded_nbytes(spec)
    header, got = decode(data, spec, run_id=RUN_ID, sender=PEER, step=STEP)
    assert header == header_for(spec)
    assert list(got.tensors) == [t.name for t in spec.tensors]
    for t in spec.tensors:
        sent, back = payload.tensors[t.name], got.tensors[t.name]
        values = sent.values.numpy()
        if t.dense:
            assert back.indices is None
            if sent.indices is not None:
                _, values = _canonical(sent.indices.numpy(), values)
        else:
            assert back.indices is not None and back.indices.dtype == torch.int64
            indices, values = _canonical(sent.indices.numpy(), values)
            np.testing.assert_array_equal(back.indices.numpy(), indices)
        assert back.values.shape == (t.n_chunks, t.k)
        _check_values(spec.value_codec, back.values.numpy(), values)


@settings(max_examples=20, deadline=None)
@given(spec=specs(), seed=st.integers(0, 2**32 - 1))
def test_encoding_is_canonical(spec: PayloadSpec, seed: int) -> None:
    """Equal content gives equal bytes, whatever the order of indices the optimizer produced."""
    payload = random_payload(spec, seed)
    data = encode(header_for(spec), payload, spec)
    if spec.value_codec == "fp32":  # lossless: decoding and re-encoding reproduces the bytes
        _, decoded = decode(data, spec, run_id=RUN_ID)
        assert encode(header_for(spec), decoded, spec) == data
    flipped = Payload(
        tensors={
            name: t if t.indices is None else SparseTensor(values=t.values.flip(1), indices=t.indices.flip(1))
            for name, t in payload.tensors.items()
        }
    )
    assert encode(header_for(spec), flipped, spec) == data


def test_dense_tensor_accepts_permuted_indices() -> None:
    spec = spec_from_shapes([("v", (4,))], k=4, chunk=4)
    values = torch.tensor([[10.0, 20.0, 30.0, 40.0]])
    payload = Payload(tensors={"v": SparseTensor(values, torch.tensor([[2, 0, 3, 1]]))})
    _, got = decode(encode(header_for(spec), payload, spec), spec, run_id=RUN_ID)
    assert got.tensors["v"].indices is None
    assert got.tensors["v"].values.tolist() == [[20.0, 40.0, 10.0, 30.0]]

"""Test vectors from reference/algorithm.md for chunking and the DCT."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.fft
import torch
from distro_node.compression.dct import dct_matrix, from_chunks, to_chunks
from distro_node.compression.layout import model_layout, split_size, tensor_layout


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        (2048, 64),
        (8192, 64),
        (32000, 64),
        (50304, 64),
        (50280, 60),
        (50257, 29),
        (100, 50),
        (50, 50),
        (127, 1),
    ],
)
def test_chunk_rule_target_64(size: int, expected: int) -> None:
    assert split_size(size, 64) == expected


@pytest.mark.parametrize(
    ("size", "target", "expected"), [(12, 5, 4), (100, 7, 5), (100, 26, 25), (100, 101, 100)]
)
def test_split_examples(size: int, target: int, expected: int) -> None:
    assert split_size(size, target) == expected


@pytest.mark.parametrize("n", [1, 2, 4, 7, 29, 60, 64])
def test_dct_matrix_matches_scipy_and_is_orthonormal(n: int) -> None:
    d = dct_matrix(n).double().numpy()
    ref = scipy.fft.dct(np.eye(n), type=2, norm="ortho", axis=0)
    np.testing.assert_allclose(d, ref, atol=1e-6)
    np.testing.assert_allclose(d @ d.T, np.eye(n), atol=1e-5)


def test_dct4_first_row() -> None:
    row0 = scipy.fft.dct(np.eye(4), norm="ortho")[0]
    np.testing.assert_allclose(row0, [0.5, 0.6533, 0.5, 0.2706], atol=1e-4)
    np.testing.assert_allclose(dct_matrix(4).T[0].numpy(), row0, atol=1e-6)


def test_1d_transform_of_arange8() -> None:
    layout = tensor_layout("v", (8,), 64)
    coeffs = to_chunks(torch.arange(8, dtype=torch.float32), layout)
    expected = [9.8995, -6.4423, 0, -0.67345, 0, -0.20090, 0, -0.050702]
    np.testing.assert_allclose(coeffs.reshape(-1).numpy(), expected, atol=1e-4)


@pytest.mark.parametrize(
    "shape", [(), (5,), (128,), (127,), (96, 40), (64, 64), (3, 32, 48), (2, 3, 20, 30), (100, 50257 // 29)]
)
def test_chunk_round_trip_and_parseval(shape: tuple[int, ...]) -> None:
    layout = tensor_layout("t", shape, 16)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    coeffs = to_chunks(x, layout)
    assert coeffs.shape == (layout.n_chunks, layout.chunk_numel)
    assert coeffs.dtype == torch.float32
    back = from_chunks(coeffs, layout)
    assert back.shape == x.shape
    torch.testing.assert_close(back, x, atol=1e-5, rtol=0)
    np.testing.assert_allclose(float((coeffs.double() ** 2).sum()), float((x.double() ** 2).sum()), rtol=1e-5)


def test_layout_digest_depends_on_shapes() -> None:
    a = model_layout([("w", (64, 64))])
    b = model_layout([("w", (64, 32))])
    assert a.digest() != b.digest()
    assert a.digest() == model_layout([("w", (64, 64))]).digest()

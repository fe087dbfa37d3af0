"""The sparse inverse DCT equals the dense one on the scattered block, for every layout kind."""

from __future__ import annotations

import pytest
import torch
from distro_node.compression.dct import from_chunks, from_sparse_chunks, sparse_is_cheaper
from distro_node.compression.layout import tensor_layout


@pytest.mark.parametrize("shape", [(128, 256), (3, 64, 128), (2, 2, 12, 20), (100,), (64,), ()])
def test_sparse_inverse_matches_dense(shape: tuple[int, ...]) -> None:
    gen = torch.Generator().manual_seed(7)
    layout = tensor_layout("t", shape, 64)
    m = min(5, layout.chunk_numel)
    idx = torch.stack(
        [torch.randperm(layout.chunk_numel, generator=gen)[:m] for _ in range(layout.n_chunks)]
    )
    val = torch.randn(layout.n_chunks, m, generator=gen)
    dense = torch.zeros(layout.n_chunks, layout.chunk_numel).scatter_(1, idx, val)
    expected = from_chunks(dense, layout)
    got = from_sparse_chunks(idx, val, layout)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-5)


def test_repeated_indices_add_up() -> None:
    layout = tensor_layout("t", (64, 64), 64)
    idx = torch.tensor([[3, 3, 9]])
    val = torch.tensor([[1.0, 2.0, -1.0]])
    dense = torch.zeros(1, 4096)
    dense[0, 3], dense[0, 9] = 3.0, -1.0
    expected = from_chunks(dense, layout)
    torch.testing.assert_close(from_sparse_chunks(idx, val, layout), expected, atol=1e-6, rtol=0)


def test_cost_rule() -> None:
    layout = tensor_layout("t", (64, 64), 64)
    assert sparse_is_cheaper(32, layout)
    assert not sparse_is_cheaper(100, layout)

"""Top-k selection and the DeMo aggregation rule."""

from __future__ import annotations

import pytest
import torch
from distro_node.compression.errors import PayloadError
from distro_node.compression.payload import SparseTensor, TensorSpec
from distro_node.optimizer.aggregate import Aggregator, check_entry, mean_dense
from distro_node.optimizer.topk import clamp_k, densify, select_topk


def sparse(indices: list[int], values: list[float]) -> SparseTensor:
    return SparseTensor(values=torch.tensor([values]), indices=torch.tensor([indices]))


def test_aggregation_example_of_algorithm_md() -> None:
    spec = TensorSpec("w", 1, 8, 2)
    entries = [("B", sparse([1, 3], [3.0, 7.0])), ("A", sparse([1, 2], [1.0, 5.0]))]
    out = Aggregator().combine(spec, sorted(entries), torch.device("cpu"))
    assert out.tolist() == [[0.0, 2.0, 5.0, 7.0, 0.0, 0.0, 0.0, 0.0]]


def test_aggregation_dense_is_plain_mean() -> None:
    spec = TensorSpec("w", 2, 2, 2)
    a = SparseTensor(values=torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
    b = SparseTensor(values=torch.tensor([[3.0, 0.0], [5.0, -4.0]]))
    out = Aggregator().combine(spec, [("a", a), ("b", b)], torch.device("cpu"))
    assert out.tolist() == [[2.0, 1.0], [4.0, 0.0]]
    assert mean_dense([("a", a), ("b", b)], torch.device("cpu")).tolist() == [[2.0, 1.0], [4.0, 0.0]]


def test_select_topk_by_magnitude_sorted_indices() -> None:
    coeffs = torch.tensor([[0.1, -5.0, 0.3, 4.0], [2.0, 0.0, -3.0, 1.0]])
    entry = select_topk(coeffs, 2)
    assert entry.indices is not None
    assert entry.indices.tolist() == [[1, 3], [0, 2]]
    assert entry.values.tolist() == [[-5.0, 4.0], [2.0, -3.0]]
    assert densify(entry, 4).tolist() == [[0.0, -5.0, 0.0, 4.0], [2.0, 0.0, -3.0, 0.0]]


def test_clamp_k() -> None:
    assert clamp_k(0, 64) == 1 and clamp_k(5, 4) == 4 and clamp_k(3, 4) == 3
    assert select_topk(torch.ones(2, 4), 9).indices is None


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        (sparse([1, 9], [1.0, 2.0]), "index_range"),
        (sparse([2, 2], [1.0, 2.0]), "duplicate_index"),
        (sparse([1, 2], [1.0, float("nan")]), "non_finite"),
        (sparse([1], [1.0]), "length"),
        (SparseTensor(values=torch.tensor([[1.0, 2.0]])), "schema"),
        (SparseTensor(values=torch.tensor([[1.0, 2.0]], dtype=torch.float64)), "dtype"),
    ],
)
def test_check_entry_rejects(entry: SparseTensor, reason: str) -> None:
    with pytest.raises(PayloadError) as err:
        check_entry(TensorSpec("w", 1, 8, 2), entry, "peer")
    assert err.value.reason == reason


def test_sparse_inverse_of_the_aggregate_matches_dense() -> None:
    from distro_node.compression.dct import from_chunks
    from distro_node.compression.layout import tensor_layout
    from distro_node.compression.payload import SparseTensor, TensorSpec
    from distro_node.optimizer.aggregate import Aggregator, aggregate_to_dense

    gen = torch.Generator().manual_seed(3)
    layout = tensor_layout("w", (128, 64), 64)
    spec = TensorSpec("w", layout.n_chunks, layout.chunk_numel, 4)
    entries = []
    for peer in ("a", "b", "c"):
        idx = torch.stack([torch.randperm(64, generator=gen)[:4] for _ in range(layout.n_chunks)])  # overlaps
        values = torch.randn(layout.n_chunks, 4, generator=gen)
        entries.append((peer, SparseTensor(values=values, indices=idx)))
    coeffs = Aggregator().combine(spec, entries, torch.device("cpu"))
    torch.testing.assert_close(
        aggregate_to_dense(coeffs, entries, layout), from_chunks(coeffs, layout), atol=1e-6, rtol=1e-5
    )


def test_codec_validated_payloads_skip_the_entry_checks_only_for_the_same_spec() -> None:
    from distro_node.compression.payload import Payload
    from distro_node.optimizer.aggregate import check_payloads

    spec = TensorSpec("w", 2, 8, 2)
    bad = SparseTensor(
        values=torch.tensor([[1.0, float("nan")], [0.0, 1.0]]), indices=torch.tensor([[0, 1]] * 2)
    )
    trusted = Payload(tensors={"w": bad}, validated_for=b"spec-a")
    check_payloads([spec], {"p": trusted}, b"spec-a")  # the codec vouched for it against this very spec
    with pytest.raises(PayloadError, match="non_finite"):
        check_payloads([spec], {"p": trusted}, b"spec-b")
    with pytest.raises(PayloadError, match="non_finite"):
        check_payloads([spec], {"p": Payload(tensors={"w": bad})}, b"spec-a")

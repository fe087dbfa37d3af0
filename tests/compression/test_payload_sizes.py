"""Payload arithmetic of algorithm.md for the report's 1.2B Llama, from specs alone."""

from __future__ import annotations

import pytest
from distro_node.compression.layout import model_layout
from distro_node.compression.payload import PayloadSpec, TensorSpec
from distro_node.compression.sizes import payload_body_nbytes


def llama_1b2_shapes() -> list[tuple[str, tuple[int, ...]]]:
    vocab, hidden, inter, layers = 32000, 2048, 8192, 16
    shapes: list[tuple[str, tuple[int, ...]]] = [("embed", (vocab, hidden))]
    for i in range(layers):
        for name, shape in (
            ("q", (hidden, hidden)),
            ("k", (hidden, hidden)),
            ("v", (hidden, hidden)),
            ("o", (hidden, hidden)),
            ("gate", (inter, hidden)),
            ("up", (inter, hidden)),
            ("down", (hidden, inter)),
            ("attn_norm", (hidden,)),
            ("mlp_norm", (hidden,)),
        ):
            shapes.append((f"layers.{i}.{name}", shape))
    shapes += [("norm", (hidden,)), ("lm_head", (vocab, hidden))]
    return shapes


def spec_1b2(k: int, index_codec: str, value_codec: str) -> PayloadSpec:
    layout = model_layout(llama_1b2_shapes(), chunk=64)
    tensors = tuple(
        TensorSpec(t.name, t.n_chunks, t.chunk_numel, min(k, t.chunk_numel)) for t in layout.tensors
    )
    return PayloadSpec("distro", tensors, layout.digest(), {"k": k}, index_codec, value_codec)


def test_parameter_count() -> None:
    assert model_layout(llama_1b2_shapes()).numel == 1_204_881_408


@pytest.mark.parametrize(
    ("k", "index_codec", "value_codec", "megabytes"),
    [
        (1, "auto", "bf16", 1.18),
        (4, "auto", "bf16", 4.72),
        (4, "auto", "1bit", 2.51),
        (8, "auto", "1bit", 5.02),
        (32, "auto", "1bit", 20.07),
        (4, "enum", "1bit", 1.77),  # "about 1.8 MB" with entropy-coded indices
        (4, "packed", "1bit", 1.92),
    ],
)
def test_payload_sizes_match_reference_table(
    k: int, index_codec: str, value_codec: str, megabytes: float
) -> None:
    # The table is rounded arithmetic (P * k * bytes / 4096); exact per-tensor sizes differ by < 0.5%.
    assert payload_body_nbytes(spec_1b2(k, index_codec, value_codec)) / 1e6 == pytest.approx(
        megabytes, rel=0.005
    )


def test_default_payload_within_report_budget() -> None:
    assert payload_body_nbytes(spec_1b2(4, "auto", "1bit")) <= 2_800_000

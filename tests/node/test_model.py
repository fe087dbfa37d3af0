"""Model and preset behaviour the rest of the node relies on: shapes, causality, identical init, sizes."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from distro_node.node.model import Llama, ModelConfig, ModelConfigError, next_token_loss, param_count
from distro_node.node.presets import PRESETS, UnknownPresetError, preset

SMALL = ModelConfig(
    vocab_size=97, hidden=32, intermediate=64, n_layers=2, n_heads=4, n_kv_heads=2, seq_len=16
)


def tokens(config: ModelConfig, batch: int = 3, seq: int | None = None, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, config.vocab_size, (batch, seq or config.seq_len), generator=g)


def test_forward_shape_and_dtype() -> None:
    model = Llama(SMALL, seed=0)
    logits = model(tokens(SMALL, batch=3, seq=11))
    assert logits.shape == (3, 11, SMALL.vocab_size)
    assert logits.dtype == torch.float32
    assert torch.isfinite(logits).all()


def test_initial_loss_is_near_uniform() -> None:
    # Small init must start near log(vocab); a much larger value would mean exploding logits.
    model = Llama(SMALL, seed=0)
    x = tokens(SMALL)
    loss = next_token_loss(model(x), tokens(SMALL, seed=1))
    assert abs(loss.item() - torch.log(torch.tensor(97.0)).item()) < 0.1


def test_grouped_kv_heads_have_fewer_kv_parameters() -> None:
    model = Llama(SMALL, seed=0)
    attn = model.layers[0].attn
    assert attn.q_proj.shape == (32, 32)
    assert attn.k_proj.shape == (16, 32)  # 2 KV heads of dim 8
    assert attn.v_proj.shape == (16, 32)


def test_gqa_equals_mha_with_repeated_kv_heads() -> None:
    # A GQA model is an MHA model whose query heads in one group share K/V weights; the outputs must agree.
    gqa = Llama(SMALL, seed=3)
    mha_config = dataclasses.replace(SMALL, n_kv_heads=SMALL.n_heads)
    mha = Llama(mha_config, seed=None)
    state = gqa.state_dict()
    head_dim = SMALL.head_dim
    for name in list(state):
        if name.endswith(("k_proj", "v_proj")):
            w = state[name].view(SMALL.n_kv_heads, head_dim, SMALL.hidden)
            group = SMALL.n_heads // SMALL.n_kv_heads
            state[name] = w.repeat_interleave(group, dim=0).reshape(-1, SMALL.hidden)
    mha.load_state_dict(state)
    x = tokens(SMALL)
    torch.testing.assert_close(gqa(x), mha(x), rtol=1e-5, atol=1e-5)


def test_causal_future_tokens_do_not_change_past_logits() -> None:
    model = Llama(SMALL, seed=0)
    x = tokens(SMALL, batch=2)
    y = x.clone()
    y[:, 9:] = (y[:, 9:] + 1) % SMALL.vocab_size
    a, b = model(x), model(y)
    torch.testing.assert_close(a[:, :9], b[:, :9], rtol=0, atol=1e-6)
    assert not torch.allclose(a[:, 9:], b[:, 9:])


def test_position_matters() -> None:
    # Without RoPE the model would be permutation-invariant over the prefix; a swap must change the output.
    model = Llama(SMALL, seed=0)
    x = tokens(SMALL, batch=1)
    y = x.clone()
    y[0, 0], y[0, 1] = x[0, 1], x[0, 0]
    assert x[0, 0] != x[0, 1]
    assert not torch.allclose(model(x)[0, -1], model(y)[0, -1])


def test_same_seed_is_bit_identical_and_other_seed_differs() -> None:
    a, b, c = Llama(SMALL, seed=7), Llama(SMALL, seed=7), Llama(SMALL, seed=8)
    for (name, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters(), strict=True):
        assert torch.equal(pa, pb), name
        if not name.endswith("norm.weight"):
            assert not torch.equal(pa, pc), name


def test_init_statistics() -> None:
    config = dataclasses.replace(SMALL, hidden=64, intermediate=128, n_layers=4)
    model = Llama(config, seed=0)
    assert abs(model.embed.std().item() - 0.02) < 0.002
    residual = model.layers[0].attn.o_proj.std().item()
    assert abs(residual - 0.02 / (2 * 4) ** 0.5) < 0.001
    assert torch.equal(model.norm.weight, torch.ones(64))


def test_param_count_matches_allocated_model() -> None:
    model = Llama(SMALL, seed=0)
    assert param_count(SMALL) == sum(p.numel() for p in model.parameters())


def test_param_count_of_report_model_without_allocating() -> None:
    config = preset("1.2b")
    expected = 32000 * 2048 * 2 + 16 * (4 * 2048 * 2048 + 3 * 2048 * 8192 + 2 * 2048) + 2048
    assert expected == 1_204_881_408
    assert param_count(config) == expected
    with torch.device("meta"):
        model = Llama(config)  # shapes only: a meta model holds no memory and skips init
    assert sum(p.numel() for p in model.parameters()) == expected


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_is_consistent(name: str) -> None:
    config = preset(name)
    with torch.device("meta"):
        model = Llama(config)
    assert param_count(config) == sum(p.numel() for p in model.parameters())


def test_preset_sizes_are_ordered() -> None:
    counts = [param_count(preset(n)) for n in ("tiny", "small", "20m", "150m", "1.2b")]
    assert counts == sorted(counts)
    assert 100_000 < counts[0] < 400_000
    assert 900_000 < counts[1] < 3_000_000


def test_unknown_preset_lists_valid_names() -> None:
    assert preset("1.2B") is preset("1.2b")
    with pytest.raises(UnknownPresetError) as info:
        preset("huge")
    message = str(info.value)
    assert "huge" in message
    for name in PRESETS:
        assert name in message


def test_sequence_longer_than_config_is_rejected() -> None:
    model = Llama(SMALL, seed=0)
    with pytest.raises(ValueError, match="seq_len"):
        model(tokens(SMALL, seq=SMALL.seq_len + 1))


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"vocab_size": 0}, "vocab_size"),
        ({"hidden": -8}, "hidden"),
        ({"n_layers": 2.0}, "n_layers"),
        ({"n_layers": True}, "n_layers"),
        ({"n_heads": 5}, "n_heads"),  # does not divide hidden=32
        ({"hidden": 24, "n_heads": 8}, "n_heads"),  # head dim 3 is odd
        ({"n_kv_heads": 3}, "n_kv_heads"),
        ({"n_kv_heads": 8}, "n_kv_heads"),
        ({"rope_theta": 0.0}, "rope_theta"),
        ({"norm_eps": float("nan")}, "norm_eps"),
        ({"init_std": "0.02"}, "init_std"),
        ({"seq_len": None}, "seq_len"),
    ],
)
def test_config_errors_name_the_field(changes: dict[str, object], field: str) -> None:
    with pytest.raises(ModelConfigError) as info:
        dataclasses.replace(SMALL, **changes)
    assert info.value.field == field
    assert field in str(info.value)


def test_config_round_trips_through_dict() -> None:
    assert ModelConfig(**SMALL.to_dict()) == SMALL


def test_loss_backward_reaches_every_parameter() -> None:
    model = Llama(SMALL, seed=0)
    next_token_loss(model(tokens(SMALL)), tokens(SMALL, seed=1)).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name

"""DisTrO against the test vectors of reference/algorithm.md, plus determinism and overlapped mode."""

from __future__ import annotations

import io

import pytest
import torch
from distro_node.compression.errors import PayloadError
from distro_node.compression.payload import Payload, SparseTensor
from distro_node.optimizer import DisTrO, DistroConfig, ScheduleConfig, StepOrderError
from optimizer_support import Toy, emulate_codec, identical, local_step, params_of, run_peers

LR = 0.01


def cfg(**kw: object) -> DistroConfig:
    base: dict[str, object] = {
        "chunk": 8,
        "topk": 3,
        "value_codec": "fp32",
        "schedule": ScheduleConfig(lr=LR),
    }
    base.update(kw)
    return DistroConfig(**base)  # type: ignore[arg-type]


def set_grads(model: torch.nn.Module, seed: int, base: dict[str, torch.Tensor] | None = None) -> None:
    """Gradients bounded away from 0 (|g| >= 0.1), so sign() is not decided by DCT round-off."""
    gen = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if base is not None:
            p.grad = base[name] + 0.05 * (torch.rand(p.shape, generator=gen) - 0.5)
        else:
            mag = 0.1 + torch.rand(p.shape, generator=gen)
            p.grad = torch.where(torch.rand(p.shape, generator=gen) < 0.5, -mag, mag)


def test_k_all_one_peer_is_sign_sgd() -> None:
    model = Toy()
    strategy = DisTrO(model, cfg(topk=10**6, beta=0.5))
    set_grads(model, 1)
    before = params_of(model)
    strategy.apply(0, {"a": strategy.prepare(0)})
    for name, p in model.named_parameters():
        if p.requires_grad:
            assert torch.equal(p, before[name].sub(torch.sign(p.grad), alpha=LR)), name
            assert float(strategy._delta[name].abs().max()) < 1e-6  # flushed


def test_k_all_n_peers_is_sign_of_mean() -> None:
    models = [Toy() for _ in range(3)]
    strategies = [DisTrO(m, cfg(topk=10**6)) for m in models]
    base_model = Toy()
    set_grads(base_model, 7)
    base = {n: p.grad.clone() for n, p in base_model.named_parameters() if p.grad is not None}
    for i, m in enumerate(models):
        set_grads(m, 100 + i, base)
    mean = {n: sum(m.get_parameter(n).grad for m in models) / len(models) for n in base}
    before = params_of(models[0])
    payloads = {f"p{i}": s.prepare(0) for i, s in enumerate(strategies)}
    for s in strategies:
        s.apply(0, payloads)
    for name in base:
        expected = before[name].sub(torch.sign(mean[name]), alpha=LR)
        for m in models:
            assert torch.equal(m.get_parameter(name), expected), name


def test_parseval_after_topk() -> None:
    model = Toy()
    strategy = DisTrO(model, cfg(topk=3, beta=0.9))
    prev = {n: torch.zeros(p.shape) for n, p in model.named_parameters() if p.requires_grad}
    for step in range(3):
        set_grads(model, step)
        old = {n: 0.9 * prev[n] + LR * model.get_parameter(n).grad for n in prev}
        payload = strategy.prepare(step)
        for name in prev:
            new = strategy._delta[name]
            sent = float(payload.tensors[name].values.double().pow(2).sum())
            lhs = float(new.double().pow(2).sum())
            rhs = float(old[name].double().pow(2).sum()) - sent
            assert lhs == pytest.approx(rhs, rel=1e-4, abs=1e-10), name
            assert sent > 0
            prev[name] = new.clone()


def test_payload_matches_spec_and_indices_are_sorted() -> None:
    model = Toy()
    strategy = DisTrO(model, cfg(topk=3))
    set_grads(model, 0)
    payload = strategy.prepare(0)
    spec = strategy.spec()
    assert [t.name for t in spec.tensors] == ["w1", "b1", "mix", "gain", "w2"]  # frozen excluded, model order
    for t in spec.tensors:
        entry = payload.tensors[t.name]
        assert entry.values.shape == (t.n_chunks, t.k) and entry.values.dtype == torch.float32
        if t.dense:
            assert entry.indices is None
        else:
            assert entry.indices is not None and entry.indices.dtype == torch.int64
            assert bool((entry.indices[:, 1:] > entry.indices[:, :-1]).all())
    by_name = {t.name: t for t in spec.tensors}
    assert by_name["gain"].k == 1 and by_name["gain"].chunk_numel == 1  # 0-d = length-1 vector


def test_settings_digest_tracks_math() -> None:
    digests = {
        DisTrO(Toy(), c).spec().settings_digest()
        for c in (
            cfg(),
            cfg(topk=4),
            cfg(beta=0.99),
            cfg(update="adam"),
            cfg(weight_decay=0.1),
            cfg(overlapped=True),
            cfg(schedule=ScheduleConfig(lr=0.02)),
            cfg(value_codec="1bit"),
        )
    }
    assert len(digests) == 8


@pytest.mark.parametrize("update", ["sign", "adam"])
@pytest.mark.parametrize("codec", ["fp32", "1bit", "int8"])
def test_sync_replicas_bit_identical(update: str, codec: str) -> None:
    models = [Toy() for _ in range(3)]
    strategies = [DisTrO(m, cfg(update=update, weight_decay=0.1, value_codec=codec)) for m in models]
    run_peers(models, strategies, range(6), codec)
    assert identical(models[0], models[1]) and identical(models[0], models[2])
    assert not identical(models[0], Toy())


def test_overlapped_replicas_bit_identical_1bit() -> None:
    models = [Toy() for _ in range(3)]
    strategies = [DisTrO(m, cfg(overlapped=True, value_codec="1bit", weight_decay=0.1)) for m in models]
    run_peers(models, strategies, range(20), "1bit")
    assert identical(models[0], models[1]) and identical(models[0], models[2])
    assert not identical(models[0], Toy())


def test_overlapped_lookahead_restores_exactly() -> None:
    model = Toy()
    strategy = DisTrO(model, cfg(overlapped=True))
    local_step(model, strategy, 0, 0)
    before = params_of(model)
    strategy.pre_forward(1)
    assert not all(torch.equal(p, before[n]) for n, p in model.named_parameters() if p.requires_grad)
    with pytest.raises(StepOrderError):
        strategy.prepare(1)
    strategy.post_backward(1)
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name])


def test_overlapped_defers_error_feedback() -> None:
    """sign(delta) for the lookahead includes what was just sent; the feedback lands at the next prepare."""
    model = Toy()
    strategy = DisTrO(model, cfg(overlapped=True, topk=10**6, beta=1.0))
    set_grads(model, 0)
    strategy.prepare(0)
    assert torch.allclose(strategy._delta["w1"], LR * model.w1.grad)
    model.zero_grad(set_to_none=True)
    strategy.prepare(1)
    assert float(strategy._delta["w1"].abs().max()) < 1e-6


def test_apply_ignores_empty_and_negative() -> None:
    model = Toy()
    strategy = DisTrO(model, cfg(weight_decay=0.5))
    before = params_of(model)
    strategy.apply(3, {})
    strategy.apply(-1, {"a": Payload(tensors={})})
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_apply_rejects_bad_payload_before_touching_weights() -> None:
    model = Toy()
    strategy = DisTrO(model, cfg())
    set_grads(model, 0)
    good = strategy.prepare(0)
    bad_tensors = dict(good.tensors)
    w2 = bad_tensors["w2"]
    assert w2.indices is not None
    dup = w2.indices.clone()
    dup[0, 1] = dup[0, 0]
    bad_tensors["w2"] = SparseTensor(values=w2.values, indices=dup)
    before = params_of(model)
    with pytest.raises(PayloadError) as err:
        strategy.apply(0, {"a": good, "b": Payload(tensors=bad_tensors)})
    assert err.value.reason == "duplicate_index"
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


@pytest.mark.parametrize("overlapped", [False, True])
def test_state_dict_round_trip_continues_bit_identically(overlapped: bool) -> None:
    config = cfg(overlapped=overlapped, update="adam", value_codec="1bit")
    models = [Toy() for _ in range(2)]
    strategies = [DisTrO(m, config) for m in models]
    run_peers(models, strategies, range(4), "1bit")
    # In overlapped mode the aggregate of step 3 is applied at the end of run_peers, as a real loop would
    # only do at the next step; a checkpoint taken here still carries step 3's deferred error feedback.
    buf = io.BytesIO()
    torch.save([(m.state_dict(), s.state_dict()) for m, s in zip(models, strategies, strict=True)], buf)
    run_peers(models, strategies, range(4, 8), "1bit")
    buf.seek(0)
    restored_models, restored = [], []
    for model_state, strategy_state in torch.load(buf, weights_only=True):
        m = Toy(seed=99)
        m.load_state_dict(model_state)
        s = DisTrO(m, config)
        s.load_state_dict(strategy_state)
        restored_models.append(m)
        restored.append(s)
    run_peers(restored_models, restored, range(4, 8), "1bit")
    for a, b in zip(models, restored_models, strict=True):
        assert identical(a, b)


def test_load_state_dict_rejects_other_settings() -> None:
    state = DisTrO(Toy(), cfg(topk=3)).state_dict()
    from distro_node.optimizer import StateError

    with pytest.raises(StateError):
        DisTrO(Toy(), cfg(topk=5)).load_state_dict(state)


def test_emulated_1bit_matches_codec_convention() -> None:
    payload = Payload(tensors={"x": SparseTensor(values=torch.tensor([[0.0, -2.0, 3.0]]))})
    assert emulate_codec(payload, "1bit").tensors["x"].values.tolist() == [[1.0, -1.0, 1.0]]

"""A peer left out of a step's decided list keeps what the swarm did not apply (optimizer/distro.py,
``withheld``).

Error feedback subtracts the selection at prepare time on the assumption that the swarm applies it. When the
list leaves the peer out, the selection goes back into ``delta`` and then every DCT coefficient the aggregate
moved in ``delta``'s own direction is cleared, as DeMo clears what a peer selects. These tests check that
rule against ``delta`` built by hand: all kept when the aggregate went the other way, the included peer's
momentum when the aggregate was exactly our selection, and coefficient by coefficient for another peer's
payload, in both orders (in the overlapped order counting the feedback still pending).
"""

from __future__ import annotations

import pytest
import torch
from distro_node.compression.dct import to_chunks
from distro_node.compression.payload import Payload, SparseTensor
from distro_node.optimizer import CocktailConfig, CocktailSGD, DisTrO, DistroConfig, ScheduleConfig
from distro_node.optimizer.aggregate import Aggregator, entries_for
from distro_node.optimizer.topk import densify
from optimizer_support import Toy

LR = 0.01
BETA = 0.9


def _cfg(overlapped: bool) -> DistroConfig:
    return DistroConfig(chunk=8, topk=3, value_codec="fp32", beta=BETA, overlapped=overlapped,
                        schedule=ScheduleConfig(lr=LR))


def _grads(model: torch.nn.Module, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            p.grad = torch.randn(p.shape, generator=gen)
            out[name] = p.grad.clone()
    return out


def _close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return all(torch.allclose(a[n], b[n], atol=1e-6, rtol=0) for n in b)


def _other(payload: Payload) -> dict[str, Payload]:
    return {"someone-else": payload}


def _negated(payload: Payload) -> Payload:
    return Payload({n: SparseTensor(-e.values, e.indices) for n, e in payload.tensors.items()})


def _own(strategy: DisTrO, delta: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """DCT coefficients of ``delta`` per chunk, less the feedback still pending (overlapped)."""
    out = {}
    for name, layout in strategy._layouts.items():
        coeffs = to_chunks(delta[name], layout)
        pending = strategy._pending.get(name)
        out[name] = coeffs if pending is None else coeffs - densify(pending, layout.chunk_numel)
    return out


def _aggregate(strategy: DisTrO, payloads: dict[str, Payload]) -> dict[str, torch.Tensor]:
    """The aggregate ``apply`` computes, per tensor: the mean over the peers that selected a coefficient (of
    one payload, its values as sent: codec fp32)."""
    return {
        spec.name: Aggregator().combine(spec, entries_for(spec.name, payloads), torch.device("cpu"))
        for spec in strategy._specs
    }


def _assert_settled(
    strategy: DisTrO, before: dict[str, torch.Tensor], applied: dict[str, torch.Tensor]
) -> int:
    """``delta`` after the settle is ``before`` with each coefficient the aggregate moved its way cleared;
    returns how many were."""
    after = _own(strategy, strategy._delta)
    cleared = 0
    for name, own in _own(strategy, before).items():
        covered = applied[name] * own > 0
        cleared += int(covered.sum())
        assert torch.allclose(after[name], torch.where(covered, 0.0, own), atol=1e-6, rtol=0), name
    return cleared


def test_left_out_peer_keeps_all_when_the_swarm_went_the_other_way() -> None:
    model = Toy()
    strategy = DisTrO(model, _cfg(overlapped=False))
    g0 = _grads(model, 1)
    sent = strategy.prepare(0)
    assert not _close(strategy._delta, {n: LR * g for n, g in g0.items()})  # the selection was subtracted
    strategy.withheld(0)
    strategy.apply(0, _other(_negated(sent)))
    assert _close(strategy._delta, {n: LR * g for n, g in g0.items()})


def _twins() -> tuple[DisTrO, DisTrO, Payload, Payload]:
    """Two peers with the same weights and gradients, each prepared for step 0 (sequential order)."""
    a, b = Toy(), Toy()
    sa, sb = DisTrO(a, _cfg(overlapped=False)), DisTrO(b, _cfg(overlapped=False))
    _grads(a, 1), _grads(b, 1)
    return sa, sb, sa.prepare(0), sb.prepare(0)


def test_left_out_peer_whose_selection_the_swarm_applied_ends_as_if_included() -> None:
    sa, sb, pa, pb = _twins()
    sa.apply(0, {"me": pa})
    sb.withheld(0)
    sb.apply(0, _other(pb))
    assert _close(sb._delta, sa._delta)


@pytest.mark.parametrize("others", [1, 3])
def test_left_out_peer_clears_each_coefficient_the_swarm_moved_its_way(others: int) -> None:
    """Against one other payload, and against three whose mean (over the peers that sent a coefficient) is
    what was applied."""
    mine = Toy()
    strategy = DisTrO(mine, _cfg(overlapped=False))
    g0 = _grads(mine, 1)
    sent = strategy.prepare(0)
    payloads = {}
    for i in range(others):
        theirs = Toy()
        _grads(theirs, 2 + i)
        payloads[f"peer-{i}"] = DisTrO(theirs, _cfg(overlapped=False)).prepare(0)
    strategy.withheld(0)
    strategy.apply(0, payloads)
    applied = _aggregate(strategy, payloads)
    before = {n: LR * g for n, g in g0.items()}
    cleared = _assert_settled(strategy, before, applied)
    own, selected = _own(strategy, before), _aggregate(strategy, {"me": sent})
    agree = sum(int(((applied[n] * own[n] > 0) & (selected[n] == 0)).sum()) for n in own)
    disagree = sum(int((applied[n] * own[n] < 0).sum()) for n in own)
    assert agree > 0 and disagree > 0 and cleared >= agree  # both cases, beyond our own selection, occur


def test_sequential_included_step_is_unchanged() -> None:
    sa, sb, pa, pb = _twins()
    sa.apply(0, {"me": pa})
    sb.withheld(5)  # a step it never sent: nothing happens
    sb.apply(0, {"me": pb})
    assert all(torch.equal(sa._delta[n], sb._delta[n]) for n in sa._delta)


def test_an_empty_list_applies_nothing_so_the_whole_selection_is_kept() -> None:
    model = Toy()
    strategy = DisTrO(model, _cfg(overlapped=False))
    g0 = _grads(model, 1)
    strategy.prepare(0)
    strategy.withheld(0)
    strategy.apply(0, {})
    assert _close(strategy._delta, {n: LR * g for n, g in g0.items()})


def _overlapped_to_step_one(model: Toy) -> tuple[DisTrO, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    strategy = DisTrO(model, _cfg(overlapped=True))
    g0 = _grads(model, 1)
    strategy.prepare(0)
    strategy.apply(-1, {})
    strategy.pre_forward(1)
    g1 = _grads(model, 2)
    strategy.post_backward(1)
    return strategy, g0, g1


def test_overlapped_withheld_after_the_next_prepare_restores_beta_times_the_selection() -> None:
    model = Toy()
    strategy, g0, g1 = _overlapped_to_step_one(model)
    sent1 = strategy.prepare(1)  # subtracts step 0's selection, then decays
    strategy.withheld(0)
    strategy.apply(0, _other(_negated(sent1)))
    # Step 1's own selection is still pending (subtracted at prepare(2)); step 0's is back at beta times
    # itself, and only what the aggregate moved our way is cleared.
    restored = {n: BETA * LR * g0[n] + LR * g1[n] for n in g0}
    _assert_settled(strategy, restored, _aggregate(strategy, _other(_negated(sent1))))


def test_overlapped_clearing_counts_the_pending_feedback_once() -> None:
    mine, theirs = Toy(), Toy(seed=1)
    strategy, g0, g1 = _overlapped_to_step_one(mine)
    other, _, _ = _overlapped_to_step_one(theirs)
    strategy.prepare(1)
    payload = other.prepare(1)
    strategy.withheld(0)
    strategy.apply(0, _other(payload))
    restored = {n: BETA * LR * g0[n] + LR * g1[n] for n in g0}
    assert _assert_settled(strategy, restored, _aggregate(strategy, _other(payload))) > 0


def test_withheld_and_never_applied_keeps_the_whole_selection() -> None:
    model = Toy()
    strategy = DisTrO(model, _cfg(overlapped=True))
    g0 = _grads(model, 1)
    strategy.prepare(0)
    strategy.withheld(0)  # before the next prepare: its feedback is still pending, and is never subtracted
    g1 = _grads(model, 2)
    strategy.prepare(1)
    assert _close(strategy._delta, {n: BETA * LR * g0[n] + LR * g1[n] for n in g0})


def test_cocktail_withheld_step_returns_the_sent_values_to_the_error_buffer() -> None:
    model = Toy()
    strategy = CocktailSGD(model, CocktailConfig(schedule=ScheduleConfig(lr=LR)))
    g0 = _grads(model, 3)
    sent = strategy.prepare(0)
    strategy.withheld(0)
    strategy.apply(0, _other(sent))
    assert _close(strategy._error, {n: g.reshape(-1) for n, g in g0.items()})

"""A peer left out of a step's decided list keeps what it sent (optimizer/distro.py, ``withheld``).

Error feedback subtracts the selection at prepare time on the assumption that the swarm applies it. These
tests compare ``delta`` after a withheld step with the momentum of a peer whose selection was never
subtracted: equal in the sequential order, and in the overlapped order (where prepare(s + 1) had already
subtracted and decayed it) equal after adding back beta times the selection.
"""

from __future__ import annotations

import torch
from distro_node.compression.payload import Payload
from distro_node.optimizer import CocktailConfig, CocktailSGD, DisTrO, DistroConfig, ScheduleConfig
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


def test_sequential_withheld_step_keeps_the_whole_momentum() -> None:
    model = Toy()
    strategy = DisTrO(model, _cfg(overlapped=False))
    g0 = _grads(model, 1)
    sent = strategy.prepare(0)
    assert not _close(strategy._delta, {n: LR * g for n, g in g0.items()})  # the selection was subtracted
    strategy.withheld(0)
    strategy.apply(0, _other(sent))
    assert _close(strategy._delta, {n: LR * g for n, g in g0.items()})


def test_sequential_included_step_is_unchanged() -> None:
    a, b = Toy(), Toy()
    sa, sb = DisTrO(a, _cfg(overlapped=False)), DisTrO(b, _cfg(overlapped=False))
    _grads(a, 1), _grads(b, 1)
    pa, pb = sa.prepare(0), sb.prepare(0)
    sa.apply(0, {"me": pa})
    sb.withheld(5)  # a step it never sent: nothing happens
    sb.apply(0, {"me": pb})
    assert all(torch.equal(sa._delta[n], sb._delta[n]) for n in sa._delta)


def test_overlapped_withheld_after_the_next_prepare_restores_beta_times_the_selection() -> None:
    model = Toy()
    strategy = DisTrO(model, _cfg(overlapped=True))
    g0 = _grads(model, 1)
    strategy.prepare(0)
    strategy.apply(-1, {})
    strategy.pre_forward(1)
    g1 = _grads(model, 2)
    strategy.post_backward(1)
    sent1 = strategy.prepare(1)  # subtracts step 0's selection, then decays
    strategy.withheld(0)
    strategy.apply(0, _other(sent1))
    # Step 1's own selection is still pending (subtracted at prepare(2)); nothing of step 0 was lost.
    assert _close(strategy._delta, {n: BETA * LR * g0[n] + LR * g1[n] for n in g0})


def test_overlapped_withheld_before_the_next_prepare_drops_the_pending_feedback() -> None:
    model = Toy()
    strategy = DisTrO(model, _cfg(overlapped=True))
    g0 = _grads(model, 1)
    strategy.prepare(0)
    strategy.withheld(0)
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

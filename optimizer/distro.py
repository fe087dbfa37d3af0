"""DisTrO: the DeMo step (reference/algorithm.md), with a sign or an Adam-normalized update, and an optional
one-step-overlapped schedule.

Per parameter ``p`` at step ``s`` with ``lr = lr(s)``:

* ``prepare(s)``: ``delta = beta * delta + lr * grad``; DCT per chunk; top-k per chunk by magnitude; error
  feedback ``delta -= IDCT(selected, unquantized)``; the payload holds the selected indices and values.
* ``apply(s, payloads)``: aggregate (per-coefficient mean over the peers that selected it); IDCT to ``u``;
  ``p *= 1 - lr * wd``; then ``p -= lr * sign(u)`` (rule ``sign``), or ``p -= lr * u / (sqrt(v_hat) + eps)``
  with ``v = b2 * v + (1 - b2) * u**2`` (rule ``adam``).

Weights change only in ``apply``, and everything ``apply`` reads (the payloads, the step, the second moment
``v`` built from aggregates only) is the same on every peer, so replicas stay bit-identical. Weight decay sits
in ``apply`` for that reason, with the learning rate of the step being applied.

Overlapped mode (mirrors the semantics of the reference network's overlapped DisTrO step; own code):
the caller computes the gradient of step ``s`` before applying step ``s - 1``'s aggregate, i.e. the gradient
is taken at weights that are one update stale. To reduce that staleness:

* ``pre_forward(s)`` saves a copy of every parameter and takes a local *lookahead*
  ``p -= lr(s - 1) * sign(delta)``, where ``delta`` still contains what this peer sent at ``s - 1`` (its error
  feedback is deferred, as in the network), so ``sign(delta)`` is this peer's guess of the pending update.
* ``post_backward(s)`` restores the saved copy. The network undoes the lookahead by adding it back, which
  leaves float residue that made replicas drift (~4e-9 after 100 steps); restoring the copy is exact.
* ``prepare(s)`` first subtracts the deferred error feedback of step ``s - 1`` (before the decay, which is
  algebraically the same ``delta`` as immediate feedback), then does the normal step.
* ``apply(s - 1, payloads of s - 1)`` is then called by the caller; ``apply`` with a negative step is a no-op
  so a loop can call ``apply(s - 1, ...)`` unconditionally.

Unlike the network, weight decay is applied in ``apply`` (not in the gradient step) so the weights change in
exactly one place.

Left out of a step (``withheld``): error feedback assumes the swarm applied what this peer sent. A peer whose
payload a decided list did not include (late, warming, or beyond the list's bound) would otherwise lose that
step's selected momentum for good. The caller says so before ``apply``; ``apply`` then puts the selection back
into ``delta`` (scaled by ``beta`` once per ``prepare`` that decayed it since it was subtracted: exact in the
sequential order, and in the overlapped order, where ``prepare(s + 1)`` already subtracted and decayed it,
``beta * x`` is what ``delta`` would hold had step ``s`` never been subtracted) and clears every DCT
coefficient of ``delta`` that the aggregate moved in ``delta``'s own direction, as DeMo clears what a peer
selects, counting the overlapped order's pending feedback so nothing is cleared twice. Why clear: with K of N
included, the others' payloads already carried what every peer's momentum shares; a left-out peer that kept it
sent it again at its turn, so the model went N / K times along those directions and starved the rest (tiny
model, 32 peers, K = 8, seed 0: held-out loss 5.02 against 2.90 with everybody included; 2.64 with the
clearing; docs/benchmarks.md, "Bounded inclusion").
What the aggregate did not move, or moved the other way, stays. A withheld call whose ``apply`` never
comes (or comes empty) keeps the whole selection. Only the last prepared steps are kept; a checkpoint does not
carry them (a restart between prepare and apply loses at most that one step's part).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from distro_node.compression.dct import from_chunks, from_sparse_chunks, sparse_is_cheaper, to_chunks
from distro_node.compression.layout import TensorLayout
from distro_node.compression.payload import Payload, PayloadSpec, SparseTensor, TensorSpec

from .aggregate import Aggregator, aggregate_to_dense, check_payloads, entries_for
from .base import Strategy
from .config import DistroConfig, config_settings
from .errors import StateError, StepOrderError
from .params import clone_tensors, copy_into, grad_of, layout_of, trainable
from .robust import make_aggregator
from .schedule import lr_at
from .topk import clamp_k, densify, select_topk

STATE_VERSION = 1
# Sent selections kept until their step is applied or withheld (sequential: 1; overlapped: 2 in flight).
KEPT_SELECTIONS = 4


class DisTrO(Strategy):
    """DeMo-compressed momentum exchange; see the module docstring for the exact step and call order."""

    name = "distro"

    def __init__(
        self,
        model: torch.nn.Module | Iterable[tuple[str, torch.nn.Parameter]],
        config: DistroConfig | None = None,
        aggregator: Aggregator | None = None,
    ) -> None:
        self.config = config or DistroConfig()
        self.overlapped = self.config.overlapped
        # An explicit aggregator (tests, experiments) wins over the configured rule.
        self.aggregator = aggregator or make_aggregator(self.config.aggregation)
        self._params = trainable(model)
        self._layout = layout_of(self._params, self.config.chunk)
        self._layouts: dict[str, TensorLayout] = self._layout.by_name()
        self._specs = tuple(
            TensorSpec(t.name, t.n_chunks, t.chunk_numel, clamp_k(self.config.topk, t.chunk_numel))
            for t in self._layout.tensors
        )
        self._delta = {
            name: torch.zeros(p.shape, dtype=torch.float32, device=p.device) for name, p in self._params
        }
        # Selected (unquantized) coefficients whose error feedback is still to be subtracted from delta;
        # only non-empty between prepare(s) and prepare(s + 1) in overlapped mode.
        self._pending: dict[str, SparseTensor] = {}
        self._pending_step: int | None = None
        # step -> (selection sent at that step, number of prepares done when it was made); see ``withheld``.
        self._sent: dict[int, tuple[dict[str, SparseTensor], int]] = {}
        self._prepares = 0
        self._saved: dict[str, torch.Tensor] | None = None
        self._v: dict[str, torch.Tensor] = {}
        self._adam_t = 0
        self._prepared_any = False
        self._withheld: _Withheld | None = None
        self._spec = PayloadSpec(
            strategy=self.name,
            tensors=self._specs,
            layout_digest=self._layout.digest(),
            settings=config_settings(self.config),
            index_codec=self.config.index_codec,
            value_codec=self.config.value_codec,
        )

    def spec(self) -> PayloadSpec:
        return self._spec

    # -- overlapped lookahead -------------------------------------------------------------------------------

    @torch.no_grad()
    def pre_forward(self, step: int) -> None:
        if not self.overlapped or step == 0 or not self._prepared_any:
            return
        if self._saved is not None:
            raise StepOrderError("pre_forward called twice without post_backward in between")
        lr_prev = lr_at(self.config.schedule, step - 1)
        self._saved = {name: p.detach().clone() for name, p in self._params}
        for name, p in self._params:
            p.sub_(torch.sign(self._delta[name]).to(p.dtype), alpha=lr_prev)

    @torch.no_grad()
    def post_backward(self, step: int) -> None:
        if self._saved is None:
            return
        for name, p in self._params:
            p.copy_(self._saved[name])
        self._saved = None

    # -- compression ----------------------------------------------------------------------------------------

    def _flush_feedback(self, name: str) -> None:
        sent = self._pending.pop(name, None)
        if sent is not None:
            self._add_selection(name, sent, -1.0)
        if not self._pending:
            self._pending_step = None

    def _add_selection(self, name: str, sent: SparseTensor, alpha: float) -> None:
        """``delta += alpha * IDCT(sent)``: -1 subtracts the error feedback, a positive scale restores it."""
        layout = self._layouts[name]
        delta = self._delta[name]
        if sent.indices is not None and sparse_is_cheaper(sent.indices.shape[1], layout):
            back = from_sparse_chunks(sent.indices.to(delta.device), sent.values.to(delta.device), layout)
        else:
            back = from_chunks(densify(sent, layout.chunk_numel, delta.device), layout)
        delta.add_(back.reshape(delta.shape), alpha=alpha)

    @torch.no_grad()
    def withheld(self, step: int) -> None:
        """Our payload of ``step`` is not in the decided list; ``apply(step)`` settles it (module doc)."""
        self._settle_withheld(None)  # an earlier one never applied: nothing of it was
        record = self._sent.pop(step, None)
        if record is None:
            return
        self._withheld = _Withheld(step, *record)

    def _settle_withheld(self, applied: Mapping[str, torch.Tensor] | None) -> None:
        """Settle a withheld selection once its step's aggregate is known (``applied``; None: nothing was).

        The selection goes back into ``delta`` (never subtracted, if still pending); then every DCT
        coefficient the aggregate moved in the direction ``delta`` holds is cleared, as DeMo clears what a
        peer selects. The others' payloads carried that direction: keeping it would send it again later and
        push the model along what every peer's momentum shares once per group of K, starving the rest."""
        withheld, self._withheld = self._withheld, None
        if withheld is None:
            return
        # No prepare runs between withheld and this (prepare settles first), so these still hold.
        pending = self._pending_step == withheld.step  # overlapped, not yet subtracted
        scale = self.config.beta ** (self._prepares - withheld.prepared_at)
        for name, sent in withheld.selection.items():
            if pending:
                self._pending.pop(name, None)
            else:
                self._add_selection(name, sent, scale)
            coeffs = None if applied is None else applied.get(name)
            if coeffs is not None:
                self._clear_applied(name, coeffs)
        if not self._pending:
            self._pending_step = None

    def _clear_applied(self, name: str, coeffs: torch.Tensor) -> None:
        """``delta -= IDCT(c)`` where ``c`` is ``delta``'s own coefficient wherever the aggregate ``coeffs``
        has the same sign, counting ``delta`` after a pending feedback (overlapped) is subtracted, so the
        coefficient ends at zero once it is and is never taken twice."""
        layout = self._layouts[name]
        delta = self._delta[name]
        own = to_chunks(delta, layout)
        pending = self._pending.get(name)
        if pending is not None:
            own -= densify(pending, layout.chunk_numel, own.device)
        covered = torch.where(coeffs.to(own.device) * own > 0, own, 0.0)
        delta.sub_(from_chunks(covered, layout).reshape(delta.shape))

    @torch.no_grad()
    def prepare(self, step: int) -> Payload:
        if self._saved is not None:
            raise StepOrderError("prepare called while the lookahead is active: call post_backward first")
        self._settle_withheld(None)
        lr = lr_at(self.config.schedule, step)
        tensors: dict[str, SparseTensor] = {}
        self._prepares += 1
        for (name, p), spec in zip(self._params, self._specs, strict=True):
            self._flush_feedback(name)
            delta = self._delta[name]
            delta.mul_(self.config.beta).add_(grad_of(p), alpha=lr)
            layout = self._layouts[name]
            entry = select_topk(to_chunks(delta, layout), spec.k)
            tensors[name] = entry
            self._pending[name] = _copy(entry)
            if not self.overlapped:
                self._flush_feedback(name)
        self._pending_step = step if self._pending else None
        self._sent[step] = ({n: _copy(e) for n, e in tensors.items()}, self._prepares)
        for old in sorted(self._sent)[:-KEPT_SELECTIONS]:
            del self._sent[old]
        self._prepared_any = True
        return Payload(tensors=tensors)

    # -- update ---------------------------------------------------------------------------------------------

    @torch.no_grad()
    def apply(self, step: int, payloads: Mapping[str, Payload]) -> None:
        """Apply step ``step``'s aggregate. No payloads (or a negative step, the overlapped warm-up) is a
        no-op: every peer sees the same empty set, so skipping keeps replicas identical."""
        if step < 0:
            return
        for done in [s for s in self._sent if s <= step]:  # applied with ours, or withheld just before
            del self._sent[done]
        withheld = self._withheld is not None and self._withheld.step == step
        if not payloads:
            self._settle_withheld(None)
            return
        if self._saved is not None:
            raise StepOrderError("apply called while the lookahead is active: call post_backward first")
        check_payloads(self._specs, payloads, self._spec.fingerprint())
        self.aggregator.begin(self._specs, payloads)
        lr = lr_at(self.config.schedule, step)
        decay = 1.0 - lr * self.config.weight_decay
        if self.config.update == "adam":
            self._adam_t += 1
        applied: dict[str, torch.Tensor] = {}
        for (name, p), spec in zip(self._params, self._specs, strict=True):
            entries = entries_for(name, payloads)
            coeffs = self.aggregator.combine(spec, entries, p.device)
            if withheld:
                applied[name] = coeffs
            u = aggregate_to_dense(coeffs, entries, self._layouts[name]).reshape(p.shape)
            if self.config.weight_decay:
                p.mul_(decay)
            p.sub_(self._direction(name, u).to(p.dtype), alpha=lr)
        if withheld:
            self._settle_withheld(applied)

    def _direction(self, name: str, u: torch.Tensor) -> torch.Tensor:
        if self.config.update == "sign":
            return torch.sign(u)
        b2 = self.config.adam_beta2
        v = self._v.get(name)
        if v is None:
            v = self._v[name] = torch.zeros_like(u)
        v.mul_(b2).addcmul_(u, u, value=1.0 - b2)
        denom = (v / (1.0 - b2**self._adam_t)).sqrt_().add_(self.config.adam_eps)
        return u / denom

    # -- checkpointing --------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        if self._saved is not None:
            raise StepOrderError(
                "state_dict taken while the lookahead is active: weights are not the real ones"
            )
        return {
            "version": STATE_VERSION,
            "settings_digest": self._spec.settings_digest().hex(),
            "delta": clone_tensors(self._delta),
            "pending": {
                n: {"values": e.values.clone(), "indices": None if e.indices is None else e.indices.clone()}
                for n, e in self._pending.items()
            },
            "v": clone_tensors(self._v),
            "adam_t": self._adam_t,
            "prepared_any": self._prepared_any,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise StateError("not a DisTrO state dict of a supported version")
        if state.get("settings_digest") != self._spec.settings_digest().hex():
            raise StateError("state dict was saved with different DisTrO settings")
        copy_into(self._delta, state.get("delta"), "delta")
        pending: dict[str, SparseTensor] = {}
        raw_pending = state.get("pending") or {}
        if not isinstance(raw_pending, dict) or not set(raw_pending) <= set(self._delta):
            raise StateError("pending: unknown tensor names")
        for (name, p), spec in zip(self._params, self._specs, strict=True):
            raw = raw_pending.get(name)
            if raw is None:
                continue
            values, indices = raw.get("values"), raw.get("indices")
            if not isinstance(values, torch.Tensor) or tuple(values.shape) != (spec.n_chunks, spec.k):
                raise StateError(f"pending[{name!r}]: bad values")
            if indices is not None and (
                not isinstance(indices, torch.Tensor) or tuple(indices.shape) != tuple(values.shape)
            ):
                raise StateError(f"pending[{name!r}]: bad indices")
            pending[name] = SparseTensor(
                values=values.to(device=p.device, dtype=torch.float32).clone(),
                indices=None if indices is None else indices.to(device=p.device, dtype=torch.int64).clone(),
            )
        raw_v = state.get("v") or {}
        if not isinstance(raw_v, dict) or not set(raw_v) <= set(self._delta):
            raise StateError("v: unknown tensor names")
        v = {name: torch.zeros_like(self._delta[name]) for name in raw_v}
        copy_into(v, raw_v, "v")
        adam_t = state.get("adam_t")
        if isinstance(adam_t, bool) or not isinstance(adam_t, int) or adam_t < 0:
            raise StateError("adam_t: must be a non-negative integer")
        self._pending = pending
        self._pending_step = None
        self._sent = {}
        self._v = v
        self._adam_t = adam_t
        self._prepared_any = bool(state.get("prepared_any", False))
        self._saved = None


@dataclass(frozen=True)
class _Withheld:
    """A selection left out of ``step``'s list, kept until that step's aggregate is known."""

    step: int
    selection: dict[str, SparseTensor]
    prepared_at: int  # prepares done when it was made: beta decayed it once per prepare since


def _copy(entry: SparseTensor) -> SparseTensor:
    """A private copy: the caller may hand the payload's tensors to a codec or another thread."""
    indices = None if entry.indices is None else entry.indices.clone()
    return SparseTensor(values=entry.values.clone(), indices=indices)

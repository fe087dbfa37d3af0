"""Fault injection: turn an honest peer's payload into what a degraded or malicious peer would send.

One implementation for the simulator and for the daemon's ``--fault`` flag, so every scenario of threats.md
is tested by the same code that a test swarm runs. Faults are parsed from short strings::

    sign-flip[=F]      values * -F (F defaults to 1)                        B1, B3, B4
    scale=F            values * F                                            (see the note below)
    random[=F]         random indices and Gaussian values, norm F x honest  B2
    random-scale[=E]   values * 10**U(-E, E), a new factor each step (E=3)  B7 (degraded scaling)
    bitflip[=P]        each bit of the encoded bytes flipped with prob. P   B7 (degraded memory/link)
    nan                one value NaN (encoded with allow_invalid)           W2
    duplicate-index    one index repeated within a chunk (allow_invalid)    B8
    stale              re-sends the bytes of its previous step              W3
    silent             sends nothing                                        missed rounds
    equivocate         sends two different payloads for the same step       W4

Scale and the 1-bit value codec (the default): the wire carries only signs, so ``scale=F`` and
``random-scale`` are erased by encoding (F > 0) and the peer is, on the wire, an honest one; F < 0 is a sign
flip. That is the intended defence, not a gap: a scale attack only matters with a value codec that carries
magnitudes (fp32, bf16, int8), where ``aggregation = "clipped"`` bounds it and the score keeper's norm term
(protocol/scores.py) bans the peer. ``sign-flip=F`` likewise reduces to a plain sign flip under 1-bit values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from distro_node.compression.payload import Header, Payload, PayloadSpec, SparseTensor
from distro_node.compression.wire import decode, encode

# kind -> (takes a value, value required, default value)
_KINDS: dict[str, tuple[bool, bool, float | None]] = {
    "sign-flip": (True, False, 1.0),
    "scale": (True, True, None),
    "random": (True, False, 1.0),
    "random-scale": (True, False, 3.0),
    "bitflip": (True, False, 1e-3),
    "nan": (False, False, None),
    "duplicate-index": (False, False, None),
    "stale": (False, False, None),
    "silent": (False, False, None),
    "equivocate": (False, False, None),
}
FAULT_KINDS: tuple[str, ...] = tuple(_KINDS)


def fault_usage() -> str:
    """The kinds with their value syntax, e.g. ``sign-flip[=F], scale=F, ..., silent`` (for ``--help``)."""
    forms = []
    for kind, (takes, required, _) in _KINDS.items():
        forms.append(f"{kind}=F" if required else f"{kind}[=F]" if takes else kind)
    return ", ".join(forms)


class FaultSpecError(ValueError):
    """A fault string that cannot be parsed; ``text`` is what was given."""

    def __init__(self, text: object, detail: str) -> None:
        super().__init__(f"bad fault {text!r}: {detail}")
        self.text = text
        self.detail = detail


@dataclass(frozen=True)
class FaultSpec:
    """A parsed fault: ``kind`` from :data:`FAULT_KINDS`, its numeric ``value`` (None for kinds without),
    and the first step at which the peer misbehaves (honest before, like a peer that turns bad)."""

    kind: str
    value: float | None = None
    start_step: int = 0

    @classmethod
    def parse(cls, text: str, start_step: int = 0) -> FaultSpec:
        if not isinstance(text, str):
            raise FaultSpecError(text, "must be a string")
        if isinstance(start_step, bool) or not isinstance(start_step, int) or start_step < 0:
            raise FaultSpecError(text, f"start_step must be a non-negative integer, got {start_step!r}")
        kind, sep, raw = text.strip().partition("=")
        kind = kind.strip().lower()
        if kind not in _KINDS:
            raise FaultSpecError(text, f"unknown kind {kind!r}; valid kinds: {', '.join(FAULT_KINDS)}")
        takes, required, default = _KINDS[kind]
        if sep and not takes:
            raise FaultSpecError(text, f"{kind!r} takes no value")
        if not sep:
            if required:
                raise FaultSpecError(text, f"{kind!r} needs a value, e.g. {kind}=100")
            return cls(kind, default, start_step)
        try:
            value = float(raw)
        except ValueError:
            raise FaultSpecError(text, f"value {raw!r} is not a number") from None
        if not math.isfinite(value):
            raise FaultSpecError(text, "value must be finite")
        if kind == "bitflip" and not 0.0 < value <= 1.0:
            raise FaultSpecError(text, "bitflip probability must be in (0, 1]")
        if kind in ("random", "random-scale") and value <= 0:
            raise FaultSpecError(text, f"{kind} value must be > 0")
        return cls(kind, value, start_step)

    def __str__(self) -> str:
        value = "" if self.value is None else f"={self.value:g}"
        return f"{self.kind}{value}@{self.start_step}"


def _scaled(payload: Payload, factor: float) -> Payload:
    f = torch.tensor(factor, dtype=torch.float32)
    return Payload({n: SparseTensor(e.values * f, e.indices) for n, e in payload.tensors.items()})


def _random_like(
    payload: Payload, spec: PayloadSpec, rng: np.random.Generator, norm_factor: float
) -> Payload:
    """Fresh random unique indices per chunk and Gaussian values, scaled to ``norm_factor`` x the honest
    payload's norm: a random direction, uncorrelated with every honest peer."""
    honest_sq = sum(float(e.values.double().square().sum()) for e in payload.tensors.values())
    tensors: dict[str, SparseTensor] = {}
    for t in spec.tensors:
        values = rng.standard_normal((t.n_chunks, t.k)).astype(np.float32)
        indices = None
        if not t.dense:
            keys = rng.random((t.n_chunks, t.chunk_numel))
            indices = torch.from_numpy(np.sort(np.argpartition(keys, t.k - 1, axis=1)[:, : t.k], axis=1))
        tensors[t.name] = SparseTensor(torch.from_numpy(values), indices)
    random_sq = sum(float(e.values.double().square().sum()) for e in tensors.values())
    factor = norm_factor * math.sqrt(honest_sq / random_sq) if random_sq > 0 else 0.0
    return _scaled(Payload(tensors), factor)


def _with_nan(payload: Payload) -> Payload:
    tensors = dict(payload.tensors)
    name = next(iter(tensors))
    values = tensors[name].values.clone()
    values.view(-1)[0] = float("nan")
    tensors[name] = SparseTensor(values, tensors[name].indices)
    return Payload(tensors)


def _with_duplicate_index(payload: Payload) -> Payload:
    tensors = dict(payload.tensors)
    for name, entry in tensors.items():
        if entry.indices is not None and entry.indices.shape[1] >= 2:
            indices = entry.indices.clone()
            indices[0, 1] = indices[0, 0]
            tensors[name] = SparseTensor(entry.values, indices)
            return Payload(tensors)
    raise FaultSpecError("duplicate-index", "no sparse tensor with k >= 2 to repeat an index in")


def _flip_bits(data: bytes, p: float, rng: np.random.Generator) -> bytes:
    bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8))
    flips = rng.random(bits.size) < p
    return np.packbits(bits ^ flips.astype(np.uint8)).tobytes()


def corrupt_payload(
    fault: FaultSpec, payload: Payload, spec: PayloadSpec, rng: np.random.Generator
) -> Payload:
    """The payload a peer with ``fault`` sends instead of ``payload`` (value-level faults only; wire-level
    ones such as bitflip, stale, silent and equivocate are in :meth:`FaultInjector.emit`)."""
    kind, value = fault.kind, fault.value
    if kind == "sign-flip":
        return _scaled(payload, -(value if value is not None else 1.0))
    if kind == "scale":
        return _scaled(payload, value if value is not None else 1.0)
    if kind == "random-scale":
        exponent = value if value is not None else 3.0
        return _scaled(payload, 10.0 ** rng.uniform(-exponent, exponent))
    if kind == "random":
        return _random_like(payload, spec, rng, value if value is not None else 1.0)
    if kind == "nan":
        return _with_nan(payload)
    if kind == "duplicate-index":
        return _with_duplicate_index(payload)
    return payload


class FaultInjector:
    """Per-peer state of a fault (the previous bytes for ``stale``); randomness from ``(seed, step)`` only,
    so a scenario replays exactly."""

    def __init__(self, fault: FaultSpec, seed: int = 0) -> None:
        self.fault = fault
        self.seed = seed
        self._previous: bytes | None = None

    def rewrite(self, step: int, data: bytes, spec: PayloadSpec, run_id: bytes, peer_id: str) -> list[bytes]:
        """:meth:`emit` for a caller that holds its honest payload as encoded bytes (the daemon's trainer
        encodes as it prepares): decode them back, with full validation, and emit from there."""
        header, payload = decode(data, spec, run_id=run_id, sender=peer_id, step=step)
        return self.emit(step, header, payload, spec)

    def emit(self, step: int, header: Header, payload: Payload, spec: PayloadSpec) -> list[bytes]:
        """What goes on the wire for this step: no message (silent), one, or two different ones
        (equivocate)."""
        honest = encode(header, payload, spec)
        if step < self.fault.start_step:
            self._previous = honest
            return [honest]
        rng = np.random.default_rng([self.seed, step])
        kind = self.fault.kind
        if kind == "silent":
            return []
        if kind == "stale":
            previous, self._previous = self._previous, honest
            return [previous] if previous is not None else []
        if kind == "equivocate":
            return [honest, encode(header, _scaled(payload, -1.0), spec)]
        if kind == "bitflip":
            return [_flip_bits(honest, self.fault.value or 1e-3, rng)]
        invalid = kind in ("nan", "duplicate-index")
        return [encode(header, corrupt_payload(self.fault, payload, spec, rng), spec, allow_invalid=invalid)]

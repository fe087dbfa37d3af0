"""Fault specs parse strictly, and each fault produces what threats.md says a faulty peer sends."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from distro_node.compression.errors import PayloadError
from distro_node.compression.payload import Header, Payload, PayloadSpec, SparseTensor, TensorSpec
from distro_node.compression.wire import decode
from distro_node.node.faults import FAULT_KINDS, FaultInjector, FaultSpec, FaultSpecError, corrupt_payload

RUN = b"r" * 32
SPEC = PayloadSpec(
    strategy="distro",
    tensors=(TensorSpec("w", 2, 16, 4), TensorSpec("b", 1, 4, 4)),
    layout_digest=b"L" * 32,
    index_codec="packed",
    value_codec="fp32",
)


def _payload() -> Payload:
    return Payload(
        {
            "w": SparseTensor(
                torch.tensor([[1.0, -2.0, 3.0, 0.5], [0.25, -1.0, 2.0, 4.0]]),
                torch.tensor([[0, 3, 7, 9], [1, 2, 5, 15]]),
            ),
            "b": SparseTensor(torch.tensor([[1.0, 2.0, -3.0, 4.0]])),
        }
    )


def _header(step: int, peer: str = "p1") -> Header:
    return Header(RUN, step, peer, "distro", SPEC.layout_digest, SPEC.settings_digest())


def _decode(data: bytes, step: int) -> Payload:
    return decode(data, SPEC, run_id=RUN, sender="p1", step=step)[1]


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        ("sign-flip", "sign-flip", 1.0),
        ("sign-flip=100", "sign-flip", 100.0),
        ("scale=0.001", "scale", 0.001),
        ("random=100", "random", 100.0),
        ("random-scale", "random-scale", 3.0),
        ("bitflip=1e-3", "bitflip", 1e-3),
        (" NaN ", "nan", None),
        ("duplicate-index", "duplicate-index", None),
        ("stale", "stale", None),
        ("silent", "silent", None),
        ("equivocate", "equivocate", None),
    ],
)
def test_parse(text: str, kind: str, value: float | None) -> None:
    spec = FaultSpec.parse(text, start_step=5)
    assert (spec.kind, spec.value, spec.start_step) == (kind, value, 5)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("flip", "unknown kind"),
        ("", "unknown kind"),
        ("scale", "needs a value"),
        ("scale=abc", "not a number"),
        ("scale=inf", "finite"),
        ("nan=3", "takes no value"),
        ("bitflip=2", "probability"),
        ("random=-1", "> 0"),
    ],
)
def test_parse_errors_are_typed(text: str, fragment: str) -> None:
    with pytest.raises(FaultSpecError, match=fragment) as err:
        FaultSpec.parse(text)
    assert err.value.text == text


def test_parse_rejects_bad_start_step_and_non_strings() -> None:
    with pytest.raises(FaultSpecError, match="start_step"):
        FaultSpec.parse("silent", start_step=-1)
    with pytest.raises(FaultSpecError, match="string"):
        FaultSpec.parse(3)  # type: ignore[arg-type]
    assert set(FAULT_KINDS) >= {"sign-flip", "scale", "random", "nan", "stale", "silent", "equivocate"}


def test_value_faults() -> None:
    rng = np.random.default_rng(0)
    honest = _payload()
    flipped = corrupt_payload(FaultSpec.parse("sign-flip=100"), honest, SPEC, rng)
    assert torch.equal(flipped.tensors["w"].values, honest.tensors["w"].values * -100)
    random = corrupt_payload(FaultSpec.parse("random=10"), honest, SPEC, rng)
    norm = lambda p: sum(float(e.values.double().square().sum()) for e in p.tensors.values()) ** 0.5  # noqa: E731
    assert norm(random) == pytest.approx(10 * norm(honest), rel=1e-5)
    idx = random.tensors["w"].indices
    assert idx is not None and bool((idx.diff(dim=1) > 0).all())


@pytest.mark.parametrize(("text", "reason"), [("nan", "non_finite"), ("duplicate-index", "duplicate_index")])
def test_invalid_payloads_are_encoded_and_rejected(text: str, reason: str) -> None:
    out = FaultInjector(FaultSpec.parse(text)).emit(3, _header(3), _payload(), SPEC)
    assert len(out) == 1
    with pytest.raises(PayloadError) as err:
        _decode(out[0], 3)
    assert err.value.reason == reason


def test_wire_faults() -> None:
    honest = _payload()
    assert FaultInjector(FaultSpec.parse("silent")).emit(0, _header(0), honest, SPEC) == []
    two = FaultInjector(FaultSpec.parse("equivocate")).emit(0, _header(0), honest, SPEC)
    assert len(two) == 2 and two[0] != two[1]
    assert all(torch.is_tensor(_decode(d, 0).tensors["w"].values) for d in two)
    stale = FaultInjector(FaultSpec.parse("stale"))
    assert stale.emit(0, _header(0), honest, SPEC) == []
    (old,) = stale.emit(1, _header(1), honest, SPEC)
    with pytest.raises(PayloadError) as err:
        _decode(old, 1)
    assert err.value.reason == "step"


def test_fault_starts_at_start_step_and_replays_exactly() -> None:
    fault = FaultSpec.parse("bitflip=0.05", start_step=2)
    honest = _payload()
    a, b = FaultInjector(fault, seed=7), FaultInjector(fault, seed=7)
    assert _decode(a.emit(1, _header(1), honest, SPEC)[0], 1) is not None
    assert a.emit(2, _header(2), honest, SPEC) == b.emit(2, _header(2), honest, SPEC)

"""The daemon's fault entry point (``FaultInjector.rewrite``: from encoded bytes), the swarm's --fault flag,
and the per-round agreement metrics."""

from __future__ import annotations

import argparse

import pytest
import torch
from distro_node.compression.payload import Header, Payload, PayloadSpec, SparseTensor, TensorSpec
from distro_node.compression.wire import decode, encode
from distro_node.node.cli.common import UsageError
from distro_node.node.cli.main import build_parser
from distro_node.node.cli.swarm import _check
from distro_node.node.faults import FaultInjector, FaultSpec, fault_usage
from distro_node.node.metrics import MetricsError, NodeMetrics
from prometheus_client import generate_latest

RUN = b"r" * 32
SPEC = PayloadSpec(strategy="distro", tensors=(TensorSpec("w", 2, 16, 4),), layout_digest=b"L" * 32,
                   index_codec="packed", value_codec="bf16")


def _honest(step: int) -> bytes:
    payload = Payload({"w": SparseTensor(torch.tensor([[1.0, -2.0, 3.0, 0.5], [0.25, -1.0, 2.0, 4.0]]),
                                         torch.tensor([[0, 3, 7, 9], [1, 2, 5, 15]]))})
    header = Header(RUN, step, "p1", "distro", SPEC.layout_digest, SPEC.settings_digest())
    return encode(header, payload, SPEC)


def test_rewrite_from_bytes_matches_emit_and_scales_on_the_wire() -> None:
    data = _honest(3)
    out = FaultInjector(FaultSpec.parse("scale=100")).rewrite(3, data, SPEC, RUN, "p1")
    assert len(out) == 1 and out[0] != data
    scaled = decode(out[0], SPEC, run_id=RUN, sender="p1", step=3)[1].tensors["w"].values
    honest = decode(data, SPEC, run_id=RUN, sender="p1", step=3)[1].tensors["w"].values
    assert torch.equal(scaled, honest * 100)
    later = FaultInjector(FaultSpec.parse("scale=100", start_step=4))
    assert later.rewrite(3, data, SPEC, RUN, "p1") == [data]
    assert FaultInjector(FaultSpec.parse("silent")).rewrite(3, data, SPEC, RUN, "p1") == []
    two = FaultInjector(FaultSpec.parse("equivocate")).rewrite(3, data, SPEC, RUN, "p1")
    assert len(two) == 2 and two[0] == data and two[1] != data


def test_fault_usage_lists_every_kind() -> None:
    usage = fault_usage()
    for kind in ("sign-flip[=F]", "scale=F", "silent", "equivocate", "stale", "nan"):
        assert kind in usage


def _swarm_args(*extra: str) -> argparse.Namespace:
    return build_parser().parse_args(["swarm", "--peers", "4", *extra])


def test_swarm_fault_flags_are_checked() -> None:
    faults = _check(_swarm_args("--fault", "3:scale=100", "--fault", "0:silent"))
    assert faults == {3: "scale=100", 0: "silent"}
    for bad in ("3", "x:silent", "4:silent", "1:scale", "1:bogus"):
        with pytest.raises(UsageError) as err:
            _check(_swarm_args("--fault", bad))
        assert err.value.field == "--fault"
    with pytest.raises(UsageError, match="two faults"):
        _check(_swarm_args("--fault", "1:silent", "--fault", "1:stale"))
    with pytest.raises(UsageError, match="honest"):
        _check(_swarm_args(*[a for i in range(4) for a in ("--fault", f"{i}:silent")]))
    with pytest.raises(UsageError) as err:
        _check(_swarm_args("--fault-start", "-1"))
    assert err.value.field == "--fault-start"


def test_join_fault_flags_are_checked() -> None:
    from distro_node.node.cli.join import _fault

    parse = build_parser().parse_args
    spec = _fault(parse(["join", "--fault", "scale=100", "--fault-start", "5"]))
    assert spec == FaultSpec("scale", 100.0, 5)
    assert _fault(parse(["join"])) is None
    for argv, field in ((["--fault-start", "2"], "--fault-start"), (["--fault", "scale"], "--fault"),
                        (["--fault", "silent", "--fault-start", "-1"], "--fault-start")):
        with pytest.raises(UsageError) as err:
            _fault(parse(["join", *argv]))
        assert err.value.field == field


def test_round_agreement_metrics() -> None:
    metrics = NodeMetrics(process_metrics=False)
    metrics.round_scores(-0.25, 0.06, -1.5)
    text = generate_latest(metrics.registry).decode()
    assert "distro_round_agreement_min -0.25" in text
    assert "distro_round_agreement_median 0.06" in text
    assert "distro_peer_score_min -1.5" in text
    with pytest.raises(MetricsError) as err:
        metrics.round_scores(-2.0, 0.0, None)
    assert err.value.field == "agreement_min"
    with pytest.raises(MetricsError) as err:
        metrics.round_scores(0.0, 0.0, float("nan"))
    assert err.value.field == "score_min"

"""The simulator's device and precision (node/sim/experiment.py): local choices, checked like a daemon's, and
kept out of the run id; on cuda the same code runs (tests/gpu/test_gpu_sim.py)."""

from __future__ import annotations

import pytest
import torch
from distro_node.compression.payload import Payload, SparseTensor
from distro_node.node.sim.experiment import ExperimentConfig, ExperimentConfigError, run_experiment


@pytest.mark.parametrize(("kwargs", "field"),
                         [({"device": "tpu"}, "device"), ({"precision": "fp16"}, "precision")])
def test_a_bad_device_or_precision_names_its_field(kwargs: dict[str, str], field: str) -> None:
    with pytest.raises(ExperimentConfigError) as info:
        ExperimentConfig(**kwargs)
    assert info.value.field == field


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error of a machine without CUDA")
def test_cuda_without_cuda_is_an_error_naming_device() -> None:
    with pytest.raises(ExperimentConfigError, match="not available") as info:
        run_experiment(ExperimentConfig(peers=2, steps=1, device="cuda"))
    assert info.value.field == "device"


def test_device_and_precision_are_not_part_of_the_run() -> None:
    assert ExperimentConfig(precision="bf16").run_id() == ExperimentConfig().run_id()


def test_bf16_autocast_keeps_replicas_identical() -> None:
    result = run_experiment(ExperimentConfig(peers=2, steps=3, precision="bf16"))
    assert result.replicas_identical
    assert result.final_eval_loss != run_experiment(ExperimentConfig(peers=2, steps=3)).final_eval_loss


def test_payload_to_moves_every_tensor_and_keeps_the_validation_mark() -> None:
    payload = Payload({"w": SparseTensor(torch.ones(2, 3), torch.zeros(2, 3, dtype=torch.int64)),
                       "b": SparseTensor(torch.ones(1, 4))}, validated_for=b"fp")
    assert payload.to(torch.device("cpu")) is payload  # already there: nothing copied
    moved = payload.to(torch.device("meta"))
    assert all(t.values.is_meta for t in moved.tensors.values())
    assert moved.tensors["w"].indices is not None and moved.tensors["w"].indices.is_meta
    assert moved.tensors["b"].indices is None and moved.validated_for == b"fp"

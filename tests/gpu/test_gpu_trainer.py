"""The daemon's trainer on a CUDA device: peers on a GPU (bf16 or fp32, with or without accumulation) and
peers on a CPU train one run bit-identically, because the replicated update runs on the CPU master copy
(node/peer/trainer.py). Skipped without CUDA; run on a GPU machine with ``pytest -m gpu``."""

from __future__ import annotations

import pytest
import torch
from distro_node.node.data.sampling import sample_batch
from distro_node.node.peer.local import LocalSettings
from distro_node.node.peer.manifest import RunManifest
from distro_node.node.peer.trainer import Trainer

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

MANIFEST = RunManifest(settings={"schedule": {"lr": 3e-3}}, nonce="gpu-trainer")
BF16 = LocalSettings(device="cuda", precision="bf16")


def _batch(trainer: Trainer, step: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    m = trainer.manifest
    return sample_batch(trainer.source, run_id=trainer.run_id, step=step, peer=trainer.peer_id,
                        batch_size=m.batch_size, seq_len=m.seq_len)


def _rounds(trainers: list[Trainer], steps: int) -> list[set[bytes]]:
    """Every trainer computes, every trainer applies every payload; the set of hashes after each step."""
    out = []
    for s in range(steps):
        done = [t.compute(s) for t in trainers]
        assert all(d.data is not None for d in done)
        payloads = {t.peer_id: trainers[-1].decode(d.data, t.peer_id, s)  # type: ignore[arg-type]
                    for t, d in zip(trainers, done, strict=True)}
        out.append({t.apply(s, payloads) for t in trainers})
    return out


def test_gpu_and_cpu_peers_stay_bit_identical() -> None:
    trainers = [
        Trainer(MANIFEST, "peer-gpu-bf16", BF16),
        Trainer(MANIFEST, "peer-gpu-fp32", LocalSettings(device="cuda", precision="fp32", grad_accum=2)),
        Trainer(MANIFEST, "peer-cpu"),
    ]
    assert trainers[0].work is not trainers[0].model and trainers[0].work.head.is_cuda
    hashes = _rounds(trainers, 5)
    assert all(len(row) == 1 for row in hashes), hashes
    assert len({next(iter(row)) for row in hashes}) == 5  # the weights moved every step


def test_working_copy_takes_the_master_bits_and_hands_back_fp32_cpu_gradients() -> None:
    trainer = Trainer(MANIFEST, "p", BF16)
    for s in range(2):
        done = trainer.compute(s)
        trainer.apply(s, {"p": trainer.decode(done.data, "p", s)})  # type: ignore[arg-type]
    trainer.forward_backward(*_batch(trainer, 2))
    for w, p in zip(trainer.work.parameters(), trainer.model.parameters(), strict=True):
        assert w.is_cuda and w.dtype == torch.float32 and not p.is_cuda
        assert torch.equal(w.detach().cpu(), p.detach())
        assert p.grad is not None and not p.grad.is_cuda and p.grad.dtype == torch.float32
    assert set(trainer.last_phases) == {"copy_in", "forward_backward", "copy_out"}
    assert trainer.last_phases["copy_in"] > 0 and trainer.last_phases["copy_out"] > 0


def test_bf16_autocast_runs_on_cuda_and_learns() -> None:
    bf16 = Trainer(MANIFEST, "solo", BF16)
    fp32 = Trainer(MANIFEST, "solo")
    first = bf16.compute(0)
    assert first.loss != fp32.compute(0).loss  # bf16 matmuls really ran ...
    before = fp32.heldout_loss()
    assert abs(first.loss - before) < 0.5  # ... on the same weights
    bf16.apply(0, {"solo": bf16.decode(first.data, "solo", 0)})  # type: ignore[arg-type]
    for s in range(1, 20):
        done = bf16.compute(s)
        bf16.apply(s, {"solo": bf16.decode(done.data, "solo", s)})  # type: ignore[arg-type]
    # The held-out loss of the master weights (fp32, CPU): 5.533 -> 5.414 in the same run on CPU in bf16.
    assert bf16.heldout_loss() < before - 0.06


@pytest.mark.parametrize("n", [2, 4])
def test_grad_accum_on_cuda_gives_the_whole_batch_gradient(n: int) -> None:
    manifest = RunManifest(nonce="gpu-accum", grad_clip=0.0)
    one = Trainer(manifest, "p", LocalSettings(device="cuda", precision="fp32"))
    many = Trainer(manifest, "p", LocalSettings(device="cuda", precision="fp32", grad_accum=n))
    assert one.forward_backward(*_batch(one)) == pytest.approx(many.forward_backward(*_batch(many)), rel=1e-4)
    for (name, a), b in zip(one.model.named_parameters(), many.model.parameters(), strict=True):
        assert a.grad is not None and b.grad is not None
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-3, atol=1e-5, msg=name)


def test_gpu_gradient_matches_the_cpu_gradient_in_fp32() -> None:
    """The working copy computes the same function as the master: fp32 gradients agree to rounding."""
    manifest = RunManifest(nonce="gpu-vs-cpu", grad_clip=0.0)
    gpu = Trainer(manifest, "p", LocalSettings(device="cuda", precision="fp32"))
    cpu = Trainer(manifest, "p")
    assert gpu.forward_backward(*_batch(gpu)) == pytest.approx(cpu.forward_backward(*_batch(cpu)), rel=1e-4)
    for (name, a), b in zip(cpu.model.named_parameters(), gpu.model.parameters(), strict=True):
        assert a.grad is not None and b.grad is not None
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-3, atol=1e-5, msg=name)

"""The daemon's trainer with its local settings: device choice, bf16 autocast, gradient accumulation, and the
gradient clipping norm taken from the manifest. In process (no network): two Trainers exchanging payloads
the way two peers do."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest
import torch
from distro_node.node.config.load import load_config
from distro_node.node.data.sampling import sample_batch
from distro_node.node.device import DeviceUnavailableError, select_device, select_precision
from distro_node.node.peer.local import LocalSettings, LocalSetupError
from distro_node.node.peer.manifest import RunManifest
from distro_node.node.peer.trainer import Trainer

# The manifest `join` founds by default (DisTrO at the demo lr), with a fixed nonce so the run id is fixed.
MANIFEST = RunManifest(settings={"schedule": {"lr": 3e-3}}, nonce="fixed-nonce")
# Recorded with the trainer as it was before devices, precision and accumulation existed (CPU, fp32, one
# backward): the run id and the weights hash after 4 steps of two peers must not move. Bit-level figures of
# this machine's torch build; another CPU family may need them re-recorded.
RUN_ID = "a5ae6c937083aba71cbe7061f5f06423dee667a02d5e541359902586b28eccba"
HASH_AFTER_4 = "e36064e46de855485b47faac65682c9f80457564730e6d7fb8b2c9f9a88fb344"


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def run_pair(trainers: list[Trainer], steps: int) -> list[list[bytes]]:
    """Sequential rounds in which every trainer applies every trainer's decoded payload; hashes per step."""
    hashes = []
    for s in range(steps):
        done = [t.compute(s) for t in trainers]
        payloads = {t.peer_id: trainers[0].decode(d.data, t.peer_id, s)  # type: ignore[arg-type]
                    for t, d in zip(trainers, done, strict=True)}
        hashes.append([t.apply(s, payloads) for t in trainers])
    return hashes


def test_cpu_run_is_unchanged() -> None:
    assert MANIFEST.run_id().hex() == RUN_ID
    trainers = [Trainer(MANIFEST, "peer-a"), Trainer(MANIFEST, "peer-b")]
    assert all(t.work is t.model for t in trainers)  # cpu: no working copy, nothing copied
    hashes = run_pair(trainers, 4)
    assert {h.hex() for h in hashes[-1]} == {HASH_AFTER_4}


def test_working_copy_path_gives_the_same_bits() -> None:
    """The accelerator path (weights copied into a working model, gradients copied back into the CPU
    master) exercised on CPU: copies are exact, so it must reproduce the in-place bits."""
    trainers = [Trainer(MANIFEST, "peer-a"), Trainer(MANIFEST, "peer-b")]
    for t in trainers:
        t.work = copy.deepcopy(t.model)
    hashes = run_pair(trainers, 4)
    assert {h.hex() for h in hashes[-1]} == {HASH_AFTER_4}
    assert all(w is not p for w, p in zip(trainers[0].work.parameters(), trainers[0].model.parameters(),
                                                  strict=True))


@pytest.mark.parametrize(("available", "chosen"), [
    ({"cuda": True, "mps": True, "cpu": True}, "cuda"),
    ({"cuda": False, "mps": True, "cpu": True}, "mps"),
    ({"cuda": False, "mps": False, "cpu": True}, "cpu"),
])
def test_auto_prefers_cuda_then_mps_then_cpu(available: dict[str, bool], chosen: str) -> None:
    assert select_device("auto", available) == chosen


def test_auto_reads_torch_availability(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert select_device("auto") == "cuda"
    local = LocalSettings.from_config(load_config(None, env={}))
    assert (local.device, local.precision) == ("cuda", "bf16")  # auto precision follows the device
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert LocalSettings.from_config(load_config(None, env={})).device == "cpu"


@pytest.mark.parametrize("device", ["cuda", "mps"])
def test_missing_device_is_an_error_naming_device(device: str) -> None:
    config = load_config(None, env={}, flags={"device": device})
    with pytest.raises(DeviceUnavailableError) as info:
        LocalSettings.from_config(config, available={"cuda": False, "mps": False, "cpu": True})
    assert info.value.field == "device"
    assert str(info.value).startswith(f"device: '{device}' is not available")


def test_precision_defaults_to_fp32_off_cuda() -> None:
    assert select_precision("auto", "cpu") == "fp32"
    assert select_precision("auto", "mps") == "fp32"
    assert select_precision("auto", "cuda") == "bf16"
    assert select_precision("bf16", "cpu") == "bf16"
    local = LocalSettings.from_config(load_config(None, env={}), available={"cpu": True})
    assert (local.device, local.precision) == ("cpu", "fp32")


def test_bf16_autocast_on_cpu_trains() -> None:
    manifest = RunManifest(settings={"schedule": {"lr": 3e-3}}, nonce="bf16")
    bf16 = Trainer(manifest, "solo", LocalSettings(precision="bf16"))
    fp32 = Trainer(manifest, "solo")
    losses = []
    for s in range(12):
        done = bf16.compute(s)
        losses.append(done.loss)
        bf16.apply(s, {"solo": bf16.decode(done.data, "solo", s)})  # type: ignore[arg-type]
    # bf16 matmuls really ran: the first loss differs from fp32's on the same weights and batch ...
    assert losses[0] != fp32.compute(0).loss
    assert abs(losses[0] - fp32.heldout_loss()) < 0.5
    # ... and the run learns.
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.05, losses
    assert all(p.dtype == torch.float32 for p in bf16.model.parameters())


def _batch(trainer: Trainer, step: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    m = trainer.manifest
    return sample_batch(trainer.source, run_id=trainer.run_id, step=step, peer=trainer.peer_id,
                        batch_size=m.batch_size, seq_len=m.seq_len)


@pytest.mark.parametrize("n", [2, 4])
def test_grad_accum_gives_the_whole_batch_gradient(n: int) -> None:
    manifest = RunManifest(nonce="accum", grad_clip=0.0)  # unclipped: compare the raw gradients
    one, many = Trainer(manifest, "p"), Trainer(manifest, "p", LocalSettings(grad_accum=n))
    assert many.micro_batch == manifest.batch_size // n
    loss_one = one.forward_backward(*_batch(one))
    loss_many = many.forward_backward(*_batch(many))
    assert loss_many == pytest.approx(loss_one, rel=1e-5)
    for (name, a), b in zip(one.model.named_parameters(), many.model.parameters(), strict=True):
        assert a.grad is not None and b.grad is not None
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_grad_accum_must_divide_the_batch() -> None:
    with pytest.raises(LocalSetupError) as info:
        Trainer(RunManifest(batch_size=4, nonce="x"), "p", LocalSettings(grad_accum=3))
    assert info.value.field == "run.grad_accum"
    with pytest.raises(LocalSetupError, match=r"run\.grad_accum"):
        LocalSettings(grad_accum=0)


def test_peers_with_different_grad_accum_stay_in_sync() -> None:
    trainers = [Trainer(MANIFEST, "peer-a"), Trainer(MANIFEST, "peer-b", LocalSettings(grad_accum=2))]
    hashes = run_pair(trainers, 4)
    assert all(len(set(row)) == 1 for row in hashes)
    assert len({row[0] for row in hashes}) == 4  # the weights did move every step


@pytest.mark.parametrize(("clip", "expect_clipped"), [(1.0, True), (0.0, False)])
def test_grad_clip_comes_from_the_manifest(clip: float, expect_clipped: bool) -> None:
    trainer = Trainer(RunManifest(nonce="clip", grad_clip=clip), "p")
    trainer.forward_backward(*_batch(trainer))
    norm = float(torch.nn.utils.get_total_norm([p.grad for p in trainer.model.parameters()]))
    # The tiny model's first gradient has norm ~1.23 on this batch.
    assert norm == pytest.approx(1.0, rel=1e-4) if expect_clipped else norm > 1.05


def test_a_peer_left_out_of_a_decided_list_is_settled_as_left_out() -> None:
    """Late upload, warming or beyond the bound K: the trainer sees only a decided list without its own
    payload, and tells the strategy before applying, so its momentum ends as a left-out peer's
    (tests/optimizer/test_withheld.py checks what that is); an included twin's does not."""
    left_out, included, told, other = (Trainer(MANIFEST, p) for p in ("peer-a", "peer-a", "peer-a", "peer-b"))
    done = [t.compute(0) for t in (left_out, included, told, other)]
    own = other.decode(done[0].data, "peer-a", 0)  # type: ignore[arg-type]
    theirs = other.decode(done[3].data, "peer-b", 0)  # type: ignore[arg-type]
    included.apply(0, {"peer-a": own, "peer-b": theirs})
    left_out.apply(0, {"peer-b": theirs})
    told.strategy.withheld(0)
    told.strategy.apply(0, {"peer-b": theirs})
    kept = left_out.strategy._delta  # type: ignore[attr-defined]
    assert all(torch.equal(kept[n], d) for n, d in told.strategy._delta.items())  # type: ignore[attr-defined]
    spent = included.strategy._delta  # type: ignore[attr-defined]
    assert not all(torch.allclose(spent[n], d, atol=1e-7, rtol=0) for n, d in kept.items())

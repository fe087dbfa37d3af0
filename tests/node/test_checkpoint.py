"""Checkpoints: bit-exact round trip of a model and DisTrO state, keep-last-K, and detection of every kind
of damage, with fallback to the newest checkpoint that still verifies."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from distro_node.node.checkpoint.errors import CheckpointLockedError
from distro_node.node.checkpoint.files import writer_lock
from distro_node.node.checkpoint.store import (
    Checkpoint,
    CheckpointError,
    CheckpointMismatchError,
    CheckpointStateError,
    CheckpointStore,
    CorruptCheckpointError,
    load_checkpoint,
    load_latest,
)
from distro_node.node.model import Llama, next_token_loss
from distro_node.node.presets import preset
from distro_node.optimizer.base import Strategy
from distro_node.optimizer.registry import build_strategy

RUN = bytes(range(16))


@pytest.fixture(autouse=True)
def _single_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def train(model: Llama, strategy: Strategy, steps: range) -> None:
    """One peer following the documented caller order; batches depend only on the step."""
    for step in steps:
        strategy.pre_forward(step)
        model.zero_grad(set_to_none=True)
        tokens = torch.randint(0, 256, (2, 17), generator=torch.Generator().manual_seed(step))
        next_token_loss(model(tokens[:, :-1]), tokens[:, 1:]).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        strategy.post_backward(step)
        payload = strategy.prepare(step)
        strategy.apply(step, {"me": payload} if payload is not None else {})


def same(a: Any, b: Any) -> bool:
    """Structural, bit-level equality (dtype, shape and bytes of tensors; NaN equals NaN)."""
    if isinstance(a, torch.Tensor):
        return (
            isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
        )
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return type(a) is type(b) and a == b


def save(store: CheckpointStore, step: int, state: Any = None, **kwargs: Any) -> Path:
    return store.save(
        step=step,
        run_id=RUN,
        config_digest="digest",
        model_state={"w": torch.full((4, 4), float(step))},
        strategy_name="distro",
        strategy_state=state if state is not None else {"step": step, "m": torch.arange(8.0) * step},
        **kwargs,
    )


@pytest.mark.parametrize("update", ["sign", "adam"])
def test_round_trip_is_bit_identical_and_training_continues_identically(tmp_path: Path, update: str) -> None:
    settings = {"chunk": 8, "topk": 2, "update": update}
    model = Llama(preset("tiny"), seed=0)
    strategy = build_strategy("distro", model, settings)
    train(model, strategy, range(3))
    store = CheckpointStore(tmp_path, keep_last=2)
    store.save(
        step=2, run_id=RUN, config_digest="abc", model_state=model.state_dict(),
        strategy_name=strategy.name, strategy_state=strategy.state_dict(), extra={"weights_hash": "ff"},
    )

    resumed_model = Llama(preset("tiny"), seed=123)
    resumed = build_strategy("distro", resumed_model, settings)
    ckpt = load_latest(tmp_path)
    assert ckpt is not None and ckpt.step == 2 and ckpt.run_id == RUN and ckpt.extra == {"weights_hash": "ff"}
    ckpt.restore(resumed_model, resumed, run_id=RUN, config_digest="abc")
    assert same(model.state_dict(), resumed_model.state_dict())
    assert same(strategy.state_dict(), resumed.state_dict())

    train(model, strategy, range(3, 6))
    train(resumed_model, resumed, range(3, 6))
    assert same(model.state_dict(), resumed_model.state_dict())
    assert same(strategy.state_dict(), resumed.state_dict())


def test_nested_state_with_scalars_and_odd_tensors_round_trips(tmp_path: Path) -> None:
    base = torch.arange(12.0)
    state = {
        "version": 3,
        "nested": {"a.b": torch.ones(2), "a": {"b": torch.zeros(2)}},
        0: {"step": torch.tensor(5.0), "exp_avg": torch.randn(3, 3)},
        "list": [torch.ones(2, dtype=torch.bfloat16), None, True, 1.5, "x", (0.9, 0.95)],
        "views": [base[:6], base[6:], base.view(3, 4).t()],
        "empty": torch.empty(0, 3, dtype=torch.int64),
        "special": [math.inf, -math.inf, math.nan, -0.0],
        "digest": "00ff",
    }
    save(CheckpointStore(tmp_path), 1, state)
    ckpt = load_latest(tmp_path)
    assert ckpt is not None
    assert same(ckpt.strategy_state, {**state, "views": [t.contiguous() for t in state["views"]]})


def test_unstorable_state_is_refused_naming_its_path(tmp_path: Path) -> None:
    with pytest.raises(CheckpointStateError, match=r"strategy\.inner\.bad"):
        save(CheckpointStore(tmp_path), 1, {"inner": {"bad": {1, 2}}})
    with pytest.raises(CheckpointStateError, match="extra"):
        save(CheckpointStore(tmp_path), 1, extra={"when": object()})
    assert load_latest(tmp_path) is None


def test_keep_last_k(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep_last=2)
    for step in range(10, 15):
        save(store, step)
    assert [p.name for p in store.entries()] == [
        "ckpt-0000000004-step-000000000013",
        "ckpt-0000000005-step-000000000014",
    ]
    ckpt = load_latest(tmp_path)
    assert ckpt is not None and (ckpt.seq, ckpt.step) == (5, 14)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".") and p.name != ".lock"]


def test_newest_is_the_last_written_not_the_highest_step(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep_last=3)
    save(store, 20)
    save(store, 7)  # e.g. after a resync to an older agreed state
    ckpt = load_latest(tmp_path)
    assert ckpt is not None and ckpt.step == 7


def damage_truncate(path: Path) -> Path:
    file = path / "model.safetensors"
    file.write_bytes(file.read_bytes()[:-7])
    return file


def damage_flip(path: Path) -> Path:
    file = path / "strategy.safetensors"
    data = bytearray(file.read_bytes())
    data[len(data) - 3] ^= 0x10
    file.write_bytes(bytes(data))
    return file


def damage_remove_manifest(path: Path) -> Path:
    (path / "manifest.json").unlink()
    return path / "manifest.json"


def damage_edit_manifest(path: Path) -> Path:
    file = path / "manifest.json"
    manifest = json.loads(file.read_text())
    manifest["config_digest"] = "forged"
    file.write_text(json.dumps(manifest))
    return file


def damage_garbage_manifest(path: Path) -> Path:
    file = path / "manifest.json"
    file.write_bytes(file.read_bytes()[:40])
    return file


def damage_remove_model(path: Path) -> Path:
    (path / "model.safetensors").unlink()
    return path / "model.safetensors"


@pytest.mark.parametrize(
    "damage",
    [damage_truncate, damage_flip, damage_remove_manifest, damage_edit_manifest, damage_garbage_manifest,
     damage_remove_model],
)
def test_corrupt_newest_falls_back_and_names_the_file(tmp_path: Path, damage: Any) -> None:
    store = CheckpointStore(tmp_path, keep_last=3)
    save(store, 1)
    newest = save(store, 2)
    bad_file = damage(newest)

    with pytest.raises(CorruptCheckpointError) as info:
        load_checkpoint(newest)
    assert info.value.file == bad_file and str(bad_file) in str(info.value)

    skipped: list[tuple[Path, CheckpointError]] = []
    ckpt = load_latest(tmp_path, report=lambda p, e: skipped.append((p, e)))
    assert ckpt is not None and ckpt.step == 1
    assert [p for p, _ in skipped] == [newest]
    assert isinstance(skipped[0][1], CorruptCheckpointError) and skipped[0][1].file == bad_file


def test_only_checkpoint_corrupt_gives_none_and_deletes_nothing(tmp_path: Path) -> None:
    only = save(CheckpointStore(tmp_path), 1)
    damage_flip(only)
    assert load_latest(tmp_path) is None
    assert only.is_dir() and (only / "strategy.safetensors").exists()


def test_a_failed_save_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep_last=1)
    good = save(store, 1)
    with pytest.raises(CheckpointStateError):
        save(store, 2, {"bad": object()})
    ckpt = load_latest(tmp_path)
    assert ckpt is not None and ckpt.path == good
    assert load_latest(tmp_path / "does-not-exist") is None


def test_leftovers_are_ignored_by_readers_and_removed_by_the_next_save(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    save(store, 1)
    partial = tmp_path / ".tmp-ckpt-0000000002-step-000000000002"
    partial.mkdir()
    (partial / "model.safetensors").write_bytes(b"\x00" * 10)
    (tmp_path / ".trash-ckpt-0000000000-step-000000000000").mkdir()
    ckpt = load_latest(tmp_path)
    assert ckpt is not None and ckpt.step == 1
    save(store, 2)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == [".lock"]


def test_second_writer_is_refused(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    tmp_path.mkdir(exist_ok=True)
    with writer_lock(tmp_path), pytest.raises(CheckpointLockedError):
        save(store, 1)
    save(store, 1)


def test_restore_refuses_other_run_config_or_strategy(tmp_path: Path) -> None:
    model = Llama(preset("tiny"), seed=0)
    strategy = build_strategy("distro", model, {"chunk": 8, "topk": 2})
    CheckpointStore(tmp_path).save(
        step=0, run_id=RUN, config_digest="abc", model_state=model.state_dict(),
        strategy_name="distro", strategy_state=strategy.state_dict(),
    )
    ckpt = load_latest(tmp_path)
    assert isinstance(ckpt, Checkpoint)
    with pytest.raises(CheckpointMismatchError, match="run_id"):
        ckpt.restore(model, strategy, run_id=b"\x00" * 16)
    with pytest.raises(CheckpointMismatchError, match="config_digest"):
        ckpt.restore(model, strategy, config_digest="other")
    with pytest.raises(CheckpointMismatchError, match="strategy"):
        ckpt.restore(model, build_strategy("adamw", model))

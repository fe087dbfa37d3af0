"""Checkpoints of a running peer: what goes in, when one is written, and whether a founder may resume.

A checkpoint holds the model and the strategy state (node/checkpoint/store.py writes them crash-safely) plus,
in its JSON extras, the run manifest and the weights hash. Why the manifest: a founder that restarts must
resume *the same run* (same run id, so the swarm's payloads, batches and announcements still bind to it), and
the run id is the hash of the manifest including its random nonce, which only the checkpoint remembers.

"Same run" for a founder means: the manifest stored in the newest checkpoint equals the one the founder was
asked to create in every field but the nonce. Any other setting (a new preset, batch size, learning rate)
founds a new run instead of silently resuming an old one.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path

import trio
from distro_node.node.checkpoint.store import Checkpoint, CheckpointError, CheckpointStore, load_latest

from .manifest import ManifestError, RunManifest
from .output import Output
from .telemetry import Telemetry
from .trainer import Trainer

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resume:
    """A checkpoint a founder resumes from, with its manifest (hence its run id)."""

    checkpoint: Checkpoint
    manifest: RunManifest

    @property
    def step(self) -> int:
        return self.checkpoint.step


def find_resume(directory: Path, wanted: RunManifest) -> tuple[Resume | None, str]:
    """The newest verified checkpoint of the run ``wanted`` describes (nonce aside), or None and why not."""
    def report(path: Path, error: CheckpointError) -> None:
        logger.warning("skipping checkpoint %s: %s", path, error)

    try:
        ckpt = load_latest(directory, report=report)
    except CheckpointError as exc:
        return None, f"checkpoints unreadable: {exc}"
    if ckpt is None:
        return None, "no checkpoint"
    text = ckpt.extra.get("manifest")
    try:
        stored = RunManifest.from_bytes(text.encode() if isinstance(text, str) else b"")
    except ManifestError as exc:
        return None, f"checkpoint {ckpt.path.name} has no usable run manifest ({exc})"
    if not stored.init.files:  # saved before imported runs named their files: that run, files unnamed
        wanted = replace(wanted, init=replace(wanted.init, files=()))
    if replace(stored, nonce="") != replace(wanted, nonce=""):
        return None, f"checkpoint {ckpt.path.name} belongs to a run with other settings"
    if ckpt.run_id != stored.run_id():
        return None, f"checkpoint {ckpt.path.name}: run id does not match its manifest"
    return Resume(ckpt, stored), f"resuming run {stored.run_id().hex()[:12]} at step {ckpt.step}"


def save(store: CheckpointStore, trainer: Trainer, next_step: int) -> tuple[Path, float]:
    """Write the state at the boundary before ``next_step`` (blocking: call from the compute thread).
    Returns the path and the held-out loss of the saved weights (a resume must reproduce it exactly)."""
    heldout = trainer.heldout_loss()
    path = store.save(
        step=next_step, run_id=trainer.run_id, config_digest=trainer.run_id.hex(),
        model_state=trainer.model.state_dict(), strategy_name=trainer.strategy.name,
        strategy_state=trainer.strategy.state_dict(),
        extra={"manifest": trainer.manifest.to_bytes().decode(), "weights_hash": trainer.weights_hash.hex(),
               "heldout_loss": heldout, "saved_unix": time.time()},
    )
    return path, heldout


def restore(trainer: Trainer, resume: Resume) -> bytes:
    """Load a founder's checkpoint into its trainer; returns the weights hash (checked against the stored
    one, so a checkpoint that does not reproduce its weights is refused)."""
    ckpt = resume.checkpoint
    ckpt.restore(trainer.model, trainer.strategy, run_id=trainer.run_id, config_digest=trainer.run_id.hex())
    got = trainer.refresh_hash()
    want = ckpt.extra.get("weights_hash")
    if isinstance(want, str) and want != got.hex():
        raise CheckpointError(f"{ckpt.path}: restored weights hash {got.hex()[:12]} != saved {want[:12]}")
    return got


class Checkpointer:
    """Saves a running peer's state at step boundaries: every ``every`` steps and on exit, once per boundary.

    A failed save is reported and training goes on: a full disk must not take the swarm's peer down with it.
    """

    def __init__(
        self,
        *,
        store: CheckpointStore | None,
        every: int,
        trainer: Trainer,
        out: Output,
        telemetry: Telemetry | None,
        compute_limit: trio.CapacityLimiter,
        saved_step: int = -1,
    ) -> None:
        self._store = store  # None: checkpoints are off
        self._every = every
        self._trainer = trainer
        self._out = out
        self._telemetry = telemetry
        self._compute_limit = compute_limit
        self._saved_step = saved_step  # a resumed founder starts with its checkpoint's step

    def is_boundary(self, step: int) -> bool:
        """Whether a periodic checkpoint falls before ``step`` (never when checkpoints are off)."""
        return self._store is not None and step % self._every == 0

    async def save(self, step: int, why: str) -> None:
        """Save the state at the boundary before ``step`` (nothing at step 0 or an already saved one)."""
        store = self._store
        if store is None or step <= self._saved_step or step == 0:
            return
        t0 = time.perf_counter()
        try:
            path, heldout = await trio.to_thread.run_sync(save, store, self._trainer, step,
                                                          limiter=self._compute_limit)
        except (CheckpointError, OSError) as exc:
            self._out.emit("checkpoint_failed", f"checkpoint at step {step} failed: {exc}", step=step,
                           reason=str(exc))
            return
        self._saved_step = step
        if self._telemetry is not None:
            self._telemetry.checkpoint_saved(time.time())
        self._out.emit("checkpoint", f"checkpoint {path.name} ({why}, held-out loss {heldout:.4f})",
                       step=step, path=str(path), why=why, heldout_loss=heldout,
                       seconds=round(time.perf_counter() - t0, 3),
                       weights_hash=self._trainer.weights_hash.hex())

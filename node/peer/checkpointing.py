"""Checkpoints of a running peer: what goes in, and whether a founder may resume from one.

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

from distro_node.node.checkpoint.store import Checkpoint, CheckpointError, CheckpointStore, load_latest

from .manifest import ManifestError, RunManifest
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

"""Crash-safe checkpoints: model parameters and strategy state as safetensors, plus a JSON manifest.

Layout of a checkpoint directory ``<dir>/ckpt-<seq>-step-<step>/``::

    model.safetensors     model parameters, keys as in ``model.state_dict()``
    strategy.safetensors  every tensor of the strategy state, dotted keys
    manifest.json         format version, seq, step, run id, config digest, strategy name, sha256 and size of
                          both files, the strategy state's non-tensor structure, caller extras, and the
                          sha256 of the manifest itself

A save writes into ``.tmp-<name>``, fsyncs, then renames (see ``checkpoint_io``), so a crash at any point
leaves either the previous checkpoints or the new one complete, plus a hidden leftover that loaders ignore
and the next save removes (threats.md C1). ``seq`` orders checkpoints by write time; "latest" is the highest
seq that verifies, so a damaged newest checkpoint falls back to the one before (C4).

Public API::

    store = CheckpointStore(directory, keep_last=3)
    store.save(step=..., run_id=..., config_digest=..., model_state=model.state_dict(),
               strategy_name=strategy.name, strategy_state=strategy.state_dict())
    ckpt = load_latest(directory)           # or store.load_latest(); None when there is none
    ckpt.restore(model, strategy, run_id=..., config_digest=...)
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from distro_node.node.checkpoint.errors import (
    CheckpointError,
    CheckpointMismatchError,
    CheckpointStateError,
    CorruptCheckpointError,
)
from distro_node.node.checkpoint.files import (
    fsync_dir,
    fsync_file,
    remove_tree,
    sha256_file,
    write_bytes_durably,
    writer_lock,
)
from distro_node.node.checkpoint.tree import detached, flatten, unflatten
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "Checkpoint",
    "CheckpointError",
    "CheckpointMismatchError",
    "CheckpointStateError",
    "CheckpointStore",
    "CorruptCheckpointError",
    "load_checkpoint",
    "load_latest",
]

log = logging.getLogger(__name__)

FORMAT = "distro-node-checkpoint"
FORMAT_VERSION = 1
MODEL_FILE = "model.safetensors"
STRATEGY_FILE = "strategy.safetensors"
MANIFEST_FILE = "manifest.json"
DATA_FILES = (MODEL_FILE, STRATEGY_FILE)
TMP_PREFIX = ".tmp-"
TRASH_PREFIX = ".trash-"
MAX_MANIFEST_BYTES = 64 << 20
_NAME = re.compile(r"ckpt-(\d{10})-step-(\d{12})")
_HEX = re.compile(r"[0-9a-f]*")

Report = Callable[[Path, CheckpointError], None]


def _name(seq: int, step: int) -> str:
    return f"ckpt-{seq:010d}-step-{step:012d}"


def _manifest_digest(manifest: Mapping[str, Any]) -> str:
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _log_skip(path: Path, error: CheckpointError) -> None:
    log.warning("skipping checkpoint %s: %s", path, error)


@dataclass(frozen=True, eq=False)
class Checkpoint:
    """A verified checkpoint, loaded into CPU tensors."""

    path: Path
    seq: int
    step: int
    run_id: bytes
    config_digest: str
    strategy_name: str
    model_state: dict[str, torch.Tensor]
    strategy_state: Any
    extra: dict[str, Any] = field(default_factory=dict)
    created_unix: float = 0.0

    def check(self, *, run_id: bytes | None = None, config_digest: str | None = None) -> None:
        """Refuse a checkpoint of another run or config (None skips that check)."""
        if run_id is not None and run_id != self.run_id:
            raise CheckpointMismatchError(self.path, "run_id", run_id.hex(), self.run_id.hex())
        if config_digest is not None and config_digest != self.config_digest:
            raise CheckpointMismatchError(self.path, "config_digest", config_digest, self.config_digest)

    def restore(
        self,
        model: torch.nn.Module,
        strategy: Any,
        *,
        run_id: bytes | None = None,
        config_digest: str | None = None,
    ) -> None:
        """Load parameters (strictly: every name, no extras) and strategy state in place, after
        :meth:`check`; ``strategy`` is an ``optimizer.base.Strategy``."""
        self.check(run_id=run_id, config_digest=config_digest)
        name = getattr(strategy, "name", None)
        if name != self.strategy_name:
            raise CheckpointMismatchError(self.path, "strategy", name, self.strategy_name)
        model.load_state_dict(self.model_state, strict=True)
        strategy.load_state_dict(self.strategy_state)


class CheckpointStore:
    """Saves into one directory and keeps the newest ``keep_last``. One writer per directory (a lock file
    enforces it); any number of readers."""

    def __init__(self, directory: str | Path, keep_last: int = 3) -> None:
        if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1:
            raise ValueError(f"keep_last must be an integer >= 1, got {keep_last!r}")
        self.directory = Path(directory)
        self.keep_last = keep_last

    def entries(self) -> list[Path]:
        """Checkpoint directories by name (complete by construction, not yet verified), oldest first."""
        return _entries(self.directory)

    def load_latest(self, report: Report | None = None) -> Checkpoint | None:
        return load_latest(self.directory, report=report)

    def clean_temp(self) -> int:
        """Remove leftovers of interrupted saves and prunes; returns how many. Takes the writer lock."""
        self.directory.mkdir(parents=True, exist_ok=True)
        with writer_lock(self.directory):
            return self._clean_temp()

    def _clean_temp(self) -> int:
        removed = 0
        for path in self.directory.iterdir():
            if path.name.startswith((TMP_PREFIX, TRASH_PREFIX)):
                remove_tree(path)
                removed += 1
        return removed

    def save(
        self,
        *,
        step: int,
        run_id: bytes,
        config_digest: str,
        model_state: Mapping[str, torch.Tensor],
        strategy_name: str,
        strategy_state: Any,
        extra: Mapping[str, Any] | None = None,
    ) -> Path:
        """Write a checkpoint atomically, then prune to ``keep_last``; returns its directory.

        ``extra`` is caller metadata (weights hash, tokens seen, ...) and must be plain JSON.
        """
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < 10**12:
            raise CheckpointStateError("step", f"must be an integer in [0, 10**12), got {step!r}")
        if not isinstance(run_id, bytes):
            raise CheckpointStateError("run_id", f"must be bytes, got {type(run_id).__name__}")
        if not isinstance(config_digest, str):
            raise CheckpointStateError("config_digest", "must be a string")
        model_tensors: dict[str, torch.Tensor] = {}
        for key, tensor in model_state.items():
            if not isinstance(tensor, torch.Tensor):
                raise CheckpointStateError(f"model.{key}", "is not a tensor")
            model_tensors[key] = detached(tensor)
        skeleton, strategy_tensors = flatten(strategy_state, "strategy")
        extra_json = dict(extra or {})
        try:
            json.dumps([skeleton, extra_json], allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise CheckpointStateError("extra", f"must be plain JSON: {exc}") from None

        self.directory.mkdir(parents=True, exist_ok=True)
        with writer_lock(self.directory):
            self._clean_temp()
            existing = self.entries()
            seq = (_parse_name(existing[-1])[0] + 1) if existing else 1
            name = _name(seq, step)
            tmp = self.directory / f"{TMP_PREFIX}{name}"
            tmp.mkdir()
            files: dict[str, dict[str, Any]] = {}
            for file_name, tensors in ((MODEL_FILE, model_tensors), (STRATEGY_FILE, strategy_tensors)):
                save_file(tensors, str(tmp / file_name))
                fsync_file(tmp / file_name)
                digest, size = sha256_file(tmp / file_name)
                files[file_name] = {"sha256": digest, "bytes": size}
            manifest: dict[str, Any] = {
                "format": FORMAT,
                "format_version": FORMAT_VERSION,
                "seq": seq,
                "step": step,
                "run_id": run_id.hex(),
                "config_digest": config_digest,
                "strategy": strategy_name,
                "created_unix": time.time(),
                "files": files,
                "strategy_structure": skeleton,
                "extra": extra_json,
            }
            manifest["manifest_sha256"] = _manifest_digest(manifest)
            write_bytes_durably(tmp / MANIFEST_FILE, json.dumps(manifest, indent=1, allow_nan=False).encode())
            fsync_dir(tmp)
            final = self.directory / name
            os.rename(tmp, final)
            fsync_dir(self.directory)
            self._prune()
        return final

    def _prune(self) -> None:
        """Drop all but the newest ``keep_last``. Each goes to a hidden trash name first (atomic), so a crash
        mid-delete never leaves a half-deleted directory under a checkpoint name."""
        old = self.entries()[: -self.keep_last]
        for path in old:
            trash = self.directory / f"{TRASH_PREFIX}{path.name}"
            os.rename(path, trash)
        if old:
            fsync_dir(self.directory)
            for path in old:
                remove_tree(self.directory / f"{TRASH_PREFIX}{path.name}")


def _parse_name(path: Path) -> tuple[int, int]:
    match = _NAME.fullmatch(path.name)
    if not match:
        raise CorruptCheckpointError(path, "not a checkpoint directory name")
    return int(match.group(1)), int(match.group(2))


def _entries(directory: Path) -> list[Path]:
    try:
        names = [p for p in directory.iterdir() if _NAME.fullmatch(p.name) and p.is_dir()]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(names, key=lambda p: _parse_name(p))


def _read_manifest(path: Path) -> dict[str, Any]:
    file = path / MANIFEST_FILE
    try:
        with file.open("rb") as fh:
            raw = fh.read(MAX_MANIFEST_BYTES + 1)
    except FileNotFoundError:
        raise CorruptCheckpointError(file, "manifest missing") from None
    except OSError as exc:
        raise CorruptCheckpointError(file, f"cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_MANIFEST_BYTES:
        raise CorruptCheckpointError(file, f"larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        manifest = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise CorruptCheckpointError(file, f"not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("manifest_sha256") != _manifest_digest(manifest):
        raise CorruptCheckpointError(file, "manifest checksum mismatch")
    if manifest.get("format") != FORMAT or manifest.get("format_version") != FORMAT_VERSION:
        raise CorruptCheckpointError(
            file, f"unsupported format {manifest.get('format')!r} v{manifest.get('format_version')!r}"
        )
    seq, step = _parse_name(path)
    if manifest.get("seq") != seq or manifest.get("step") != step:
        raise CorruptCheckpointError(file, "seq/step do not match the directory name")
    for key, kind in (("run_id", str), ("config_digest", str), ("strategy", str), ("files", dict),
                      ("extra", dict), ("created_unix", float)):
        if not isinstance(manifest.get(key), kind):
            raise CorruptCheckpointError(file, f"{key}: missing or not a {kind.__name__}")
    if not _HEX.fullmatch(manifest["run_id"]) or len(manifest["run_id"]) % 2:
        raise CorruptCheckpointError(file, "run_id: not hex")
    return manifest


def _verified_tensors(path: Path, name: str, entry: Any) -> dict[str, torch.Tensor]:
    file = path / name
    if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
        raise CorruptCheckpointError(path / MANIFEST_FILE, f"files.{name}: malformed entry")
    try:
        digest, size = sha256_file(file)
    except FileNotFoundError:
        raise CorruptCheckpointError(file, "missing") from None
    except OSError as exc:
        raise CorruptCheckpointError(file, f"cannot read: {exc.strerror or exc}") from None
    if size != entry.get("bytes"):
        expected = entry.get("bytes")
        raise CorruptCheckpointError(file, f"size {size} bytes, manifest says {expected} (truncated?)")
    if digest != entry["sha256"]:
        raise CorruptCheckpointError(file, "sha256 mismatch (corrupted)")
    try:
        return load_file(str(file))
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise CorruptCheckpointError(file, f"unreadable safetensors ({exc})") from None


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Load and verify one checkpoint directory; :class:`CorruptCheckpointError` names the bad file."""
    path = Path(path)
    manifest = _read_manifest(path)
    files = manifest["files"]
    if set(files) != set(DATA_FILES):
        raise CorruptCheckpointError(path / MANIFEST_FILE, f"files: expected {sorted(DATA_FILES)}")
    model_state = _verified_tensors(path, MODEL_FILE, files[MODEL_FILE])
    strategy_tensors = _verified_tensors(path, STRATEGY_FILE, files[STRATEGY_FILE])
    try:
        strategy_state = unflatten(manifest.get("strategy_structure"), strategy_tensors)
    except ValueError as exc:
        raise CorruptCheckpointError(path / MANIFEST_FILE, f"strategy_structure: {exc}") from None
    return Checkpoint(
        path=path,
        seq=manifest["seq"],
        step=manifest["step"],
        run_id=bytes.fromhex(manifest["run_id"]),
        config_digest=manifest["config_digest"],
        strategy_name=manifest["strategy"],
        model_state=model_state,
        strategy_state=strategy_state,
        extra=manifest["extra"],
        created_unix=manifest["created_unix"],
    )


def load_latest(directory: str | Path, report: Report | None = None) -> Checkpoint | None:
    """The newest checkpoint in ``directory`` that verifies, or None. Each one skipped (partial, corrupt) is
    passed to ``report`` (default: a warning in the log). Read-only: nothing is deleted here, so a damaged
    newest checkpoint can never cost the older good one."""
    report = report or _log_skip
    for path in reversed(_entries(Path(directory))):
        try:
            return load_checkpoint(path)
        except CheckpointError as exc:
            report(path, exc)
    return None

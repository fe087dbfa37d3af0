"""The run manifest's ``init``: where step 0's weights come from, and for an imported checkpoint its files.

A run starts from its seed, or from a Hugging Face Llama checkpoint a founder imported (run_init.py). An
imported run is named by ``sha256``, the weights hash of the imported tensors, and by ``model``, the shape
its config.json gave. ``files`` names every file of the directory that loading reads (config.json, then
model.safetensors, or model.safetensors.index.json and each shard it names) by name, sha256 and size, so a
joiner without a copy fetches them by hash from its peers like the run's data (node/peer/init_fetch.py).

Why the file hashes beside the weights hash: the weights hash is only known once every tensor was read,
so it cannot check bytes as they arrive; a file hash can, and a peer serving wrong bytes is caught per file
(protocol/blobs.py). The weights hash still decides: the loaded tensors must match it.

Why so strict: the names become paths on a joiner's disk, so each is one plain file name (no separator, no
``..``, no leading dot, a .json or .safetensors suffix, so never a fetch's ``.part`` file), a bounded number
of them, each of a capped size, sorted (one byte form). ``files`` came after the first imported runs: left
out of the canonical bytes while empty, so those manifests keep their bytes and run ids.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from distro_node.node.model import ModelConfig, ModelConfigError

from .manifest_error import SHA256_HEX, ManifestError

INIT_KINDS: tuple[str, ...] = ("seed", "hf")
MAX_INIT_FILES = 128  # with 100-character names the list stays far inside the manifest's 64 KiB cap
MAX_INIT_FILE_BYTES = 1 << 36  # 64 GiB: above any single safetensors file of a model this daemon trains
CONFIG_NAME = "config.json"
WEIGHT_NAMES: tuple[str, ...] = ("model.safetensors", "model.safetensors.index.json")
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")
_FILE_KEYS = frozenset({"name", "sha256", "size"})
_MODEL_FIELDS = tuple(ModelConfig.__dataclass_fields__)


@dataclass(frozen=True)
class InitFile:
    """One file of an imported checkpoint directory: its name there, sha256 (hex) and size in bytes."""

    name: str
    sha256: str
    size: int

    def check(self, where: str) -> None:
        name = self.name
        if not isinstance(name, str) or not _FILE_NAME.fullmatch(name) or not name.endswith(
            (".json", ".safetensors")
        ):
            raise ManifestError(f"{where}.name", f"{name!r} is not a plain .json or .safetensors file name "
                                                 "(letters, digits, . _ -; at most 100 characters)")
        if not isinstance(self.sha256, str) or not SHA256_HEX.fullmatch(self.sha256):
            raise ManifestError(f"{where}.sha256", "must be 64 lowercase hex characters")
        if type(self.size) is not int or not 0 < self.size <= MAX_INIT_FILE_BYTES:
            raise ManifestError(f"{where}.size", f"must be an int in [1, {MAX_INIT_FILE_BYTES}], "
                                                 f"got {self.size!r}")

    @classmethod
    def from_doc(cls, doc: object, where: str) -> InitFile:
        if not isinstance(doc, dict) or set(doc) != _FILE_KEYS:
            raise ManifestError(where, f"expected exactly {sorted(_FILE_KEYS)}")
        return cls(name=doc["name"], sha256=doc["sha256"], size=doc["size"])


@dataclass(frozen=True)
class InitSpec:
    """Where step 0's weights come from: ``seed`` (the default: drawn from the manifest's seed), or ``hf``
    (imported from a Hugging Face Llama checkpoint; ``sha256`` is the weights hash of its tensors, ``model``
    the ModelConfig its config.json gave, as plain values, and ``files`` the directory's files loading
    reads, sorted by name; empty in manifests made before files travelled)."""

    kind: str = "seed"
    sha256: str = ""
    model: Mapping[str, Any] = field(default_factory=dict)
    files: tuple[InitFile, ...] = ()

    def check(self) -> None:
        if self.kind == "seed":
            if self.sha256 or self.model or self.files:
                raise ManifestError("init", "a seeded run takes no sha256, model or files")
            return
        if self.kind not in INIT_KINDS:
            raise ManifestError("init.kind", f"must be one of {INIT_KINDS}, got {self.kind!r}")
        if not isinstance(self.sha256, str) or not SHA256_HEX.fullmatch(self.sha256):
            raise ManifestError("init.sha256", "must be 64 lowercase hex characters")
        self.model_config()
        self._check_files()

    def _check_files(self) -> None:
        files = self.files
        if not isinstance(files, tuple) or len(files) > MAX_INIT_FILES:
            raise ManifestError("init.files", f"must be a tuple of at most {MAX_INIT_FILES} files")
        if not files:
            return
        for i, entry in enumerate(files):
            if not isinstance(entry, InitFile):
                raise ManifestError(f"init.files[{i}]", "must be an InitFile")
            entry.check(f"init.files[{i}]")
        names = [entry.name for entry in files]
        if any(a >= b for a, b in itertools.pairwise(names)):
            raise ManifestError("init.files", "names must be unique and sorted")
        if CONFIG_NAME not in names or not any(name in names for name in WEIGHT_NAMES):
            raise ManifestError("init.files", f"must name {CONFIG_NAME} and one of {WEIGHT_NAMES}")

    def model_config(self) -> ModelConfig:
        """The imported shape; one byte form only: exactly ModelConfig's keys, ints and floats as typed."""
        model = self.model
        if not isinstance(model, Mapping) or set(model) != set(_MODEL_FIELDS):
            raise ManifestError("init.model", f"expected exactly {sorted(_MODEL_FIELDS)}")
        for name in _MODEL_FIELDS:
            wanted = float if name in ("rope_theta", "norm_eps", "init_std") else int
            if type(model[name]) is not wanted:
                raise ManifestError(f"init.model.{name}", f"must be a {wanted.__name__}")
        try:
            return ModelConfig(**model)
        except ModelConfigError as exc:
            raise ManifestError("init.model", str(exc)) from None

    def to_doc(self) -> dict[str, Any]:
        """The manifest's ``init`` object: ``files`` only when there are any (see the module docstring)."""
        doc: dict[str, Any] = {"kind": self.kind, "sha256": self.sha256, "model": dict(self.model)}
        if self.files:
            doc["files"] = [{"name": f.name, "sha256": f.sha256, "size": f.size} for f in self.files]
        return doc

    @classmethod
    def from_doc(cls, doc: object) -> InitSpec:
        """Strict parse of the manifest's ``init`` object (the values are checked by :meth:`check`)."""
        required = {"kind", "sha256", "model"}
        if not isinstance(doc, dict) or not required <= set(doc) <= required | {"files"}:
            raise ManifestError("init", f"expected {sorted(required)}, optionally ['files']")
        for name, kind in (("kind", str), ("sha256", str), ("model", dict)):
            if not isinstance(doc[name], kind):
                raise ManifestError(f"init.{name}", f"must be a {kind.__name__}")
        files = doc.get("files", [])
        if not isinstance(files, list) or len(files) > MAX_INIT_FILES:
            raise ManifestError("init.files", f"must be a list of at most {MAX_INIT_FILES} files")
        entries = tuple(InitFile.from_doc(entry, f"init.files[{i}]") for i, entry in enumerate(files))
        return cls(kind=doc["kind"], sha256=doc["sha256"], model=doc["model"], files=entries)


__all__ = ["CONFIG_NAME", "INIT_KINDS", "MAX_INIT_FILES", "MAX_INIT_FILE_BYTES", "WEIGHT_NAMES", "InitFile",
           "InitSpec"]

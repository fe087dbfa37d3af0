"""The run's starting weights when a founder imports them from a local Hugging Face Llama checkpoint.

A founder reads its directory into an :class:`InitSpec`: the model shape its config.json gives, the weights
hash of its tensors (node/hf/convert.py), and the files loading reads (config.json, model.safetensors or the
index and its shards) by name, sha256 and size (node/peer/init_spec.py). Those files travel like the run's
data: every peer that loaded them serves them to the run's members, and a joiner without a copy fetches them
by hash from its bootstrap peer into ``<data_dir>/init/`` before its trainer is built
(node/peer/init_fetch.py); a joiner may still pass its own copy with ``--init-from``.

Whichever way the directory came, every peer, the founder included, builds its trainer from it and must find
the weights hash, for the same reason a data file must match its sha256 (run_data.py): a peer on other
weights would exchange payloads with the swarm while training something else. The file hashes only catch
wrong bytes early; the weights hash decides (a joiner's own copy may store the same weights in other
files). A run founded before the files travelled names none: its joiners still need ``--init-from``.
Failures are typed errors naming ``run.init_from``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from distro_node.protocol.digests import file_sha256

from ..hf.convert import ImportedCheckpoint, load_hf_checkpoint
from ..hf.errors import HFCheckpointError
from ..hf.files import loaded_files
from .init_spec import InitFile, InitSpec
from .local import LocalSetupError
from .manifest_error import ManifestError

INIT_FIELD = "run.init_from"


def _load(path: Path) -> ImportedCheckpoint:
    try:
        return load_hf_checkpoint(path)
    except HFCheckpointError as exc:
        raise LocalSetupError(INIT_FIELD, str(exc)) from None


def checkpoint_files(path: Path) -> tuple[InitFile, ...]:
    """The files loading ``path`` reads, hashed, sorted by name (the manifest's ``init.files``)."""
    try:
        names = loaded_files(path)
    except HFCheckpointError as exc:
        raise LocalSetupError(INIT_FIELD, str(exc)) from None
    files = []
    for name in sorted(names):
        file = path / name
        try:
            files.append(InitFile(name, file_sha256(file).hex(), file.stat().st_size))
        except OSError as exc:
            raise LocalSetupError(INIT_FIELD, f"{file}: cannot read: {exc.strerror or exc}") from None
    return tuple(files)


def founder_init_spec(path: Path | None) -> InitSpec:
    """The manifest's ``init`` for a founder's ``run.init_from`` (reads every tensor and hashes every file
    once)."""
    if path is None:
        return InitSpec()
    imported = _load(path)
    spec = InitSpec(kind="hf", sha256=imported.sha256, model=imported.config.to_dict(),
                    files=checkpoint_files(path))
    try:
        spec.check()  # e.g. a shard whose name the manifest may not carry
    except ManifestError as exc:
        raise LocalSetupError(INIT_FIELD, f"{path}: {exc}") from None
    return spec


def initial_weights(spec: InitSpec, path: Path | None) -> dict[str, torch.Tensor] | None:
    """The imported starting weights in our names, checked against the manifest; None for a seeded run.
    ``path``: this peer's own copy, or the folder its files were fetched into."""
    if spec.kind == "seed":
        if path is not None:
            raise LocalSetupError(INIT_FIELD, f"is set ({path}) but this run starts from its seed, not from "
                                              "an imported checkpoint: unset it")
        return None
    if path is None:
        why = "" if spec.files else " founded before checkpoint files travelled, so they cannot be fetched:"
        raise LocalSetupError(INIT_FIELD, "this run starts from an imported Hugging Face checkpoint "
                                          f"(weights sha256 {spec.sha256}){why} pass your copy of its "
                                          "directory with --init-from DIR")
    imported = _load(path)
    if imported.config.to_dict() != dict(spec.model):
        raise LocalSetupError(INIT_FIELD, f"{path}: config.json gives model {imported.config.to_dict()} but "
                                          f"the run's is {dict(spec.model)}: not the run's checkpoint")
    if imported.sha256 != spec.sha256:
        raise LocalSetupError(INIT_FIELD, f"{path} holds weights sha256 {imported.sha256} but the run starts "
                                          f"from {spec.sha256}: not the run's checkpoint")
    return imported.state


__all__ = ["INIT_FIELD", "checkpoint_files", "founder_init_spec", "initial_weights"]

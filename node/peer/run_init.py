"""The run's starting weights when a founder imports them from a local Hugging Face Llama checkpoint.

A founder reads its directory into an :class:`InitSpec`: the model shape its config.json gives and the
weights hash of its tensors (node/hf/convert.py). Every peer, the founder included, then builds its trainer
from its own copy and must find that hash, for the same reason a data file must match its sha256
(run_data.py): a peer on other weights would exchange payloads with the swarm while training something else.
The files do not travel over the swarm yet, so a joiner without the directory, or with another one, stops
with an error naming ``run.init_from`` and the hash it needs. Failures are typed errors naming that field.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..hf.convert import ImportedCheckpoint, load_hf_checkpoint
from ..hf.errors import HFCheckpointError
from .local import LocalSetupError
from .manifest import InitSpec

INIT_FIELD = "run.init_from"


def _load(path: Path) -> ImportedCheckpoint:
    try:
        return load_hf_checkpoint(path)
    except HFCheckpointError as exc:
        raise LocalSetupError(INIT_FIELD, str(exc)) from None


def founder_init_spec(path: Path | None) -> InitSpec:
    """The manifest's ``init`` for a founder's ``run.init_from`` (reads and hashes every tensor once)."""
    if path is None:
        return InitSpec()
    imported = _load(path)
    return InitSpec(kind="hf", sha256=imported.sha256, model=imported.config.to_dict())


def initial_weights(spec: InitSpec, path: Path | None) -> dict[str, torch.Tensor] | None:
    """The imported starting weights in our names, checked against the manifest; None for a seeded run."""
    if spec.kind == "seed":
        if path is not None:
            raise LocalSetupError(INIT_FIELD, f"is set ({path}) but this run starts from its seed, not from "
                                              "an imported checkpoint: unset it")
        return None
    if path is None:
        raise LocalSetupError(INIT_FIELD, "this run starts from an imported Hugging Face checkpoint "
                                          f"(weights sha256 {spec.sha256}): pass your copy of its directory "
                                          "with --init-from DIR")
    imported = _load(path)
    if imported.config.to_dict() != dict(spec.model):
        raise LocalSetupError(INIT_FIELD, f"{path}: config.json gives model {imported.config.to_dict()} but "
                                          f"the run's is {dict(spec.model)}: not the run's checkpoint")
    if imported.sha256 != spec.sha256:
        raise LocalSetupError(INIT_FIELD, f"{path} holds weights sha256 {imported.sha256} but the run starts "
                                          f"from {spec.sha256}: not the run's checkpoint")
    return imported.state


__all__ = ["INIT_FIELD", "founder_init_spec", "initial_weights"]

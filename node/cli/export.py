"""`distro-node export --format hf OUT`: write a node's trained weights as a Hugging Face Llama checkpoint.

Which weights: ``--checkpoint PATH`` (one checkpoint directory, or a folder of them: its newest valid one), or
else the newest valid checkpoint where a node with this config writes them (``checkpoint.dir``, by default
``<data_dir>/checkpoints``; ``--data-dir`` as for `join`). The checkpoint's own manifest gives the model
shape, and its stored weights hash is checked before anything is written, so an export is exactly the
weights the run agreed on at that step. The mapping and why it is exact: node/hf/mapping.py.

The tokenizer: runs on the embedded corpus or on text files use bytes (vocabulary 256) and need none. A run
on a prepared dataset (``run.data.kind = shards``) names its tokenizer by sha256: :func:`run_tokenizer` finds
this machine's copy through the dataset folder (``--data-path``, else the config's ``run.data.path``), checks
the hash, and ships it with the dataset's end-of-document token as eos. ``--tokenizer`` gives one by hand
(checked against the run's hash when the run names one).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from distro_node.node.checkpoint.store import (
    MANIFEST_FILE,
    Checkpoint,
    CheckpointError,
    load_checkpoint,
    load_latest,
)
from distro_node.node.cli.common import UsageError, config_path
from distro_node.node.config.load import load_config
from distro_node.node.config.schema import NodeConfig
from distro_node.node.data.errors import DataError
from distro_node.node.data.shards import file_sha256, manifest_path, read_manifest
from distro_node.node.hf.convert import ExportTokenizer, export_hf, weights_sha256
from distro_node.node.model import param_count
from distro_node.node.peer.manifest import ManifestError, RunManifest

FORMATS = ("hf",)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="write trained weights as a Hugging Face checkpoint (config.json + model.safetensors)",
        description=(
            "Write the newest checkpoint of a node (or the one --checkpoint names) as a Hugging Face "
            "LlamaForCausalLM directory: config.json, model.safetensors, generation_config.json and a "
            "tokenizer.json when one is known. transformers.AutoModelForCausalLM.from_pretrained(OUT) loads "
            "it and computes the same logits as the node's model (within float32 rounding of the RoPE "
            "tables). The checkpoint's weights hash is verified first. OUT is written under a temporary "
            "name and renamed when complete, so an interrupted export leaves nothing half-written; a "
            "non-empty OUT is refused unless --force."
        ),
    )
    p.add_argument("out", type=Path, metavar="OUT", help="directory to create (missing parents are created)")
    p.add_argument("--format", default="hf", choices=FORMATS,
                   help="output format: hf (Hugging Face transformers; default)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--data-dir", type=Path, default=None, metavar="DIR",
                       help="the node's data dir, as given to `join --data-dir`: export the newest valid "
                            "checkpoint under DIR/checkpoints, unless the config sets checkpoint.dir (as for "
                            "join) [data_dir]")
    where.add_argument("--checkpoint", type=Path, default=None, metavar="PATH",
                       help="a checkpoint directory (ckpt-...-step-...), or a folder of them to take the "
                            "newest valid one from")
    p.add_argument("--config", type=Path, default=None, metavar="PATH",
                   help="config file to find the checkpoints by (default $DISTRO_NODE_CONFIG, else "
                        "./distro-node.toml if present)")
    p.add_argument("--data-path", type=Path, default=None, metavar="DIR",
                   help="runs on a prepared dataset: this machine's copy of its folder, whose tokenizer.json "
                        "(checked against the run's sha256) goes into OUT (default: the config's "
                        "run.data.path) [run.data.path]")
    p.add_argument("--tokenizer", type=Path, default=None, metavar="FILE",
                   help="tokenizer.json to copy into OUT instead (default: the run's, found with "
                        "--data-path; byte-level runs need none)")
    p.add_argument("--force", action="store_true", help="replace OUT even if it is not empty")
    p.set_defaults(func=run)


def _newest(directory: Path) -> Checkpoint:
    skipped: list[str] = []
    ckpt = load_latest(directory, report=lambda path, exc: skipped.append(f"{path.name}: {exc}"))
    if ckpt is None:
        why = f"; skipped {'; '.join(skipped)}" if skipped else ""
        raise UsageError("checkpoint", f"no valid checkpoint in {directory}{why}")
    return ckpt


def find_checkpoint(args: argparse.Namespace, config: NodeConfig) -> Checkpoint:
    """The checkpoint to export, located as the module docstring says; UsageError names what is missing."""
    try:
        if args.checkpoint is not None:
            path: Path = args.checkpoint
            if (path / MANIFEST_FILE).is_file():
                return load_checkpoint(path)
            if not path.is_dir():
                raise UsageError("--checkpoint", f"{path} is not a checkpoint or a folder of checkpoints")
            return _newest(path)
        return _newest(config.checkpoint_dir)
    except CheckpointError as exc:
        raise UsageError("checkpoint", str(exc)) from None


def checkpoint_manifest(ckpt: Checkpoint) -> RunManifest:
    """The run manifest a daemon checkpoint stores in its extras (node/peer/checkpointing.py)."""
    text = ckpt.extra.get("manifest")
    try:
        return RunManifest.from_bytes(text.encode() if isinstance(text, str) else b"")
    except ManifestError as exc:
        raise UsageError("checkpoint", f"{ckpt.path}: no usable run manifest in its extras ({exc})") from None


def _checked(path: Path, wanted: str, field: str) -> Path:
    try:
        digest = file_sha256(path)
    except OSError as exc:
        raise UsageError(field, f"{path}: cannot read the tokenizer ({exc.strerror or exc})") from None
    if digest != wanted:
        raise UsageError(field, f"{path} has sha256 {digest} but the run's tokenizer is {wanted}")
    return path


def run_tokenizer(manifest: RunManifest, data_path: Path | None,
                  given: Path | None) -> ExportTokenizer | None:
    """The tokenizer to ship: ``given`` (checked when the run names one), or the run's own from its
    prepared dataset folder; None for byte-level runs. A run that names a tokenizer and has no copy here
    is an error rather than an export nobody can tokenize for."""
    spec = manifest.data
    if spec.kind != "shards":
        return ExportTokenizer(given) if given is not None else None
    if given is not None:
        return ExportTokenizer(_checked(given, spec.tokenizer_sha256, "--tokenizer"))
    if data_path is None:
        raise UsageError("--data-path", f"the run trains on a prepared dataset with tokenizer sha256 "
                                        f"{spec.tokenizer_sha256}: pass your copy's folder with --data-path "
                                        "(or the tokenizer with --tokenizer)")
    try:
        data, _ = read_manifest(data_path)
    except DataError as exc:
        raise UsageError("--data-path", str(exc)) from None
    file = _checked(manifest_path(data_path).parent / data.tokenizer.file, spec.tokenizer_sha256,
                    "--data-path")
    return ExportTokenizer(file, data.tokenizer.eod_token, data.tokenizer.eod_id)


def run(args: argparse.Namespace) -> int:
    config = load_config(config_path(args.config),
                         flags={"data_dir": args.data_dir, "run.data.path": args.data_path})
    ckpt = find_checkpoint(args, config)
    manifest = checkpoint_manifest(ckpt)
    model = manifest.model_config()
    sha256 = weights_sha256(ckpt.model_state, model)
    stored = ckpt.extra.get("weights_hash")
    if isinstance(stored, str) and stored != sha256:
        raise UsageError("checkpoint", f"{ckpt.path}: weights hash {sha256[:16]} differs from the stored "
                                       f"{stored[:16]}: refusing to export weights the run did not agree on")
    tokenizer = run_tokenizer(manifest, config.run.data.path, args.tokenizer)
    metadata = {"distro_node_run_id": ckpt.run_id.hex(), "distro_node_step": str(ckpt.step)}
    exported = export_hf(ckpt.model_state, model, args.out, force=args.force, tokenizer=tokenizer,
                         metadata=metadata)
    print(f"wrote {exported.directory}: {', '.join(exported.files)}")
    print(f"  LlamaForCausalLM, {param_count(model):,} parameters ({manifest.model_name}), step {ckpt.step} "
          f"of run {ckpt.run_id.hex()[:16]}, weights sha256 {exported.sha256}")
    if tokenizer is None:
        print("  no tokenizer.json: token ids are the run's own (bytes for the embedded corpus, text files)")
    print(f"  load it with transformers.AutoModelForCausalLM.from_pretrained({str(exported.directory)!r})")
    return 0

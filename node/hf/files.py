"""The files of a Hugging Face checkpoint directory: reading config.json and safetensors weights (one file or
shards named by ``model.safetensors.index.json``), and writing a directory all at once.

Why headers first: a safetensors header lists every tensor's dtype and shape, so names, shapes and dtypes are
checked (node/hf/mapping.py) before gigabytes are read, and a corrupt header or a truncated file is refused
by safetensors' own parser with a typed error naming the file. Only safetensors are read: pickle-based
``pytorch_model.bin`` files run code when loaded.

Why a temporary directory and a rename for writing: an export interrupted at any point (a crash, a full disk)
must not leave a directory that looks like a checkpoint but holds half a model. Files are written and fsynced
in ``.<name>.tmp-*`` beside the target, which is renamed into place last (the order of node/checkpoint/).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from distro_node.node.checkpoint.files import fsync_dir, fsync_file, remove_tree
from distro_node.node.hf.errors import HFFileError, HFTensorError
from distro_node.node.hf.mapping import TensorInfo
from safetensors import SafetensorError, safe_open

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
GENERATION_FILE = "generation_config.json"
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
MAX_JSON_BYTES = 16 << 20  # config and index files are kilobytes: a cap keeps a wrong file out of memory
_SAFETENSORS_ERRORS = (SafetensorError, OSError, ValueError, RuntimeError)


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``; HFFileError when it is missing, too large, not JSON or not an object."""
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_JSON_BYTES + 1)
    except FileNotFoundError:
        raise HFFileError(path, "missing") from None
    except OSError as exc:
        raise HFFileError(path, f"cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_JSON_BYTES:
        raise HFFileError(path, f"larger than {MAX_JSON_BYTES} bytes")
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise HFFileError(path, f"not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise HFFileError(path, "must hold a JSON object")
    return doc


def _header(file: Path) -> dict[str, TensorInfo]:
    """Every tensor a safetensors file holds, from its header (no tensor data is read)."""
    try:
        with safe_open(str(file), framework="pt") as fh:
            out: dict[str, TensorInfo] = {}
            for name in fh.keys():
                view = fh.get_slice(name)
                out[name] = TensorInfo(file, str(view.get_dtype()), tuple(int(n) for n in view.get_shape()))
            return out
    except FileNotFoundError:
        raise HFFileError(file, "missing") from None
    except _SAFETENSORS_ERRORS as exc:
        raise HFFileError(file, f"not a valid safetensors file ({exc})") from None


def _weight_map(index_path: Path) -> dict[str, str]:
    """The index's tensor-to-shard map; every shard a plain file name in the index's directory."""
    weight_map = read_json(index_path).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise HFFileError(index_path, "weight_map: missing or not a non-empty object")
    for shard in weight_map.values():
        if not isinstance(shard, str) or Path(shard).name != shard or shard in ("", ".", ".."):
            raise HFFileError(index_path, f"weight_map: shard {shard!r} is not a file name in the directory")
    return weight_map


def loaded_files(directory: Path) -> list[str]:
    """The names of the files :func:`scan_weights` and config reading use, config.json first: what a copy
    of the checkpoint needs (a run's manifest names them, so joiners can fetch them; node/peer/init_spec.py).
    Other files of the directory (tokenizer, generation config, READMEs) are not needed to load it."""
    if (directory / WEIGHTS_FILE).is_file():
        return [CONFIG_FILE, WEIGHTS_FILE]
    index_path = directory / INDEX_FILE
    if not index_path.is_file():
        raise HFFileError(directory, f"neither {WEIGHTS_FILE} nor {INDEX_FILE} found")
    return [CONFIG_FILE, INDEX_FILE, *sorted(set(_weight_map(index_path).values()))]


def scan_weights(directory: Path) -> dict[str, TensorInfo]:
    """Every tensor of the checkpoint by name, from the headers of ``model.safetensors`` or of the shards its
    index names (a single file wins when both exist, as in transformers)."""
    single = directory / WEIGHTS_FILE
    if single.is_file():
        return _header(single)
    index_path = directory / INDEX_FILE
    if not index_path.is_file():
        raise HFFileError(directory, f"neither {WEIGHTS_FILE} nor {INDEX_FILE} found (only safetensors "
                                     "checkpoints are read: pickle files run code when loaded)")
    weight_map = _weight_map(index_path)
    shards = {shard: _header(directory / shard) for shard in sorted(set(weight_map.values()))}
    found: dict[str, TensorInfo] = {}
    for shard, tensors in shards.items():
        for name, info in tensors.items():
            if name in found:
                raise HFTensorError(directory / shard, name, f"also in {found[name].file.name}")
            found[name] = info
    for name, shard in weight_map.items():
        if name not in shards[shard]:
            raise HFTensorError(directory / shard, name, f"{INDEX_FILE} places it here, but it is not there")
    return found


def load_tensors(wanted: Mapping[str, TensorInfo]) -> dict[str, torch.Tensor]:
    """The named tensors' data, each file opened once; a file that changed or broke since its header was read
    is still a typed error."""
    by_file: dict[Path, list[str]] = {}
    for name, info in wanted.items():
        by_file.setdefault(info.file, []).append(name)
    out: dict[str, torch.Tensor] = {}
    for file, names in by_file.items():
        try:
            with safe_open(str(file), framework="pt") as fh:
                for name in names:
                    out[name] = fh.get_tensor(name)
        except _SAFETENSORS_ERRORS as exc:
            raise HFFileError(file, f"cannot read tensors ({exc})") from None
    return out


def write_json(path: Path, doc: Mapping[str, Any]) -> None:
    """Sorted keys and a trailing newline, as transformers' own ``save_pretrained`` writes them."""
    path.write_text(json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n", encoding="utf-8")


def copy_file(source: Path, target: Path) -> None:
    if not source.is_file():
        raise HFFileError(source, "missing or not a file")
    shutil.copyfile(source, target)


def check_target(out: Path, *, force: bool) -> None:
    """Refuse a target that is a file, or a non-empty directory without ``force``, before any work."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise HFFileError(out, "exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise HFFileError(out, "is not empty; pass --force to replace it")


def write_directory(out: Path, fill: Callable[[Path], None], *, force: bool) -> None:
    """Create ``out`` holding exactly what ``fill`` writes into the directory it is given, atomically.

    An empty or missing ``out`` is replaced by one rename. With ``force``, a non-empty ``out`` is first moved
    aside to ``.<name>.trash-*`` and deleted after the new one is in place; a crash between those two renames
    leaves the old export there and no ``out``, never a mixture.
    """
    check_target(out, force=force)
    parent = out.parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=parent))
    try:
        fill(tmp)
        for path in tmp.iterdir():
            fsync_file(path)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's 0700 would hide the export from other users
        fsync_dir(tmp)
        if out.is_dir() and any(out.iterdir()):
            trash = Path(tempfile.mkdtemp(prefix=f".{out.name}.trash-", dir=parent))
            os.rename(out, trash)  # onto an empty directory: allowed, and atomic
            os.rename(tmp, out)
            fsync_dir(parent)
            remove_tree(trash)
        else:
            os.rename(tmp, out)
            fsync_dir(parent)
    except BaseException:
        remove_tree(tmp)
        raise

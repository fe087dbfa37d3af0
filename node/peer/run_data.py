"""The run's training data: described in the manifest by a founder, opened and checked by every peer.

A founder hashes its file into a :class:`DataSpec` (kind, sha256, size, token width, eval split); a joiner
opens its own copy and must find the same sha256 and size, or it would train on other tokens than everyone
else while still exchanging payloads with them. Mismatches are typed errors naming ``run.data.path``.

A prepared dataset (kind ``shards``) is named by its data.json the same way; that file names the tokenizer
and every shard by sha256, which node/data/shards.py checks when it opens them. A joiner whose data.json
differs is told which tokenizer its copy was made with when that is the difference.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from distro_node.node.config.load import DataConfig

from ..data import (
    DataError,
    TokenSource,
    file_fingerprint,
    markov_source,
    resolve_token_dtype,
    text_source,
    token_file_source,
)
from ..data.files import TokenDtype
from ..data.shards import manifest_path, open_shards, read_manifest
from .local import LocalSetupError
from .manifest import DataSpec

PATH_FIELD = "run.data.path"


def founder_data_spec(data: DataConfig) -> DataSpec:
    """The manifest's data entry for a founder's ``[run.data]`` table (hashes the whole file once)."""
    if data.kind == "embedded":
        if data.path is not None:
            raise LocalSetupError(PATH_FIELD, "is set but run.data.kind is 'embedded': set run.data.kind "
                                              "(--data-kind) to text or tokens to train on the file")
        return DataSpec()
    if data.path is None:
        raise LocalSetupError(PATH_FIELD, f"is required for run.data.kind {data.kind!r}")
    if data.kind == "shards":
        return _shards_spec(data.path)
    try:
        sha256, size = file_fingerprint(data.path)
        dtype = ""
        if data.kind == "tokens":
            asked: TokenDtype | None = None
            if data.token_dtype == "uint16":
                asked = "uint16"
            elif data.token_dtype == "uint32":
                asked = "uint32"
            dtype = resolve_token_dtype(data.path, asked)
    except DataError as exc:
        raise LocalSetupError(PATH_FIELD, str(exc)) from None
    return DataSpec(kind=data.kind, sha256=sha256, size=size, token_dtype=dtype,
                    eval_fraction=data.eval_fraction)


def _shards_spec(path: Path) -> DataSpec:
    """A prepared dataset: its data.json by sha256 and size, with the split, width and tokenizer it names
    (the shards themselves are checked when the trainer opens them)."""
    try:
        manifest, raw = read_manifest(path)
    except DataError as exc:
        raise LocalSetupError(PATH_FIELD, str(exc)) from None
    return DataSpec(kind="shards", sha256=hashlib.sha256(raw).hexdigest(), size=len(raw),
                    token_dtype=manifest.dtype, eval_fraction=manifest.eval_fraction,
                    tokenizer_sha256=manifest.tokenizer.sha256, vocab_size=manifest.tokenizer.vocab_size)


def _not_the_runs(spec: DataSpec, path: Path, sha256: str, size: int) -> LocalSetupError:
    what = "prepared data" if spec.kind == "shards" else "file"
    detail = (f"{path} has sha256 {sha256} ({size} bytes) but the run's data.sha256 is {spec.sha256} "
              f"({spec.size} bytes): not the run's {what}")
    if spec.kind == "shards":
        try:
            theirs = read_manifest(path)[0].tokenizer.sha256
        except DataError:
            theirs = spec.tokenizer_sha256
        if theirs != spec.tokenizer_sha256:
            detail += (f"; it was made with tokenizer sha256 {theirs}, the run's tokenizer is "
                       f"{spec.tokenizer_sha256}")
    return LocalSetupError(PATH_FIELD, detail)


def open_run_source(spec: DataSpec, data_seed: int, path: Path | None, vocab_size: int) -> TokenSource:
    """This peer's view of the run's data; for a file, only after its sha256 and size match the manifest."""
    if spec.kind == "embedded":
        if path is not None:
            raise LocalSetupError(PATH_FIELD, f"is set ({path}) but this run trains on the embedded dataset; "
                                              "unset it")
        source = markov_source(data_seed)
    else:
        if path is None and spec.kind == "shards":
            raise LocalSetupError(PATH_FIELD, f"this run trains on a prepared dataset (data.json sha256 "
                                              f"{spec.sha256}, tokenizer sha256 {spec.tokenizer_sha256}): "
                                              "pass your copy's folder with --data-path")
        if path is None:
            raise LocalSetupError(PATH_FIELD, f"this run trains on a {spec.kind} file (sha256 {spec.sha256}, "
                                              f"{spec.size} bytes): pass your copy with --data-path")
        try:
            if spec.kind == "shards":
                path = manifest_path(path)
            sha256, size = file_fingerprint(path)
            if (sha256, size) != (spec.sha256, spec.size):
                raise _not_the_runs(spec, path, sha256, size)
            if spec.kind == "shards":
                source = open_shards(path)
            elif spec.kind == "text":
                source = text_source(path, eval_fraction=spec.eval_fraction)
            else:
                width: TokenDtype = "uint16" if spec.token_dtype == "uint16" else "uint32"
                source = token_file_source(path, vocab_size=vocab_size, dtype=width,
                                           eval_fraction=spec.eval_fraction)
        except DataError as exc:
            raise LocalSetupError(PATH_FIELD, str(exc)) from None
    try:
        source.check_vocab(vocab_size)
    except DataError as exc:
        raise LocalSetupError("run.model", str(exc)) from None
    return source


__all__ = ["PATH_FIELD", "founder_data_spec", "open_run_source"]

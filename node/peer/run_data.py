"""The run's training data: described in the manifest by a founder, opened and checked by every peer.

A founder hashes its file into a :class:`DataSpec` (kind, sha256, size, token width, eval split); a joiner
opens its own copy and must find the same sha256 and size, or it would train on other tokens than everyone
else while still exchanging payloads with them. Mismatches are typed errors naming ``run.data.path``.
"""

from __future__ import annotations

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


def open_run_source(spec: DataSpec, data_seed: int, path: Path | None, vocab_size: int) -> TokenSource:
    """This peer's view of the run's data; for a file, only after its sha256 and size match the manifest."""
    if spec.kind == "embedded":
        if path is not None:
            raise LocalSetupError(PATH_FIELD, f"is set ({path}) but this run trains on the embedded dataset; "
                                              "unset it")
        source = markov_source(data_seed)
    else:
        if path is None:
            raise LocalSetupError(PATH_FIELD, f"this run trains on a {spec.kind} file (sha256 {spec.sha256}, "
                                              f"{spec.size} bytes): pass your copy with --data-path")
        try:
            sha256, size = file_fingerprint(path)
            if (sha256, size) != (spec.sha256, spec.size):
                raise LocalSetupError(PATH_FIELD, f"{path} has sha256 {sha256} ({size} bytes) but the run's "
                                                  f"data.sha256 is {spec.sha256} ({spec.size} bytes): not "
                                                  "the run's file")
            if spec.kind == "text":
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

"""Runs on a data file: the founder's manifest names the file by kind, sha256 and size (never its path), and a
joiner's copy is checked against them before it trains."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from distro_node.node.config.errors import ConfigFieldError
from distro_node.node.peer.local import LocalSettings, LocalSetupError
from distro_node.node.peer.manifest import DataSpec, ManifestError, RoundSettings, RunManifest
from distro_node.node.peer.settings import founder_manifest, load_join_settings
from distro_node.node.peer.trainer import Trainer

TEXT = ("the quick brown fox jumps over the lazy dog; " * 400).encode()


def write_text(path: Path, body: bytes = TEXT) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)
    return path


def founder_on(path: Path, kind: str = "text") -> RunManifest:
    settings = load_join_settings(None, {"run.data.kind": kind, "run.data.path": path}, env={})
    return founder_manifest(settings, RoundSettings())


def test_founder_manifest_carries_hash_and_size_not_path(tmp_path: Path) -> None:
    path = write_text(tmp_path / "secret-dir" / "corpus.txt")
    manifest = founder_on(path)
    assert manifest.data == DataSpec(kind="text", sha256=hashlib.sha256(TEXT).hexdigest(), size=len(TEXT))
    raw = manifest.to_bytes()
    assert b"secret-dir" not in raw and b"corpus.txt" not in raw
    assert RunManifest.from_bytes(raw) == manifest
    trainer = Trainer(manifest, "founder", LocalSettings(data_path=path))
    done = trainer.compute(0)
    assert 4.0 < done.loss < 7.0  # an untrained byte model: about ln(256) = 5.5
    assert set(np.unique(trainer.source.train)) <= set(TEXT)


def test_joiner_with_an_identical_copy_trains_the_same_batches(tmp_path: Path) -> None:
    manifest = founder_on(write_text(tmp_path / "a" / "corpus.txt"))
    copy = write_text(tmp_path / "b" / "elsewhere.bin")
    founder = Trainer(manifest, "peer-a", LocalSettings(data_path=tmp_path / "a" / "corpus.txt"))
    joiner = Trainer(manifest, "peer-a", LocalSettings(data_path=copy))
    assert founder.compute(0).loss == joiner.compute(0).loss


@pytest.mark.parametrize("body", [TEXT[:-1] + b"!", TEXT + b"x"])
def test_joiner_with_another_file_is_refused_naming_the_field(tmp_path: Path, body: bytes) -> None:
    manifest = founder_on(write_text(tmp_path / "corpus.txt"))
    other = write_text(tmp_path / "other.txt", body)
    with pytest.raises(LocalSetupError) as info:
        Trainer(manifest, "joiner", LocalSettings(data_path=other))
    assert info.value.field == "run.data.path"
    assert manifest.data.sha256 in str(info.value)


def test_joiner_without_a_copy_or_with_a_stray_path_is_refused(tmp_path: Path) -> None:
    path = write_text(tmp_path / "corpus.txt")
    with pytest.raises(LocalSetupError, match="pass your copy with --data-path") as info:
        Trainer(founder_on(path), "joiner")
    assert info.value.field == "run.data.path"
    with pytest.raises(LocalSetupError, match="embedded dataset") as info:
        Trainer(RunManifest(nonce="x"), "joiner", LocalSettings(data_path=path))
    assert info.value.field == "run.data.path"
    with pytest.raises(LocalSetupError, match=r"run\.data\.path: .*not found"):
        Trainer(founder_on(path), "joiner", LocalSettings(data_path=tmp_path / "missing.txt"))


def test_founder_with_a_path_but_embedded_kind_is_refused(tmp_path: Path) -> None:
    settings = load_join_settings(None, {"run.data.path": write_text(tmp_path / "c.txt")}, env={})
    with pytest.raises(LocalSetupError, match=r"run\.data\.kind"):
        founder_manifest(settings, RoundSettings())


def test_token_file_run(tmp_path: Path) -> None:
    tokens = (np.arange(5000) * 7 % 256).astype("<u2")
    path = tmp_path / "corpus.u16"
    tokens.tofile(path)
    manifest = founder_on(path, kind="tokens")
    assert (manifest.data.kind, manifest.data.token_dtype, manifest.data.size) == ("tokens", "uint16", 10000)
    trainer = Trainer(manifest, "p", LocalSettings(data_path=path))
    assert trainer.source.vocab_size == 256 and trainer.compute(0).loss > 0


def test_embedded_manifest_bytes_hold_no_new_fields() -> None:
    """Default data and clipping stay out of the canonical bytes (run ids as before); writing them out at
    their default is not canonical and refused, so a manifest still has one byte form."""
    manifest = RunManifest(nonce="x")
    doc = json.loads(manifest.to_bytes())
    assert "data" not in doc and "grad_clip" not in doc
    for extra in ({"grad_clip": 1.0}, {"data": {"eval_fraction": 0.01, "kind": "embedded", "sha256": "",
                                                "size": 0, "token_dtype": ""}}):
        raw = json.dumps({**doc, **extra}, sort_keys=True, separators=(",", ":")).encode()
        with pytest.raises(ManifestError, match="canonical"):
            RunManifest.from_bytes(raw)


@pytest.mark.parametrize(("data", "field"), [
    ({"kind": "text", "sha256": "AB" * 32, "size": 3}, "data.sha256"),
    ({"kind": "text", "sha256": "ab" * 32, "size": 0}, "data.size"),
    ({"kind": "tokens", "sha256": "ab" * 32, "size": 4}, "data.token_dtype"),
    ({"kind": "video", "sha256": "ab" * 32, "size": 4}, "data.kind"),
    ({"kind": "embedded", "sha256": "ab" * 32}, "data"),
])
def test_bad_data_entries_name_the_field(data: dict[str, object], field: str) -> None:
    with pytest.raises(ManifestError) as info:
        RunManifest(nonce="x", data=DataSpec(**data))  # type: ignore[arg-type]
    assert info.value.field == field


def test_bad_grad_clip_is_a_config_error() -> None:
    with pytest.raises(ConfigFieldError, match=r"run\.grad_clip"):
        load_join_settings(None, {"run.grad_clip": -1.0}, env={})

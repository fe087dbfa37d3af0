"""The manifest's ``init.files``: the imported checkpoint's files by name, sha256 and size. Strictly validated
(the names become paths on a joiner's disk), one byte form, and absent from the bytes of every manifest made
before it existed, so seeded runs and earlier imported runs keep their run ids."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Any

import pytest
from distro_node.node.peer.init_spec import MAX_INIT_FILE_BYTES, MAX_INIT_FILES, InitFile, InitSpec
from distro_node.node.peer.manifest import ManifestError, RunManifest
from distro_node.node.presets import preset

# Bytes written by the manifest code before init.files existed (commit 7453327), with their run ids.
SEEDED = (b'{"batch_size":4,"data_seed":0,"nonce":"0123456789abcdef","preset":"tiny","rounds":'
          b'{"leader_timeout":2.0,"liveness_timeout":5.0,"max_missed_rounds":3,"round_timeout":10.0,'
          b'"warmup_rounds":3},"seed":0,"seq_len":32,"settings":{},"strategy":"distro","version":1}')
SEEDED_ID = "f7c6f6acd7128ad4211a9b401fd95319708b348022e06735f0ecab471f04baaa"
IMPORTED = (b'{"batch_size":4,"data_seed":0,"init":{"kind":"hf","model":{"hidden":64,"init_std":0.02,'
            b'"intermediate":256,"n_heads":4,"n_kv_heads":2,"n_layers":2,"norm_eps":1e-05,"rope_theta":10000.0,'
            b'"seq_len":64,"vocab_size":256},"sha256":"abababababababababababababababababababababababababababab'
            b'abababab"},"nonce":"0123456789abcdef","preset":"","rounds":{"leader_timeout":2.0,"liveness_timeout":'
            b'5.0,"max_missed_rounds":3,"round_timeout":10.0,"warmup_rounds":3},"seed":0,"seq_len":32,'
            b'"settings":{},"strategy":"distro","version":1}')
IMPORTED_ID = "5122fc8869c95c39ecb59f1621b606a27d0045a6a49b63d91216f6e6a68560eb"


def _file(name: str, size: int = 100) -> InitFile:
    return InitFile(name, hashlib.sha256(name.encode()).hexdigest(), size)


SINGLE = (_file("config.json", 700), _file("model.safetensors", 1 << 20))
SHARDED = (_file("config.json"), _file("model-00001-of-00002.safetensors"),
           _file("model-00002-of-00002.safetensors"), _file("model.safetensors.index.json"))


def _spec(files: tuple[InitFile, ...]) -> InitSpec:
    return InitSpec(kind="hf", sha256="ab" * 32, model=preset("tiny").to_dict(), files=files)


def _manifest(files: tuple[InitFile, ...]) -> RunManifest:
    return RunManifest(preset="", init=_spec(files), nonce="0123456789abcdef")


@pytest.mark.parametrize("raw, run_id", [(SEEDED, SEEDED_ID), (IMPORTED, IMPORTED_ID)])
def test_manifests_from_before_the_file_list_keep_their_bytes_and_run_ids(raw: bytes, run_id: str) -> None:
    manifest = RunManifest.from_bytes(raw)
    assert manifest.to_bytes() == raw and manifest.run_id().hex() == run_id
    assert manifest.init.files == ()
    assert RunManifest(nonce="0123456789abcdef").to_bytes() == SEEDED  # a seeded run made today: the same
    assert _manifest(()).to_bytes() == IMPORTED


@pytest.mark.parametrize("files", [SINGLE, SHARDED])
def test_the_file_list_round_trips_in_one_byte_form(files: tuple[InitFile, ...]) -> None:
    manifest = _manifest(files)
    raw = manifest.to_bytes()
    doc = json.loads(raw)
    assert doc["init"]["files"] == [{"name": f.name, "sha256": f.sha256, "size": f.size} for f in files]
    parsed = RunManifest.from_bytes(raw)
    assert parsed == manifest and parsed.init.files == files and parsed.run_id() == manifest.run_id()
    assert manifest.run_id() != _manifest(()).run_id()  # the files are part of what the run id names
    with pytest.raises(ManifestError) as err:  # written out empty: not canonical
        RunManifest.from_bytes(IMPORTED.replace(b'"kind":"hf"', b'"files":[],"kind":"hf"'))
    assert err.value.field == "encoding"


def _bad(**changes: Any) -> InitFile:
    return replace(SINGLE[1], **changes)


@pytest.mark.parametrize("files, field", [
    ((SINGLE[0], _bad(name="../model.safetensors")), "init.files[1].name"),
    ((SINGLE[0], _bad(name="/etc/model.safetensors")), "init.files[1].name"),
    ((SINGLE[0], _bad(name="sub/model.safetensors")), "init.files[1].name"),
    ((SINGLE[0], _bad(name=".model.safetensors")), "init.files[1].name"),
    ((SINGLE[0], _bad(name="model.bin")), "init.files[1].name"),  # pickle: never loaded, never fetched
    ((SINGLE[0], _bad(name="model.safetensors.part")), "init.files[1].name"),
    ((SINGLE[0], _bad(name="m" * 100 + ".safetensors")), "init.files[1].name"),
    ((SINGLE[0], _bad(size=0)), "init.files[1].size"),
    ((SINGLE[0], _bad(size=MAX_INIT_FILE_BYTES + 1)), "init.files[1].size"),
    ((SINGLE[0], _bad(size=True)), "init.files[1].size"),
    ((SINGLE[0], _bad(sha256="AB" * 32)), "init.files[1].sha256"),
    ((SINGLE[1], SINGLE[0]), "init.files"),  # not sorted
    ((SINGLE[0], SINGLE[0], SINGLE[1]), "init.files"),  # twice
    ((SINGLE[1],), "init.files"),  # no config.json
    ((SINGLE[0], _file("other.safetensors")), "init.files"),  # no weights loading would read
])
def test_bad_file_lists_are_refused_naming_the_field(files: tuple[InitFile, ...], field: str) -> None:
    with pytest.raises(ManifestError) as err:
        _spec(files).check()
    assert err.value.field == field


def test_a_seeded_run_names_no_files_and_the_list_is_bounded() -> None:
    with pytest.raises(ManifestError) as err:
        InitSpec(files=SINGLE).check()
    assert err.value.field == "init"
    many = tuple(_file(f"s{i:04d}.safetensors") for i in range(MAX_INIT_FILES))  # sorted by name already
    with pytest.raises(ManifestError) as err:
        _spec((SINGLE[0], *many)).check()
    assert err.value.field == "init.files"


@pytest.mark.parametrize("edit, field", [
    (lambda f: f.__setitem__("path", "x"), "init.files[0]"),
    (lambda f: f.pop("size"), "init.files[0]"),
    (lambda f: f.__setitem__("size", "100"), "init.files[0].size"),
    (lambda f: f.__setitem__("name", 7), "init.files[0].name"),
])
def test_peer_bytes_with_a_malformed_file_entry_are_refused(edit: Any, field: str) -> None:
    doc = json.loads(_manifest(SINGLE).to_bytes())
    edit(doc["init"]["files"][0])
    raw = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    with pytest.raises(ManifestError) as err:
        RunManifest.from_bytes(raw)
    assert err.value.field == field
    doc["init"]["files"] = {"config.json": 1}
    with pytest.raises(ManifestError) as err:
        RunManifest.from_bytes(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())
    assert err.value.field == "init.files"

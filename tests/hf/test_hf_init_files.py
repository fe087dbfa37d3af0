"""An imported checkpoint's files in the run manifest and over the blob protocol, in one process: the founder
names the files loading reads, a peer serves only files that are the manifest's, a joiner fetches them by hash
into <data_dir>/init/<prefix>/ and loads them through the usual weights-hash check, and a bootstrap peer that
does not serve them is an error naming run.init_from and the hash."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import pytest
import trio
from distro_node.node.hf.convert import load_hf_checkpoint
from distro_node.node.hf.files import INDEX_FILE
from distro_node.node.peer import checkpointing
from distro_node.node.peer.init_fetch import (
    INIT_DIR,
    InitFetchError,
    catalog_init_files,
    fetch_init_files,
    init_folder,
)
from distro_node.node.peer.init_spec import InitSpec
from distro_node.node.peer.local import LocalSettings
from distro_node.node.peer.manifest import RunManifest
from distro_node.node.peer.run_init import founder_init_spec, initial_weights
from distro_node.node.peer.settings import founder_manifest, load_join_settings
from distro_node.node.peer.trainer import Trainer
from distro_node.protocol.blobs import BlobCatalog, BlobServer
from distro_node.protocol.testing import WAIT, connect_all_to, start_hosts
from hf_support import make_hf_model, save_hf_model


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The same weights stored as one file and as shards."""
    pytest.importorskip("transformers")
    root = tmp_path_factory.mktemp("hf")
    model = make_hf_model(seed=3)
    sharded = save_hf_model(model, root / "sharded", max_shard_size="40KB")
    return save_hf_model(model, root / "single"), sharded


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_founder_names_every_file_loading_reads(dirs: tuple[Path, Path]) -> None:
    single, sharded = dirs
    one, many = founder_init_spec(single), founder_init_spec(sharded)
    assert [f.name for f in one.files] == ["config.json", "model.safetensors"]
    shards = sorted(p.name for p in sharded.glob("model-*.safetensors"))
    assert len(shards) >= 2 and [f.name for f in many.files] == sorted(["config.json", INDEX_FILE, *shards])
    for spec, directory in ((one, single), (many, sharded)):
        for f in spec.files:
            assert (f.sha256, f.size) == (_sha(directory / f.name), (directory / f.name).stat().st_size)
    assert one.sha256 == many.sha256 == load_hf_checkpoint(single).sha256  # the weights, however stored
    manifest = RunManifest.found(preset="", init=many)
    assert RunManifest.from_bytes(manifest.to_bytes()) == manifest


def test_a_peer_serves_only_files_that_are_the_manifests(dirs: tuple[Path, Path]) -> None:
    single, sharded = dirs
    spec = founder_init_spec(single)
    catalog = BlobCatalog()
    assert catalog_init_files(catalog, spec, single, verified=False) == 2
    assert all(bytes.fromhex(f.sha256) in catalog for f in spec.files)
    # A joiner's own copy with the same weights in other files: accepted by the weights hash, not served.
    other = BlobCatalog()
    served = catalog_init_files(other, spec, sharded, verified=False)
    assert bytes.fromhex(spec.files[1].sha256) not in other and served == len(other) <= 1


def test_where_a_joiner_fetches_the_files(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    spec = founder_init_spec(dirs[0])
    assert init_folder(InitSpec(), None, tmp_path) is None
    assert init_folder(spec, dirs[0], tmp_path) is None  # its own copy
    assert init_folder(replace(spec, files=()), None, tmp_path) is None  # an older run: --init-from needed
    assert init_folder(spec, None, tmp_path) == (tmp_path / INIT_DIR / spec.sha256[:16], False)
    folder, temporary = init_folder(spec, None, None) or (None, False)
    assert temporary and folder is not None and folder.is_dir()
    folder.rmdir()


def test_a_joiner_fetches_the_files_by_hash_and_loads_them(dirs: tuple[Path, Path], tmp_path: Path) -> None:
    sharded = dirs[1]
    spec = founder_init_spec(sharded)
    folder = tmp_path / INIT_DIR / spec.sha256[:16]

    async def body() -> None:
        async with start_hosts(3) as (founder, joiner, empty):
            catalog = BlobCatalog()
            catalog_init_files(catalog, spec, sharded, verified=False)
            BlobServer(founder, catalog).install()
            BlobServer(empty, BlobCatalog()).install()
            with trio.fail_after(WAIT):
                await connect_all_to([founder, joiner, empty], founder)
                fetched = await fetch_init_files(joiner, founder.peer_id, spec, folder)
            assert fetched == sum(f.size for f in spec.files)
            with trio.fail_after(WAIT), pytest.raises(InitFetchError) as err:
                await fetch_init_files(joiner, empty.peer_id, spec, tmp_path / "nobody")
            assert err.value.field == "run.init_from" and spec.sha256 in str(err.value)
            assert "config.json" in str(err.value) and "--init-from" in str(err.value)

    trio.run(body)
    assert sorted(p.name for p in folder.iterdir()) == [f.name for f in spec.files]  # no .part left
    assert all(_sha(folder / f.name) == f.sha256 for f in spec.files)
    state = initial_weights(spec, folder)
    assert state is not None
    trainer = Trainer(RunManifest.found(preset="", init=spec), "joiner", LocalSettings(init_from=folder))
    assert trainer.weights_hash.hex() == spec.sha256


def test_a_founder_resumes_a_run_saved_before_files_were_named(dirs: tuple[Path, Path],
                                                               tmp_path: Path) -> None:
    from distro_node.node.checkpoint.store import CheckpointStore

    settings = load_join_settings(None, {"run.init_from": dirs[0]}, env={})
    today = founder_manifest(settings)
    before = replace(today, init=replace(today.init, files=()))  # what the founder wrote back then
    trainer = Trainer(before, "peer-a", LocalSettings(init_from=dirs[0]))
    checkpointing.save(CheckpointStore(tmp_path / "ckpts"), trainer, 3)
    resume, why = checkpointing.find_resume(tmp_path / "ckpts", founder_manifest(settings))
    assert resume is not None and resume.manifest.run_id() == before.run_id(), why
    assert resume.manifest.init.files == ()

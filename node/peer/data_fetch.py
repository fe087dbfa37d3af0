"""A run's prepared data over the swarm: what a peer serves, and how a joiner without a copy starts.

Serving. Every peer of a run on prepared data serves, over protocol/blobs.py, the run's files it holds
verified: a peer with the whole folder (the founder, or a joiner with its own copy) serves data.json, the
tokenizer, the document index and every shard once its trainer opened them (node/data/shards.py hashed each
one); a peer that fetched serves what it fetched, each file verified on arrival, and stops serving a shard
its cache evicts. Only to members (``allow``: not foreign per the host), a bounded number of uploads at once.

Starting without a copy. The run manifest names data.json by sha256 and size, and data.json names the
tokenizer and the index the same way: those three small files come first, verified, from the bootstrap peer
through the throwaway host that fetched the manifest (the real host must not connect before its gossip runs,
node/peer/startup.py). The shards follow during training, only those the peer's own batches read
(node/peer/data_feed.py), into a :class:`ShardCache` within ``run.data.cache_bytes``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from distro_node.protocol.blobs import BlobCatalog, BlobConfig, fetch_blob
from distro_node.protocol.host import P2PHost
from libp2p.peer.id import ID

from ..data.data_manifest import MANIFEST_NAME, Blob, DataManifest
from ..data.errors import DataError
from ..data.lazy import ShardNotReadyError, lazy_source, shard_dtype
from ..data.shard_cache import ShardCache
from ..data.shards import manifest_path, read_manifest
from ..data.source import TokenSource
from .local import LocalSetupError
from .manifest import DataSpec
from .run_data import PATH_FIELD

CACHE_DIR = "data-cache"


def fetch_folder(spec: DataSpec, data_path: Path | None, data_dir: Path | None) -> tuple[Path, bool] | None:
    """(folder, temporary) for a joiner that has no copy of the run's prepared dataset; None when it has
    one (or the run is not on prepared data). A ``--data-path`` folder without data.json becomes the cache;
    without data_dir the cache is a fresh temporary folder (two processes never share a partial file)."""
    if spec.kind != "shards":
        return None
    if data_path is not None:
        if manifest_path(data_path).is_file() or data_path.suffix == ".json":
            return None  # its own copy (checked by the usual path, which names a wrong one)
        return data_path, False
    if data_dir is not None:
        return data_dir.expanduser() / CACHE_DIR / spec.sha256[:16], False
    return Path(tempfile.mkdtemp(prefix="distro-node-data-")), True


async def fetch_head(host: P2PHost, peer: ID, spec: DataSpec, folder: Path,
                     config: BlobConfig | None = None) -> int:
    """data.json, then the tokenizer and the document index it names, each verified by sha256 and size;
    returns the bytes fetched. LocalSetupError naming run.data.path when the run's dataset cannot be fetched
    on demand (no index); protocol errors (TransportError) when no verified copy came."""
    folder.mkdir(parents=True, exist_ok=True)
    fetched = 0
    result = await fetch_blob(host, bytes.fromhex(spec.sha256), spec.size, [peer], folder / MANIFEST_NAME,
                              config)
    fetched += spec.size - result.resumed_from if result.served_by else 0
    try:
        manifest, _ = read_manifest(folder)
    except DataError as exc:
        raise LocalSetupError(PATH_FIELD, f"the run's data.json (fetched, sha256 {spec.sha256}): "
                                          f"{exc}") from None
    if manifest.tokenizer.sha256 != spec.tokenizer_sha256 or manifest.index is None:
        raise LocalSetupError(PATH_FIELD, f"the run's data.json (sha256 {spec.sha256}) names no document "
                                          "index (prepared before index.u64 existed), so its shards cannot "
                                          "be fetched on demand: pass a copy of the dataset with --data-path")
    for blob in head_blobs(manifest):
        result = await fetch_blob(host, bytes.fromhex(blob.sha256), blob.size, [peer], folder / blob.file,
                                  config)
        fetched += blob.size - result.resumed_from if result.served_by else 0
    return fetched


def head_blobs(manifest: DataManifest) -> list[Blob]:
    """The tokenizer and the document index: what a fetching peer needs before its first shard."""
    return [b for b in manifest.blobs() if b.file == manifest.tokenizer.file
            or (manifest.index is not None and b.file == manifest.index.file)]


def open_fetched(folder: Path, budget: int, catalog: BlobCatalog) -> tuple[ShardCache, TokenSource]:
    """The cache over ``folder`` (what an earlier run left there re-hashed first) and a TokenSource over it
    whose batches are those of a peer with every shard; fetched files are added to ``catalog``."""
    try:
        manifest, _ = read_manifest(folder)
        if manifest.index is None:
            raise LocalSetupError(PATH_FIELD, f"{folder / MANIFEST_NAME} names no document index")
        dtype = shard_dtype(manifest)
        cache = ShardCache(folder, budget, manifest.shard_blobs("train"), dtype,
                           on_evict=lambda blob: catalog.discard(bytes.fromhex(blob.sha256)))
        for i in cache.scan():
            catalog.add(cache.path(i), bytes.fromhex(cache.blobs[i].sha256))

        def heldout(index: int) -> np.ndarray:  # a joiner trains; it never evaluates the held-out split
            raise ShardNotReadyError("heldout", index)

        source = lazy_source(manifest, folder / manifest.index.file, cache.open, heldout,
                             f"shards:{folder.name}")
    except DataError as exc:
        raise LocalSetupError("run.data.cache_bytes" if "cache_bytes" in str(exc) else PATH_FIELD,
                              str(exc)) from None
    catalog.add(folder / MANIFEST_NAME)
    for blob in head_blobs(manifest):
        catalog.add(folder / blob.file, bytes.fromhex(blob.sha256))
    return cache, source


def catalog_full_copy(catalog: BlobCatalog, spec: DataSpec, data_path: Path) -> None:
    """Serve every file of the prepared dataset at ``data_path``: called once the trainer opened it, so
    each was hashed against data.json (and data.json against the run manifest)."""
    mpath = manifest_path(data_path)
    manifest, _ = read_manifest(mpath)
    catalog.add(mpath, bytes.fromhex(spec.sha256))
    for blob in manifest.blobs():
        catalog.add(mpath.parent / blob.file, bytes.fromhex(blob.sha256))


__all__ = ["CACHE_DIR", "catalog_full_copy", "fetch_folder", "fetch_head", "head_blobs",
           "open_fetched"]

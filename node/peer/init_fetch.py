"""An imported run's starting checkpoint over the swarm: what a peer serves, how a joiner without it starts.

Serving. The manifest names every file loading the checkpoint reads by sha256 and size (``init.files``,
node/peer/init_spec.py). A peer that built its trainer from a directory (the founder's ``--init-from``, a
joiner's own copy, or the files it fetched) serves, over protocol/blobs.py, each of those files whose bytes
are the manifest's: a joiner's own copy may hold the run's weights in other files (bf16, other shards), which
the weights hash accepts but which are not the files the manifest names, so those are hashed and left out.
Served to members only, like the run's data (the run's one BlobServer, node/peer/node.py).

Starting without a copy. Before its trainer can be built (it loads and checks the weights), a joiner of an
imported run without ``--init-from`` fetches the files from its bootstrap peer through the throwaway host
that fetched the manifest, as it fetches data.json (node/peer/startup.py: the real host must not connect
before its gossip runs), each verified by fetch_blob before it is renamed into place, into
``<data_dir>/init/<weights sha256 prefix>/`` (kept: a restart finds them verified and fetches nothing), or a
temporary folder removed at exit when there is no data dir. The trainer then loads that folder through the
usual path, which still checks the weights hash. A bootstrap peer that does not serve them (it joined with a
copy stored in other files) is an :class:`InitFetchError` naming ``run.init_from`` and the hash.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from distro_node.protocol.blobs import BlobCatalog, BlobConfig, fetch_blob
from distro_node.protocol.digests import file_sha256
from distro_node.protocol.errors import TransportError
from distro_node.protocol.host import P2PHost
from libp2p.peer.id import ID

from .init_spec import MAX_INIT_FILE_BYTES, InitSpec
from .local import LocalSetupError
from .run_init import INIT_FIELD

INIT_DIR = "init"


class InitFetchError(LocalSetupError):
    """The imported checkpoint's files could not be fetched; ``sha256`` is the run's weights hash."""

    def __init__(self, sha256: str, detail: str) -> None:
        super().__init__(INIT_FIELD, f"cannot fetch the run's imported checkpoint (weights sha256 {sha256}): "
                                     f"{detail}; pass a copy of its directory with --init-from DIR")
        self.sha256 = sha256


def init_folder(spec: InitSpec, init_from: Path | None, data_dir: Path | None) -> tuple[Path, bool] | None:
    """(folder, temporary) for a joiner that must fetch the run's checkpoint; None when the run is seeded,
    the joiner has its own copy, or the manifest names no files (the trainer then asks for --init-from)."""
    if spec.kind == "seed" or init_from is not None or not spec.files:
        return None
    if data_dir is not None:
        return data_dir.expanduser() / INIT_DIR / spec.sha256[:16], False
    return Path(tempfile.mkdtemp(prefix="distro-node-init-")), True


async def fetch_init_files(host: P2PHost, peer: ID, spec: InitSpec, folder: Path) -> int:
    """Every file of ``spec`` into ``folder``, each verified by sha256 and size; returns the bytes fetched.
    InitFetchError (naming the file and the peer) when one cannot be had."""
    folder.mkdir(parents=True, exist_ok=True)
    config = BlobConfig(max_blob_bytes=MAX_INIT_FILE_BYTES)
    fetched = 0
    for entry in spec.files:
        try:
            result = await fetch_blob(host, bytes.fromhex(entry.sha256), entry.size, [peer],
                                      folder / entry.name, config)
        except TransportError as exc:
            raise InitFetchError(spec.sha256, f"{entry.name} (sha256 {entry.sha256}, {entry.size:,} B) from "
                                              f"{peer}: {exc}") from exc
        except OSError as exc:
            raise InitFetchError(spec.sha256, f"{folder / entry.name}: {exc.strerror or exc}") from exc
        fetched += entry.size - result.resumed_from if result.served_by else 0
    return fetched


def catalog_init_files(catalog: BlobCatalog, spec: InitSpec, directory: Path, *, verified: bool) -> int:
    """Serve the files of ``directory`` that are the manifest's (all of them when ``verified``: just
    fetched by hash); returns how many. Blocking (hashes files): call from a worker thread."""
    served = 0
    for entry in spec.files:
        path = directory / entry.name
        try:
            if not path.is_file() or path.stat().st_size != entry.size:
                continue
            digest = bytes.fromhex(entry.sha256)
            if verified or file_sha256(path) == digest:
                catalog.add(path, digest)
                served += 1
        except OSError:
            continue  # a file we cannot read is one we do not serve; the weights were loaded already
    return served


__all__ = ["INIT_DIR", "InitFetchError", "catalog_init_files", "fetch_init_files",
           "init_folder"]

"""``/distro/manifest/1.0.0``: a joiner asks any peer of a run for the run manifest.

The manifest (model, optimizer, data settings) is opaque bytes here; the node defines it and derives the run
id as its sha256, so a joiner that was given the run id (the printed join command carries it) can check that
the bootstrap peer did not hand it another run. Requests are empty; replies are capped at
:data:`MAX_MANIFEST_BYTES`.
"""

from __future__ import annotations

import hashlib

from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID

from .errors import TransferError
from .host import P2PHost
from .rpc import RpcStatus, call, install_rpc

MANIFEST_PROTOCOL = TProtocol("/distro/manifest/1.0.0")
MAX_MANIFEST_BYTES = 64 * 1024


class ManifestMismatchError(TransferError):
    """The manifest a peer served does not hash to the run id we were told to join."""


def install_manifest_server(host: P2PHost, manifest: bytes, *, timeout: float = 10.0) -> None:
    if len(manifest) > MAX_MANIFEST_BYTES:
        raise ValueError(f"manifest of {len(manifest)} bytes exceeds {MAX_MANIFEST_BYTES}")

    async def handle(remote: ID, request: bytes) -> tuple[RpcStatus, bytes]:
        if request:
            return RpcStatus.BAD_REQUEST, b""
        return RpcStatus.OK, manifest

    install_rpc(host, MANIFEST_PROTOCOL, handle, max_request=0, timeout=timeout)


async def fetch_manifest(
    host: P2PHost, peer_id: ID, *, expected_run_id: bytes | None = None, timeout: float = 20.0
) -> bytes:
    """The peer's manifest bytes; ManifestMismatchError if they do not hash to ``expected_run_id``."""
    data = await call(host, peer_id, MANIFEST_PROTOCOL, b"", max_reply=MAX_MANIFEST_BYTES, timeout=timeout)
    if expected_run_id is not None and hashlib.sha256(data).digest() != expected_run_id:
        raise ManifestMismatchError("served manifest does not hash to the expected run id", str(peer_id))
    return data

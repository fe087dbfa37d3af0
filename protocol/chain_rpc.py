"""``/distro/chain/1.0.0``: a peer's state attestations and its chain of them (protocol/attestation.py).

Two requests, both small capped msgpack maps:

* ``sig``: this peer's own attestation of the state at ``step`` (digest and signature), if it made one. Peers
  gather each other's this way after a boundary they attest, to make a link of f + 1 or more signatures.
* ``chain``: the chain of links this peer keeps, from the run's root to its newest certified roster. A
  newcomer asks its donors and keeps the one that verifies furthest.

Pull rather than gossip: attestations are rare (a change of the active set, every few hundred steps) and only
needed by whoever keeps a chain, so they stay off the round protocol's topic and its door. ``admit`` judges
each requester first (banned peers and floods are answered ``BUSY``); in a permissioned run the host already
resets every stream of a peer without a ticket (protocol/admission.py), so only members are served.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgpack
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID

from .attestation import MAX_CHAIN_BYTES, ChainError, Link, decode_chain, encode_chain
from .errors import MalformedReplyError
from .host import P2PHost
from .message_fields import HASH_BYTES, MAX_STEP, SIGNATURE_BYTES
from .rpc import RpcRefusedError, RpcStatus, call, install_rpc
from .wire import refuse_msgpack_ext

CHAIN_PROTOCOL = TProtocol("/distro/chain/1.0.0")
MAX_REQUEST_BYTES = 128
MAX_SIG_REPLY_BYTES = 128

OwnAttestation = Callable[[int], tuple[bytes, bytes] | None]  # step -> (digest, signature) we made, if any


def _unpack(data: bytes, limit: int) -> Any:
    if len(data) > limit:
        raise ValueError(f"{len(data)} bytes exceed the cap {limit}")
    return msgpack.unpackb(data, raw=False, strict_map_key=True, max_bin_len=SIGNATURE_BYTES, max_str_len=16,
                           max_array_len=4, max_map_len=4, ext_hook=refuse_msgpack_ext)


class ChainServer:
    """Answers ``sig`` from ``own`` and ``chain`` from ``chain``, each requester first judged by ``admit``."""

    def __init__(self, host: P2PHost, run_id: bytes, *, own: OwnAttestation,
                 chain: Callable[[], tuple[Link, ...]], admit: Callable[[ID, str], bool],
                 timeout: float = 30.0) -> None:
        self.host = host
        self.run_id = run_id
        self._own = own
        self._chain = chain
        self._admit = admit
        self._timeout = timeout

    def install(self) -> None:
        install_rpc(self.host, CHAIN_PROTOCOL, self._handle, max_request=MAX_REQUEST_BYTES,
                    timeout=self._timeout)

    async def _handle(self, remote: ID, body: bytes) -> tuple[RpcStatus, bytes]:
        try:
            req = _unpack(body, MAX_REQUEST_BYTES)
        except Exception:
            return RpcStatus.BAD_REQUEST, b""
        if (not isinstance(req, dict) or req.get("run_id") != self.run_id
                or req.get("op") not in ("sig", "chain")):
            return RpcStatus.BAD_REQUEST, b""
        op = req["op"]
        if not self._admit(remote, op):
            return RpcStatus.BUSY, b""
        if op == "chain" and set(req) == {"op", "run_id"}:
            return RpcStatus.OK, encode_chain(self.run_id, self._chain())
        if op == "sig" and set(req) == {"op", "run_id", "step"}:
            step = req["step"]
            if type(step) is not int or not 0 <= step <= MAX_STEP:
                return RpcStatus.BAD_REQUEST, b""
            mine = self._own(step)
            if mine is None:
                return RpcStatus.NOT_FOUND, b""
            return RpcStatus.OK, msgpack.packb({"digest": mine[0], "sig": mine[1]}, use_bin_type=True)
        return RpcStatus.BAD_REQUEST, b""


async def fetch_chain(host: P2PHost, peer: ID, run_id: bytes, *, timeout: float) -> tuple[Link, ...]:
    """``peer``'s chain, parsed but not verified; a TransportError (MalformedReplyError for bad bytes)."""
    req = msgpack.packb({"op": "chain", "run_id": run_id}, use_bin_type=True)
    data = await call(host, peer, CHAIN_PROTOCOL, req, max_reply=MAX_CHAIN_BYTES, timeout=timeout)
    try:
        return decode_chain(data, run_id)
    except ChainError as exc:
        raise MalformedReplyError(f"chain: {exc}", str(peer)) from None


async def fetch_signature(host: P2PHost, peer: ID, run_id: bytes, step: int, *,
                          timeout: float) -> tuple[bytes, bytes] | None:
    """``peer``'s (digest, signature) for ``step``, None if it made none (yet); TransportError otherwise. The
    signature is not checked here: the caller knows which digest it expects."""
    req = msgpack.packb({"op": "sig", "run_id": run_id, "step": step}, use_bin_type=True)
    try:
        data = await call(host, peer, CHAIN_PROTOCOL, req, max_reply=MAX_SIG_REPLY_BYTES, timeout=timeout)
    except RpcRefusedError as exc:
        if exc.status == RpcStatus.NOT_FOUND:
            return None
        raise
    try:
        doc = _unpack(data, MAX_SIG_REPLY_BYTES)
    except Exception:
        raise MalformedReplyError("signature reply does not unpack", str(peer)) from None
    if (not isinstance(doc, dict) or set(doc) != {"digest", "sig"} or type(doc["digest"]) is not bytes
            or len(doc["digest"]) != HASH_BYTES or type(doc["sig"]) is not bytes
            or len(doc["sig"]) != SIGNATURE_BYTES):
        raise MalformedReplyError("signature reply must be a 32-byte digest and a 64-byte signature",
                                  str(peer))
    return doc["digest"], doc["sig"]


__all__ = ["CHAIN_PROTOCOL", "ChainServer", "fetch_chain", "fetch_signature"]

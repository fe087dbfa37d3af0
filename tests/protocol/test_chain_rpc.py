"""The ``/distro/chain/1.0.0`` server's door (protocol/chain_rpc.py): anything but an exact request of ours is
BAD_REQUEST before any work, a refused requester is BUSY, and the answers are what the keeper holds."""

from __future__ import annotations

import hashlib

import msgpack
import trio
from distro_node.protocol.attestation import Link, decode_chain
from distro_node.protocol.chain_rpc import ChainServer
from distro_node.protocol.membership import Roster, SyncState
from distro_node.protocol.rpc import RpcStatus
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID

RUN = hashlib.sha256(b"chain rpc").digest()
ASKER = ID.from_pubkey(create_new_key_pair().public_key)
LINK = Link(SyncState(4, Roster.genesis([str(ASKER)])), {str(ASKER): bytes(64)})


def pack(doc: object) -> bytes:
    return msgpack.packb(doc, use_bin_type=True)


def answers(bodies: list[bytes], admit: bool = True) -> list[tuple[RpcStatus, bytes]]:
    asked: list[str] = []

    def gate(peer: ID, op: str) -> bool:
        asked.append(op)
        return admit

    server = ChainServer(None, RUN, own=lambda step: (bytes(32), bytes(64)) if step == 4 else None,  # type: ignore[arg-type]
                         chain=lambda: (LINK,), admit=gate)

    async def body() -> list[tuple[RpcStatus, bytes]]:
        return [await server._handle(ASKER, b) for b in bodies]

    return trio.run(body)


def test_exact_requests_are_answered_from_the_keeper() -> None:
    (chain_status, chain), (sig_status, sig), (none_status, _) = answers([
        pack({"op": "chain", "run_id": RUN}),
        pack({"op": "sig", "run_id": RUN, "step": 4}),
        pack({"op": "sig", "run_id": RUN, "step": 5}),
    ])
    assert chain_status is RpcStatus.OK and decode_chain(chain, RUN) == (LINK,)
    assert sig_status is RpcStatus.OK and msgpack.unpackb(sig) == {"digest": bytes(32), "sig": bytes(64)}
    assert none_status is RpcStatus.NOT_FOUND


def test_malformed_or_foreign_requests_are_bad_and_refused_askers_busy() -> None:
    bad = [
        b"\xc1",
        b"\xd4\x01\x00",  # an extension type
        bytes(200),  # over the request cap
        pack([RUN, "chain"]),
        pack({"op": "chain", "run_id": bytes(32)}),  # another run
        pack({"op": "peers", "run_id": RUN}),
        pack({"op": "chain", "run_id": RUN, "extra": 1}),
        pack({"op": "sig", "run_id": RUN}),
        pack({"op": "sig", "run_id": RUN, "step": -1}),
        pack({"op": "sig", "run_id": RUN, "step": True}),
    ]
    assert {status for status, _ in answers(bad)} == {RpcStatus.BAD_REQUEST}
    busy = answers([pack({"op": "chain", "run_id": RUN}), pack({"op": "sig", "run_id": RUN, "step": 4})],
                   admit=False)
    assert busy == [(RpcStatus.BUSY, b""), (RpcStatus.BUSY, b"")]

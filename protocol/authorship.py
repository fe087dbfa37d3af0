"""Who wrote a payload: an author's signature over (run, step, author, payload hash).

Why a signature of its own, beside libp2p's signed gossip: gossip signing proves who *published* a message,
and an inclusion list is published by its leader. Without a signature the leader cannot forge, a leader could
name any hash for an honest peer (its own bytes, a negated copy) and every replica would apply it, blaming
the honest peer for what it "sent". With one, a list entry is valid only with its author's signature over
exactly that hash, so the leader can only pick among payloads their authors really signed, and anyone who
holds the bytes can check their author.

An author that signs two different hashes for one step has equivocated, and the two signatures prove it to
everyone (:mod:`.evidence`).

Checked against the key inside the author's peer id (protocol/signatures.py); which parts of which
message claim authorship is protocol/claims.py's business.
"""

from __future__ import annotations

from libp2p.crypto.keys import PrivateKey

from .message_fields import HASH_BYTES, RUN_ID_BYTES, SIGNATURE_BYTES, id_bytes
from .signatures import signed_by

_DOMAIN = b"distro-node/authorship/v1\0"


def authorship_statement(run_id: bytes, step: int, author: str, payload_hash: bytes) -> bytes:
    """The exact bytes an author signs: domain-separated and length-prefixed, so no other message of ours
    (or of any other libp2p protocol) can be replayed as one."""
    if len(run_id) != RUN_ID_BYTES or len(payload_hash) != HASH_BYTES:
        raise ValueError("run id and payload hash must be 32 bytes")
    return _DOMAIN + run_id + step.to_bytes(8, "big") + id_bytes(author) + payload_hash


def sign_authorship(key: PrivateKey, run_id: bytes, step: int, author: str, payload_hash: bytes) -> bytes:
    """Our signature over our own payload of ``step`` (``author`` is our own peer id)."""
    return bytes(key.sign(authorship_statement(run_id, step, author, payload_hash)))


def authorship_valid(run_id: bytes, step: int, author: str, payload_hash: bytes, signature: bytes) -> bool:
    """True only if ``author``'s key signed exactly this statement; any malformed part is simply False."""
    if len(run_id) != RUN_ID_BYTES or type(payload_hash) is not bytes or len(payload_hash) != HASH_BYTES:
        return False
    return signed_by(author, authorship_statement(run_id, step, author, payload_hash), signature)


class AuthorshipSigner:
    """Signs this node's payloads; handed to the announcer so nothing else touches the private key."""

    def __init__(self, key: PrivateKey, self_id: str, run_id: bytes) -> None:
        self._key = key
        self._self_id = self_id
        self._run_id = run_id

    def sign(self, step: int, payload_hash: bytes) -> bytes:
        return sign_authorship(self._key, self._run_id, step, self._self_id, payload_hash)


__all__ = [
    "SIGNATURE_BYTES",
    "AuthorshipSigner",
    "authorship_statement",
    "authorship_valid",
    "sign_authorship",
]

"""Who wrote a payload: an author's signature over (run, step, author, payload hash).

Why a signature of its own, beside libp2p's signed gossip: gossip signing proves who *published* a message,
and an inclusion list is published by its leader. Without a signature the leader cannot forge, a leader could
name any hash for an honest peer (its own bytes, a negated copy) and every replica would apply it, blaming
the honest peer for what it "sent". With one, a list entry is valid only with its author's signature over
exactly that hash, so the leader can only pick among payloads their authors really signed, and anyone who
holds the bytes can check their author.

An author that signs two different hashes for one step has equivocated, and the two signatures prove it to
everyone (:mod:`.evidence`).

Peer ids of this project are ed25519 identity multihashes, so the public key is read from the id itself: no
key exchange, nothing to look up.
"""

from __future__ import annotations

from libp2p.crypto.keys import KeyType, PrivateKey
from libp2p.peer.id import ID

from .message_fields import HASH_BYTES, RUN_ID_BYTES, SIGNATURE_BYTES, id_bytes
from .messages import Announcement, InclusionList, Message

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
    if type(signature) is not bytes or len(signature) != SIGNATURE_BYTES:
        return False
    try:
        key = ID.from_base58(author).extract_public_key()
    except Exception:  # not base58, not a multihash, not a key: a stranger's string, never our bug
        return False
    if key is None or key.get_type() != KeyType.Ed25519:
        return False
    try:
        return bool(key.verify(authorship_statement(run_id, step, author, payload_hash), signature))
    except Exception:  # PyNaCl raises its own types for malformed signatures
        return False


def forged_part(message: Message) -> str | None:
    """The first authorship claim in ``message`` that its author did not sign (None: all signed).

    Announcements and list entries claim one statement each; an equivocation proof claims two, by one author
    and for one step of this run.
    """
    run = message.run_id
    if isinstance(message, Announcement):
        ok = authorship_valid(run, message.step, message.peer_id, message.payload_hash, message.signature)
        return None if ok else "announcement signature"
    if not isinstance(message, InclusionList):
        return None
    for (peer, payload_hash), signature in zip(message.entries, message.signatures, strict=True):
        if not authorship_valid(run, message.step, peer, payload_hash, signature):
            return f"entry of {peer[-8:]}"
    for proof in message.evidence:
        for payload_hash, signature in (proof.first, proof.second):
            if not authorship_valid(run, proof.step, proof.peer, payload_hash, signature):
                return f"evidence against {proof.peer[-8:]}"
    return None


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
    "forged_part",
    "sign_authorship",
]

"""Checking a peer's ed25519 signature over one of our statements, from nothing but its peer id.

Peer ids of this project are ed25519 identity multihashes, so the public key is read from the id itself: no
key exchange, nothing to look up, and a statement signed by one peer can be relayed by anyone (a list entry
inside a leader's proposal, a vote inside a certificate) and still be checked by every receiver.

Every statement starts with its own domain string, so a signature made for one kind of statement (a payload's
authorship, a prevote, a precommit) can never be replayed as another.
"""

from __future__ import annotations

from libp2p.crypto.keys import KeyType, PrivateKey, PublicKey
from libp2p.peer.id import ID

from .message_fields import SIGNATURE_BYTES, Signer


def signer_for(key: PrivateKey) -> Signer:
    """The one function that signs with this node's key."""
    def sign(statement: bytes) -> bytes:
        return bytes(key.sign(statement))
    return sign


def is_ed25519_peer_id(peer: str) -> bool:
    """Whether ``peer`` is a peer id whose ed25519 public key can be read from the id itself."""
    return _public_key(peer) is not None


def _public_key(peer: str) -> PublicKey | None:
    try:
        key = ID.from_base58(peer).extract_public_key()
    except Exception:  # not base58, not a multihash, not a key: a stranger's string, never our bug
        return None
    return key if key is not None and key.get_type() == KeyType.Ed25519 else None


def signed_by(peer: str, statement: bytes, signature: object) -> bool:
    """True only if ``peer``'s key signed exactly ``statement``; any malformed part is simply False."""
    if type(signature) is not bytes or len(signature) != SIGNATURE_BYTES:
        return False
    key = _public_key(peer)
    if key is None:
        return False
    try:
        return bool(key.verify(statement, signature))
    except Exception:  # PyNaCl raises its own types for malformed signatures
        return False


__all__ = ["Signer", "is_ed25519_peer_id", "signed_by", "signer_for"]

"""Persistent ed25519 node identity.

The peer id is how the swarm keeps scores, bans and inclusion lists across reconnects, so it must survive
restarts: a node that got a fresh id on every start could shed a bad reputation by restarting. Hence a key
file that is created once (0600, never world-readable) and afterwards only read. A file that does not decode
is an operator problem, never a reason to mint a new identity over it.

File format: the libp2p protobuf ``PrivateKey`` encoding (key type + key bytes), the same framing other
libp2p tools use. The key bytes are the 32-byte ed25519 seed (py-libp2p's form) or the 64-byte seed||public
form (go-libp2p's form); both load.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from google.protobuf.message import DecodeError
from libp2p.crypto.ed25519 import Ed25519PrivateKey, create_new_key_pair
from libp2p.crypto.keys import KeyPair, KeyType, PrivateKey
from libp2p.peer.id import ID

from .errors import CorruptKeyFileError, WrongKeyTypeError

logger = logging.getLogger(__name__)

# A protobuf ed25519 key is ~70 bytes; anything far larger is not a key file, and capping the read keeps a
# mistyped path (a model checkpoint, say) from being slurped into memory.
_MAX_KEY_FILE_BYTES = 4096
_SEED_LEN = 32


def peer_id_of(key_pair: KeyPair) -> ID:
    """The libp2p peer id a key pair presents on the wire."""
    return ID.from_pubkey(key_pair.public_key)


def load_or_create_identity(path: Path | str) -> KeyPair:
    """Load the key at ``path``; create it (mode 0600) only when no file exists at all."""
    key_path = Path(path)
    if key_path.exists() or key_path.is_symlink():
        return load_identity(key_path)
    return _create_identity(key_path)


def load_identity(path: Path | str) -> KeyPair:
    """Load an existing key file, raising a typed error that names the file when it is unusable."""
    key_path = Path(path)
    try:
        with key_path.open("rb") as fh:
            mode = os.fstat(fh.fileno()).st_mode
            raw = fh.read(_MAX_KEY_FILE_BYTES + 1)
    except IsADirectoryError as exc:
        raise CorruptKeyFileError(key_path, "is a directory") from exc
    except OSError as exc:
        raise CorruptKeyFileError(key_path, f"cannot read: {exc.strerror or exc}") from exc
    if len(raw) > _MAX_KEY_FILE_BYTES:
        raise CorruptKeyFileError(key_path, f"larger than {_MAX_KEY_FILE_BYTES} bytes; not a key file")
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        logger.warning("identity key file %s is accessible by group/others (mode %o)", key_path, mode & 0o777)
    return _decode_private_key(key_path, raw)


def _decode_private_key(key_path: Path, raw: bytes) -> KeyPair:
    if not raw:
        raise CorruptKeyFileError(key_path, "empty file")
    try:
        proto = PrivateKey.deserialize_from_protobuf(raw)
    except (DecodeError, ValueError) as exc:
        raise CorruptKeyFileError(key_path, f"not a libp2p private key ({exc})") from exc
    # proto2 parsing accepts many byte strings as "a message with defaults"; insist on the fields we need.
    if not proto.HasField("key_type") or not proto.HasField("data"):
        raise CorruptKeyFileError(key_path, "missing key type or key data")
    if proto.key_type != KeyType.Ed25519.value:
        try:
            type_name = KeyType(proto.key_type).name
        except ValueError:
            type_name = f"unknown type {proto.key_type}"
        raise WrongKeyTypeError(key_path, f"holds a {type_name} key, expected Ed25519")
    data = bytes(proto.data)
    if len(data) not in (_SEED_LEN, 2 * _SEED_LEN):
        raise CorruptKeyFileError(key_path, f"ed25519 key data is {len(data)} bytes, expected 32 or 64")
    try:
        private_key = Ed25519PrivateKey.from_bytes(data[:_SEED_LEN])
    except Exception as exc:  # PyNaCl raises its own types for bad seeds
        raise CorruptKeyFileError(key_path, f"invalid ed25519 seed ({exc})") from exc
    public_key = private_key.get_public_key()
    if len(data) == 2 * _SEED_LEN and public_key.to_bytes() != data[_SEED_LEN:]:
        raise CorruptKeyFileError(key_path, "embedded public key does not match the seed")
    return KeyPair(private_key, public_key)


def _create_identity(key_path: Path) -> KeyPair:
    """Write a fresh key without ever overwriting: tmp file -> fsync -> hard link (fails if path exists)."""
    key_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key_pair = create_new_key_pair()
    blob = key_pair.private_key.serialize()
    tmp = key_path.with_name(f".{key_path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, key_path)
        except FileExistsError:
            # Another process created it first; its key wins and ours is discarded.
            return load_identity(key_path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(key_path.parent)
    return key_pair


def _fsync_dir(directory: Path) -> None:
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)

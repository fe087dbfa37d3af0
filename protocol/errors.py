"""Typed errors of the transport layer.

Callers (the round logic, the daemon, peer scoring) must tell a misbehaving peer from a slow one and from a
local misconfiguration, so every failure mode gets its own type instead of a generic exception with a
message to parse. All of them derive from ``TransportError`` so one ``except`` can still fence the layer.
"""

from __future__ import annotations

from pathlib import Path


class TransportError(Exception):
    """Base of every error raised by the libp2p transport layer of ``distro_node.protocol``."""


# --- identity -------------------------------------------------------------------------------------------


class IdentityError(TransportError):
    """The node's key file cannot be used. Carries the path so the operator knows which file to inspect."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"identity key file {path}: {reason}")
        self.path = path
        self.reason = reason


class CorruptKeyFileError(IdentityError):
    """The key file exists but does not decode; it is left untouched so no identity is silently replaced."""


class WrongKeyTypeError(IdentityError):
    """The key file decodes to a key type other than ed25519."""


# --- host and dialing -------------------------------------------------------------------------------------


class BadMultiaddrError(TransportError, ValueError):
    """A multiaddr given by the user or a peer does not parse or lacks a required part (e.g. ``/p2p/``)."""

    def __init__(self, addr: str, reason: str) -> None:
        super().__init__(f"bad multiaddr {addr!r}: {reason}")
        self.addr = addr
        self.reason = reason


class DialError(TransportError):
    """A connection to a peer could not be established within the dial timeout."""

    def __init__(self, target: str, reason: str) -> None:
        super().__init__(f"cannot dial {target}: {reason}")
        self.target = target
        self.reason = reason


class ProtocolNotSpokenError(DialError):
    """The peer's identify reply lists none of our protocols: it is not a member of any distro run (another
    libp2p application on the same network), so no stream of ours is opened to it."""

    def __init__(self, target: str, protocol: str) -> None:
        super().__init__(target, f"does not speak {protocol} (identify lists no /distro/ protocol)")
        self.protocol = protocol


class BootstrapError(TransportError):
    """None of the bootstrap peers could be reached, so the node is alone."""


class PeerExchangeError(TransportError):
    """A peer-exchange reply was malformed or over its caps."""


# --- gossip -------------------------------------------------------------------------------------------------


class GossipError(TransportError):
    """Base for announcement-topic failures."""


class AnnouncementTooLargeError(GossipError):
    """Raised by publish instead of letting py-libp2p drop an oversized message without a word."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"announcement of {size} bytes exceeds the {limit}-byte gossip limit")
        self.size = size
        self.limit = limit


# --- payload store and transfer ----------------------------------------------------------------------------


class StoreError(TransportError):
    """Base for payload-store refusals."""


class PayloadTooLargeForStoreError(StoreError):
    """A single payload is larger than the whole store budget."""


class StaleStepError(StoreError):
    """A payload for a step older than the store window was offered; keeping it would evict fresher data."""


class TransferError(TransportError):
    """Base for payload-transfer failures; ``peer`` names the remote side when there is one."""

    def __init__(self, message: str, peer: str | None = None) -> None:
        super().__init__(message if peer is None else f"{message} (peer {peer})")
        self.peer = peer


class PayloadTooLargeError(TransferError):
    """The remote announced a length above our cap; the stream was reset before allocating anything."""


class HashMismatchError(TransferError):
    """The bytes received do not hash to the requested sha256: a corrupt or malicious holder."""


class PayloadNotFoundError(TransferError):
    """The remote answered that it does not hold the requested payload."""


class RemoteBusyError(TransferError):
    """The remote is at its concurrent-upload limit; another holder should be tried."""


class MalformedReplyError(TransferError):
    """The reply violated the wire format (unknown status, truncated body, trailing bytes)."""


class TransferTimeoutError(TransferError):
    """One attempt exceeded its time budget."""


class BadRequestError(TransferError):
    """A payload request is malformed (raised by the codec; the server answers BAD_REQUEST)."""


class FetchFailedError(TransferError):
    """Every holder was tried and failed; ``attempts`` lists (peer, error) per holder in the order tried."""

    def __init__(self, payload_hash: bytes, attempts: list[tuple[str, TransportError]]) -> None:
        detail = "; ".join(f"{peer}: {type(err).__name__}" for peer, err in attempts) or "no holders"
        super().__init__(f"payload {payload_hash.hex()[:16]} unavailable ({detail})")
        self.payload_hash = payload_hash
        self.attempts = attempts

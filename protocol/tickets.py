"""Admission tickets of a permissioned run: the founder's signature over (run, peer id, expiry).

A permissioned run names its founder's peer id in the manifest (so in the run id). Only the founder and
holders of a ticket the founder's key signed for *their own* peer id are admitted: a ticket names one
identity, so it cannot be lent, and a peer proves it holds the identity by the connection's handshake. The
expiry is a Unix time in seconds, checked against each node's own clock: admission is a transport decision
(who is served, whose gossip is accepted), not replicated state, so clocks need not agree to the second.

Wire form (``/distro/ticket/1.0.0`` and ticket files): a msgpack map ``{run, peer, expires, sig}``, at most
:data:`MAX_TICKET_BYTES`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack
from libp2p.crypto.keys import PrivateKey

from .message_fields import RUN_ID_BYTES, SIGNATURE_BYTES, check_peer_id
from .signatures import signed_by, signer_for
from .wire import refuse_msgpack_ext

MAX_TICKET_BYTES = 512
DEFAULT_TICKET_DAYS = 30.0  # `distro-node ticket issue --days`
MAX_EXPIRY = 2**40  # seconds since 1970: far beyond any real expiry, small enough for 8 bytes
_DOMAIN = b"distro-node/ticket/v1\0"


class TicketError(ValueError):
    """A ticket is malformed, signed by someone other than the founder, for another run or peer, or expired.
    The message names what is wrong."""


@dataclass(frozen=True)
class Ticket:
    run_id: bytes
    peer_id: str
    expires: int  # Unix time, seconds
    signature: bytes

    @classmethod
    def issue(cls, founder_key: PrivateKey, run_id: bytes, peer_id: str, expires: int) -> Ticket:
        check_peer_id("peer_id", peer_id)
        if not 0 < expires < MAX_EXPIRY:
            raise TicketError(f"expiry {expires} is not a Unix time")
        return cls(run_id, peer_id, expires, signer_for(founder_key)(_statement(run_id, peer_id, expires)))

    def to_bytes(self) -> bytes:
        return msgpack.packb({"run": self.run_id, "peer": self.peer_id, "expires": self.expires,
                              "sig": self.signature}, use_bin_type=True)

    @classmethod
    def from_bytes(cls, data: bytes) -> Ticket:
        """Strict parse of a stranger's bytes (shape only; :meth:`check` says whether it admits anyone)."""
        if len(data) > MAX_TICKET_BYTES:
            raise TicketError(f"ticket of {len(data)} bytes exceeds {MAX_TICKET_BYTES}")
        try:
            doc: Any = msgpack.unpackb(data, raw=False, strict_map_key=True, max_bin_len=MAX_TICKET_BYTES,
                                       max_str_len=MAX_TICKET_BYTES, max_array_len=0, max_map_len=4,
                                       ext_hook=refuse_msgpack_ext)
        except Exception as exc:
            raise TicketError(f"ticket does not unpack: {type(exc).__name__}") from None
        if not isinstance(doc, dict) or set(doc) != {"run", "peer", "expires", "sig"}:
            raise TicketError("ticket must have exactly run, peer, expires, sig")
        run, peer, expires, sig = doc["run"], doc["peer"], doc["expires"], doc["sig"]
        if type(run) is not bytes or len(run) != RUN_ID_BYTES:
            raise TicketError(f"ticket run must be {RUN_ID_BYTES} bytes")
        if type(sig) is not bytes or len(sig) != SIGNATURE_BYTES:
            raise TicketError(f"ticket sig must be {SIGNATURE_BYTES} bytes")
        if type(expires) is not int or not 0 < expires < MAX_EXPIRY:
            raise TicketError("ticket expires must be a Unix time")
        try:
            check_peer_id("peer", peer)
        except ValueError as exc:
            raise TicketError(f"ticket {exc}") from None
        return cls(run, peer, expires, sig)

    def check(self, *, run_id: bytes, founder: str, holder: str, now: float) -> None:
        """TicketError unless this ticket admits ``holder`` to run ``run_id`` at time ``now``."""
        if self.run_id != run_id:
            raise TicketError("ticket is for another run")
        if self.peer_id != holder:
            raise TicketError(f"ticket names peer {self.peer_id[-8:]}, presented by {holder[-8:]}")
        if not signed_by(founder, _statement(self.run_id, self.peer_id, self.expires), self.signature):
            raise TicketError("ticket is not signed by the run's founder")
        if now >= self.expires:
            raise TicketError(f"ticket expired {int(now - self.expires)} s ago")


def _statement(run_id: bytes, peer_id: str, expires: int) -> bytes:
    return _DOMAIN + run_id + expires.to_bytes(8, "big") + peer_id.encode()


__all__ = ["DEFAULT_TICKET_DAYS", "MAX_TICKET_BYTES", "Ticket", "TicketError"]

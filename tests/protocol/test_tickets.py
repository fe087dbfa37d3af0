"""Admission tickets (protocol/tickets.py): only the founder's signature over this run, this holder and a
future expiry admits anyone, and a stranger's malformed bytes are a TicketError naming what is wrong."""

from __future__ import annotations

import hashlib

import msgpack
import pytest
from distro_node.protocol.identity import peer_id_of
from distro_node.protocol.tickets import MAX_TICKET_BYTES, Ticket, TicketError
from libp2p.crypto.ed25519 import create_new_key_pair

RUN = hashlib.sha256(b"permissioned run").digest()
FOUNDER = create_new_key_pair()
FOUNDER_ID = str(peer_id_of(FOUNDER))
HOLDER_ID = str(peer_id_of(create_new_key_pair()))
NOW = 1_800_000_000.0


def issued(**kw: object) -> Ticket:
    args = {"run_id": RUN, "peer_id": HOLDER_ID, "expires": int(NOW) + 3600, **kw}
    return Ticket.issue(FOUNDER.private_key, **args)  # type: ignore[arg-type]


def test_a_ticket_round_trips_and_admits_its_holder_until_it_expires() -> None:
    ticket = Ticket.from_bytes(issued().to_bytes())
    ticket.check(run_id=RUN, founder=FOUNDER_ID, holder=HOLDER_ID, now=NOW)
    with pytest.raises(TicketError, match="expired"):
        ticket.check(run_id=RUN, founder=FOUNDER_ID, holder=HOLDER_ID, now=NOW + 3600)


@pytest.mark.parametrize(("change", "match"), [
    ({"run_id": hashlib.sha256(b"another run").digest()}, "another run"),
    ({"holder": str(peer_id_of(create_new_key_pair()))}, "presented by"),
    ({"founder": str(peer_id_of(create_new_key_pair()))}, "not signed by the run's founder"),
])
def test_a_ticket_admits_nobody_else_and_nowhere_else(change: dict[str, object], match: str) -> None:
    args: dict[str, object] = {"run_id": RUN, "founder": FOUNDER_ID, "holder": HOLDER_ID, "now": NOW}
    args.update(change)
    with pytest.raises(TicketError, match=match):
        issued().check(**args)  # type: ignore[arg-type]


def test_a_ticket_signed_by_a_stranger_or_edited_is_refused() -> None:
    stranger = Ticket.issue(create_new_key_pair().private_key, RUN, HOLDER_ID, int(NOW) + 3600)
    with pytest.raises(TicketError, match="founder"):
        stranger.check(run_id=RUN, founder=FOUNDER_ID, holder=HOLDER_ID, now=NOW)
    longer = Ticket(RUN, HOLDER_ID, int(NOW) + 10**6, issued().signature)  # expiry pushed out by its holder
    with pytest.raises(TicketError, match="founder"):
        longer.check(run_id=RUN, founder=FOUNDER_ID, holder=HOLDER_ID, now=NOW)


@pytest.mark.parametrize(("data", "match"), [
    (b"\xc1", "does not unpack"),
    (b"x" * (MAX_TICKET_BYTES + 1), "exceeds"),
    (msgpack.packb({"run": RUN}), "exactly"),
    (msgpack.packb({"run": b"short", "peer": HOLDER_ID, "expires": 5, "sig": bytes(64)}), "run must be"),
    (msgpack.packb({"run": RUN, "peer": HOLDER_ID, "expires": -1, "sig": bytes(64)}), "Unix time"),
    (msgpack.packb({"run": RUN, "peer": "a b", "expires": 5, "sig": bytes(64)}), "printable"),
    (msgpack.packb({"run": RUN, "peer": HOLDER_ID, "expires": 5, "sig": b"s"}), "sig must be"),
])
def test_malformed_ticket_bytes_raise_a_ticket_error_naming_the_field(data: bytes, match: str) -> None:
    with pytest.raises(TicketError, match=match):
        Ticket.from_bytes(data)

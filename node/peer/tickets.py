"""Ticket files and this node's admission policy (protocol/admission.py, protocol/tickets.py).

A ticket file holds the ticket's bytes as hex on one line, so a founder can paste it into a message and a
volunteer can save it as it came. ``distro-node ticket issue`` writes one; ``join --ticket`` reads it.
"""

from __future__ import annotations

import time
from pathlib import Path

from distro_node.protocol.admission import Admission
from distro_node.protocol.tickets import MAX_TICKET_BYTES, Ticket, TicketError
from libp2p.crypto.keys import PrivateKey

from .manifest import RunManifest

_DAY = 86_400


def write_ticket_file(path: Path, ticket: Ticket) -> None:
    path.write_text(ticket.to_bytes().hex() + "\n")


def issue_ticket_file(path: Path, founder_key: PrivateKey, run_id: bytes, peer_id: str,
                      days: float) -> Ticket:
    """Sign a ticket admitting ``peer_id`` to ``run_id`` for ``days`` from now and write it to ``path``."""
    ticket = Ticket.issue(founder_key, run_id, peer_id, int(time.time() + days * _DAY))
    write_ticket_file(path, ticket)
    return ticket


def read_ticket_file(path: Path) -> Ticket:
    """The ticket in ``path``; TicketError naming the file for anything unreadable or malformed."""
    try:
        text = path.read_text()[: 2 * MAX_TICKET_BYTES + 2].strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise TicketError(f"cannot read ticket file {path}: {exc}") from None
    try:
        data = bytes.fromhex(text)
    except ValueError:
        raise TicketError(f"ticket file {path} must hold one line of hex") from None
    return Ticket.from_bytes(data)


def admission_for(manifest: RunManifest, run_id: bytes, self_id: str, ticket_file: Path | None) -> Admission:
    """Who we admit: everyone in an open run; in a permissioned one the founder and ticket holders, and we
    need a ticket ourselves unless we are the founder. TicketError says what is missing or wrong."""
    founder = manifest.founder or None
    if founder is None:
        if ticket_file is not None:
            raise TicketError("this run is open (its manifest names no founder): it takes no ticket")
        return Admission(run_id=run_id, self_id=self_id, founder=None, own_ticket=None)
    ticket = read_ticket_file(ticket_file) if ticket_file is not None else None
    return Admission(run_id=run_id, self_id=self_id, founder=founder, own_ticket=ticket)


__all__ = ["admission_for", "issue_ticket_file", "read_ticket_file", "write_ticket_file"]

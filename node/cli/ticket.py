"""`distro-node ticket`: admission tickets of a permissioned run.

A volunteer runs ``ticket id`` and sends the printed peer id to the founder; the founder runs ``ticket issue``
with its own key and the run id and sends back the file, which the volunteer passes as ``join --ticket``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from distro_node.node.cli.common import UsageError
from distro_node.node.peer.tickets import issue_ticket_file
from distro_node.protocol.identity import load_or_create_identity, peer_id_of
from distro_node.protocol.signatures import is_ed25519_peer_id
from distro_node.protocol.tickets import DEFAULT_TICKET_DAYS


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "ticket", help="admission tickets of a permissioned run: show a key's peer id, or issue a ticket",
        description="A permissioned run (join --admission permissioned) admits only its founder and peers "
                    "holding a ticket signed by the founder's key. A volunteer runs `ticket id --key-file "
                    "KEY` and sends the peer id to the founder; the founder runs `ticket issue` and sends "
                    "back the file for `join --ticket FILE`.")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    ident = verbs.add_parser("id", help="print the peer id of a key file (created if missing)")
    ident.add_argument("--key-file", type=Path, required=True, help="the ed25519 identity key join will use")
    ident.set_defaults(func=_run_id)
    issue = verbs.add_parser("issue", help="sign a ticket admitting one peer id (founders)")
    issue.add_argument("peer_id", metavar="PEER_ID", help="the volunteer's peer id (`distro-node ticket id`)")
    issue.add_argument("--key-file", type=Path, required=True,
                       help="the founder's identity key (the one its run's manifest names)")
    issue.add_argument("--run-id", required=True, metavar="HEX", help="the run id the founder printed")
    issue.add_argument("--days", type=float, default=DEFAULT_TICKET_DAYS,
                       help=f"how long the ticket admits the peer (default {DEFAULT_TICKET_DAYS} days)")
    issue.add_argument("--out", type=Path, default=None, metavar="FILE",
                       help="where to write it (default ./ticket-<last 8 characters of the peer id>.hex)")
    issue.set_defaults(func=_run_issue)


def _run_id(args: argparse.Namespace) -> int:
    print(peer_id_of(load_or_create_identity(args.key_file)))
    return 0


def _run_issue(args: argparse.Namespace) -> int:
    if not is_ed25519_peer_id(args.peer_id):
        raise UsageError("PEER_ID", f"{args.peer_id!r} is not an ed25519 peer id (12D3KooW...)")
    try:
        run_id = bytes.fromhex(args.run_id)
    except ValueError:
        run_id = b""
    if len(run_id) != 32:
        raise UsageError("--run-id", "must be 64 hex characters")
    if not 0 < args.days <= 3650:
        raise UsageError("--days", f"must be in (0, 3650], got {args.days}")
    if not args.key_file.is_file():
        raise UsageError("--key-file", f"{args.key_file} does not exist (tickets are signed with the "
                                       "founder's key)")
    key = load_or_create_identity(args.key_file)
    out = args.out or Path(f"ticket-{args.peer_id[-8:]}.hex")
    ticket = issue_ticket_file(out, key.private_key, run_id, args.peer_id, args.days)
    print(f"wrote {out}: admits {args.peer_id} to run {args.run_id[:12]}... until "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(ticket.expires))}; signed by {peer_id_of(key)}")
    return 0

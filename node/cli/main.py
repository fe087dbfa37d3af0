"""The `distro-node` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from distro_node.node.cli import data as cli_data
from distro_node.node.cli import doctor as cli_doctor
from distro_node.node.cli import export as cli_export
from distro_node.node.cli import init as cli_init
from distro_node.node.cli import join as cli_join
from distro_node.node.cli import simulate as cli_simulate
from distro_node.node.cli import status as cli_status
from distro_node.node.cli import swarm as cli_swarm
from distro_node.node.cli import ticket as cli_ticket

from distro_node import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="distro-node",
        description=(
            "Peer-to-peer training with DisTrO: each peer sends a compressed update ~1000x smaller than a "
            "dense gradient and applies the same aggregate as every other honest peer."
        ),
    )
    parser.add_argument("--version", action="version", version=f"distro-node {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    cli_simulate.add_parser(sub)
    cli_join.add_parser(sub)
    cli_swarm.add_parser(sub)
    cli_init.add_parser(sub)
    cli_doctor.add_parser(sub)
    cli_status.add_parser(sub)
    cli_export.add_parser(sub)
    cli_data.add_parser(sub)
    cli_ticket.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except ValueError as exc:  # every config and data error is a ValueError subclass naming its field
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

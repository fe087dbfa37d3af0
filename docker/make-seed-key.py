"""Create a node identity key ahead of time and print the peer id and the address others bootstrap from.

A seed node needs an identity fixed *before* it first starts: the joining nodes' configuration names it
(``.../p2p/<peer id>``), and the peer id is derived from the key. The key is created by the daemon's own
``load_or_create_identity`` (0600, never overwritten), so this script and ``distro-node join`` can never
disagree on the file format; an existing file is only read, which makes the script safe to re-run.

    .venv/bin/python docker/make-seed-key.py seed.key    # new key, or read an existing one
    .venv/bin/python docker/make-seed-key.py seed.key --host seed.example.org --port 4747

Output, one ``name=value`` per line (shell-friendly)::

    peer_id=12D3KooW...
    bootstrap=/dns4/seed/tcp/4747/p2p/12D3KooW...
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
from pathlib import Path

from distro_node.protocol.errors import IdentityError
from distro_node.protocol.identity import load_or_create_identity, peer_id_of

DEFAULT_PORT = 4747  # the daemon's default listen port (network.listen)


def bootstrap_addr(host: str, port: int, peer_id: str) -> str:
    """``/ip4``, ``/ip6`` or ``/dns4`` depending on what ``host`` is."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return f"/dns4/{host}/tcp/{port}/p2p/{peer_id}"
    return f"/ip{ip.version}/{ip}/tcp/{port}/p2p/{peer_id}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("key_file", type=Path, help="key file to create, or to read if it exists")
    parser.add_argument("--host", default="seed", help="DNS name or IP of the seed (default: seed)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="its TCP port (default: %(default)s)")
    args = parser.parse_args(argv)
    if not 1 <= args.port <= 65535:
        parser.error(f"--port must be in [1, 65535], got {args.port}")
    try:
        peer_id = peer_id_of(load_or_create_identity(args.key_file)).to_base58()
    except (IdentityError, OSError) as exc:  # both name the file and what is wrong with it
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"peer_id={peer_id}")
    print(f"bootstrap={bootstrap_addr(args.host, args.port, peer_id)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

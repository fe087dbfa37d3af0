"""Home routers for the namespace testbed: a peer behind a NAT namespace, in the four kinds volunteers meet.

Why: about 9 in 10 home machines cannot be dialed from outside, and the testbed (node/testbed/netns.py) gave
every peer an address every other peer could dial, so nothing about NAT was ever exercised. A NAT'd peer i
gets a router namespace ``<prefix>-r<i>`` between it and the hub: the router's WAN end (``wan0``) takes the
peer's place on the hub bridge with the peer's public address (10.77.0.(i+1)); the peer sits alone on the
router's LAN (``192.168.(i+1).2``, gateway ``.1``). Shaping is unchanged (the peer's own end is its upload,
the hub's end its download).

The router masquerades everything leaving its WAN end and forwards back only what belongs to a connection
the LAN opened (conntrack), so inbound traffic differs by kind:
- ``drop``: an unsolicited packet is dropped silently, at the router itself and towards the LAN (the most
  common home NAT; TCP hole punching works through it, since the peer's own outbound SYN opens the way);
- ``reset``: an unsolicited TCP SYN is answered with a reset (a simultaneous open then fails);
- ``random``: as ``drop``, and every outbound connection gets a random source port (an endpoint-dependent
  mapping: the port a third peer observed is not the one a punch would need);
- ``forward``: as ``drop``, but one TCP port of the WAN address is forwarded to the peer's same port (a
  router where the volunteer set up port forwarding; the peer announces the public address).

Needs ``nft`` (Debian's nftables) besides ``ip`` and ``tc``; :func:`available` says why not.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

from .shell import run

NAT_KINDS = ("drop", "reset", "random", "forward")
LAN_IF = "lan0"
WAN_IF = "wan0"
MAX_NAT_PEERS = 250  # one 192.168.x.0/24 per NAT'd peer


@dataclass(frozen=True)
class Nat:
    """The router in front of one peer; ``forward_port`` only for kind ``forward``."""

    kind: str
    forward_port: int = 0

    def __post_init__(self) -> None:
        if self.kind not in NAT_KINDS:
            raise ValueError(f"NAT kind must be one of {', '.join(NAT_KINDS)}, got {self.kind!r}")
        if (self.kind == "forward") != (1 <= self.forward_port <= 65535):
            raise ValueError(f"forward_port must be in 1..65535 for kind forward and 0 otherwise, "
                             f"got {self.forward_port} for {self.kind}")


def available() -> str | None:
    """None if NAT routers can be built here (given namespaces can), else why not (for skips)."""
    return None if shutil.which("nft") else "missing tool: nft (Debian package nftables)"


def lan_address(i: int) -> str:
    return f"192.168.{i + 1}.2"


def gateway(i: int) -> str:
    return f"192.168.{i + 1}.1"


def ruleset(nat: Nat, lan_host: str) -> str:
    """The router's nftables rules (see the module docstring for what each kind does)."""
    random = " fully-random" if nat.kind == "random" else ""
    unsolicited = ("tcp flags & (syn | ack) == syn reject with tcp reset" if nat.kind == "reset" else "drop")
    port = nat.forward_port
    dnat = (f'        iifname "{WAN_IF}" tcp dport {port} dnat ip to {lan_host}:{port}\n'
            if nat.kind == "forward" else "")
    return f"""flush ruleset
table ip nat {{
    chain prerouting {{
        type nat hook prerouting priority dstnat; policy accept;
{dnat}    }}
    chain postrouting {{
        type nat hook postrouting priority srcnat; policy accept;
        oifname "{WAN_IF}" masquerade{random}
    }}
}}
table ip filter {{
    chain input {{
        type filter hook input priority filter; policy accept;
        iifname "{WAN_IF}" ct state established,related accept
        iifname "{WAN_IF}" {unsolicited}
    }}
    chain forward {{
        type filter hook forward priority filter; policy drop;
        ct state established,related accept
        iifname "{LAN_IF}" oifname "{WAN_IF}" accept
        ct status dnat accept
        iifname "{WAN_IF}" {unsolicited}
    }}
}}
"""


def plumb(i: int, nat: Nat, *, peer: str, router: str, hub: str, public: str, peer_if: str,
          add_ns: Callable[[str], None]) -> None:
    """Put peer i (namespace ``peer``) behind its router namespace: veths peer <-> router LAN and router
    WAN (``public``: address/prefix on the hub's bridge) <-> hub port ``p<i>``."""
    if i >= MAX_NAT_PEERS:
        raise ValueError(f"at most {MAX_NAT_PEERS} peers can sit behind NATs, got peer {i}")
    add_ns(router)
    run(["ip", "-n", peer, "link", "add", peer_if, "type", "veth", "peer", "name", LAN_IF, "netns", router])
    run(["ip", "-n", router, "link", "add", WAN_IF, "type", "veth", "peer", "name", f"p{i}", "netns", hub])
    for where, dev in ((peer, peer_if), (hub, f"p{i}"), (router, LAN_IF), (router, WAN_IF)):
        run(["ip", "-n", where, "link", "set", "dev", dev, "gso_max_segs", "1"])
    run(["ip", "-n", router, "addr", "add", f"{gateway(i)}/24", "dev", LAN_IF])
    run(["ip", "-n", router, "addr", "add", public, "dev", WAN_IF])
    run(["ip", "-n", peer, "addr", "add", f"{lan_address(i)}/24", "dev", peer_if])
    for where, dev in ((router, LAN_IF), (router, WAN_IF), (peer, peer_if)):
        run(["ip", "-n", where, "link", "set", dev, "up"])
    run(["ip", "-n", peer, "route", "add", "default", "via", gateway(i)])
    run(["ip", "netns", "exec", router, "sysctl", "-qw", "net.ipv4.ip_forward=1"])
    with tempfile.NamedTemporaryFile("w", suffix=".nft") as rules:
        rules.write(ruleset(nat, lan_address(i)))
        rules.flush()
        run(["ip", "netns", "exec", router, "nft", "-f", rules.name])

"""Both sides of a dial-back probe as processes, for the namespace testbed (tests/testbed/).

Why processes: each side must sit in its own network namespace (a public peer, a peer behind a NAT router),
and ``ip netns exec`` runs a process, not a coroutine. Run inside namespaces (node/testbed/netns.py):

    python -m distro_node.node.testbed.dialback_roles probers IP COUNT
        COUNT hosts on IP answering dial-back probes; prints {"addrs": [...]}, serves until stdin closes
    python -m distro_node.node.testbed.dialback_roles asker LISTEN [--announce ADDR] [--upnp] PROBER...
        a host on LISTEN connects to the probers, maps its port by UPnP when asked (then asks for that port
        too), runs reachability rounds until every prober answered, prints one JSON line with the verdict
        {"verdict", "confirmed", "advertised", "upnp"} and deletes the mapping on the way out
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import trio
from distro_node.node.peer.output import Output
from distro_node.node.peer.reachability_watch import ReachabilityWatch, listen_ports
from distro_node.node.peer.upnp import PortMapper, UpnpError
from distro_node.protocol.dialback import DialbackServer
from distro_node.protocol.host import HostConfig, P2PHost, open_host
from libp2p.crypto.ed25519 import create_new_key_pair
from trio import TaskStatus  # type: ignore[attr-defined]  # exported, not listed in __all__

from .netns import Network

MAX_ROUNDS = 4
ROUND_TIMEOUT_S = 60.0
ANSWER_TIMEOUT_S = 120.0
ROLES = [sys.executable, "-m", "distro_node.node.testbed.dialback_roles"]


def start_probers(net: Network, i: int, procs: list[subprocess.Popen[str]]) -> list[str]:
    """Two prober identities in peer i's namespace (appended to ``procs``, for the caller to stop); their
    ``/p2p/`` addresses. They serve until their stdin closes."""
    p = subprocess.Popen([*net.exec_prefix(i), *ROLES, "probers", net.address(i), "2"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    procs.append(p)
    line = p.stdout.readline() if p.stdout is not None else ""  # EOF if it cannot start
    if not line:
        raise RuntimeError(f"probers exited with {p.wait(timeout=10)}")
    return list(json.loads(line)["addrs"])


def start_asker(net: Network, i: int, port: int, probers: list[str], procs: list[subprocess.Popen[str]],
                *extra: str) -> subprocess.Popen[str]:
    """An asker in peer i's namespace listening on all interfaces at ``port`` (appended to ``procs``)."""
    argv = [*net.exec_prefix(i), *ROLES, "asker", f"/ip4/0.0.0.0/tcp/{port}", *extra, *probers]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    procs.append(p)
    return p


def answer(p: subprocess.Popen[str]) -> dict[str, object]:
    """An asker's JSON result (bounded wait); RuntimeError if it failed."""
    out, _ = p.communicate(timeout=ANSWER_TIMEOUT_S)
    if p.returncode != 0 or not out.strip():
        raise RuntimeError(f"asker exited with {p.returncode}")
    return dict(json.loads(out.strip().splitlines()[-1]))


async def serve_probes(ip: str, count: int) -> None:
    config = HostConfig(listen_addrs=(f"/ip4/{ip}/tcp/0",), px_interval=0.0)
    async with trio.open_nursery() as nursery:
        hosts: list[P2PHost] = []
        for _ in range(count):
            host = await nursery.start(_serve_one, config)
            DialbackServer(host).install()
            hosts.append(host)
        print(json.dumps({"addrs": [str(h.addrs()[0]) for h in hosts]}), flush=True)
        await trio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)  # type: ignore[call-arg]
        nursery.cancel_scope.cancel()


async def _serve_one(config: HostConfig, *,
                     task_status: TaskStatus[P2PHost] = trio.TASK_STATUS_IGNORED) -> None:
    async with open_host(create_new_key_pair(), config) as host:
        task_status.started(host)
        await trio.sleep_forever()


async def ask(listen: str, announce: list[str], upnp: bool, probers: list[str]) -> dict[str, object]:
    config = HostConfig(listen_addrs=(listen,), announce_addrs=tuple(announce), px_interval=0.0)
    result: dict[str, object] = {"upnp": None}
    async with open_host(create_new_key_pair(), config) as host:
        for addr in probers:
            await host.dial(addr)
        watch = ReachabilityWatch(host, Output("json", sys.stderr))
        mapper = PortMapper(listen_ports(host)[0], lease_seconds=120) if upnp else None
        try:
            if mapper is not None:
                try:
                    mapping = await mapper.open()
                    watch.add_candidate(mapping.external_port)
                    result["upnp"] = mapping.describe()
                except UpnpError as exc:
                    result["upnp"] = f"failed: {exc}"
            with trio.fail_after(ROUND_TIMEOUT_S):
                for _ in range(MAX_ROUNDS):
                    verdict = await watch.round()
                    if verdict != "unknown":
                        break
        finally:
            if mapper is not None:
                with trio.CancelScope(shield=True):
                    try:
                        await mapper.close()
                    except UpnpError as exc:
                        print(f"deleting the mapping failed: {exc}", file=sys.stderr)
        result.update(verdict=watch.verdict, confirmed=watch.advertised,
                      advertised=[str(a) for a in host.advertised_addrs()])
    return result


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="dialback_roles", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="role", required=True)
    p = sub.add_parser("probers")
    p.add_argument("ip")
    p.add_argument("count", type=int)
    a = sub.add_parser("asker")
    a.add_argument("listen")
    a.add_argument("--announce", action="append", default=[])
    a.add_argument("--upnp", action="store_true")
    a.add_argument("probers", nargs="+")
    args = ap.parse_args(argv)
    if args.role == "probers":
        trio.run(serve_probes, args.ip, args.count)
    else:
        print(json.dumps(trio.run(ask, args.listen, args.announce, args.upnp, args.probers)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

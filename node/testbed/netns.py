"""An emulated home internet on one machine: one network namespace per peer, links shaped with tc tbf.

Why: loopback hides what volunteers face (a 10 Mbit uplink, a link that drops, a swarm that splits). Here
every peer lives in its own namespace with its own address; its veth pair ends in a hub namespace, where a
bridge joins all peers. Each link is shaped twice with a token bucket: the peer-side end's egress is the
peer's *upload*, the hub-side end's egress is its *download*. Nothing is created in the root namespace (both
veth ends are created directly inside the namespaces), so traffic can only flow between the namespaces this
object made, and the interface names cannot collide with the host's or another testbed's. Namespace names
carry a per-instance prefix (``dn<pid>x<n>``) so parallel runs never collide; :meth:`Network.close` deletes
them all (deleting a namespace deletes its veth ends), and :func:`sweep_stale` removes those of dead pids.

Link rates, the named profiles and the token buckets that shape them: links.py.

Both veth ends send one frame per packet (``gso_max_segs 1``). With the default GSO, TCP handed the peer's
own tbf 64 KiB segment trains, a few of which overflow the 78 KiB queue at once: with 4 peers each serving
3 copies of a 365 KB payload at 10 Mbit, the tbf dropped 19-50% of the segments and 10-85% of all segments
sent were retransmits, which a modem whose sender is a network hop away does not see. With one frame per
packet 16-23 of ~15,000 segments per peer were retransmitted, and serving the three copies took the link's
time instead of 1.0-1.8 s (bench/internet.py).

Needs root and the ``ip`` and ``tc`` tools (:func:`available` says why not).
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from itertools import count

from . import nat
from .links import MAX_PEERS, Link, tbf_args
from .nat import Nat
from .shell import NetnsError
from .shell import run as _run

SUBNET = "10.77.0"  # private; every testbed reuses it, since each one's bridge lives in its own namespace
# A /24 outside every private and reserved range, for a hub whose addresses must look public: Debian's
# miniupnpd refuses to map ports when its WAN address is private (tests/testbed/test_testbed_upnp.py). Safe
# in the testbed, since the hub's bridge lives in its own namespace and nothing routes there from outside.
PUBLIC_LOOKING_SUBNET = "11.77.0"
PREFIX_LEN = 24
BRIDGE = "br0"
SPLIT_BRIDGE = "br1"
PEER_IF = "eth0"
_instances = count()


def available() -> str | None:
    """None if namespaces can be built here, else why not (for skips)."""
    if os.geteuid() != 0:
        return "needs root for network namespaces"
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return f"missing tools: {', '.join(missing)}"
    return None


def _sysctl_words(name: str) -> set[str]:
    try:
        with open(f"/proc/sys/net/ipv4/{name}") as f:
            return set(f.read().split())
    except OSError:
        return set()


def congestion_controls() -> set[str]:
    """The TCP congestion controls a testbed namespace may send with (empty when the kernel does not say):
    those the kernel offers and also allows outside the host's own namespace. Setting one that is offered
    but not allowed fails in a namespace with "Operation not permitted"."""
    return _sysctl_words("tcp_available_congestion_control") & _sysctl_words("tcp_allowed_congestion_control")


def check_congestion_control(name: str | None) -> None:
    """ValueError naming ``tcp_congestion`` unless ``name`` is None (the host's) or one a namespace may use
    (:func:`congestion_controls`); the message says how to allow one the kernel offers."""
    if name is None:
        return
    offered = _sysctl_words("tcp_available_congestion_control")
    if name not in offered:
        raise ValueError(f"tcp_congestion: {name!r} is not one of this kernel's {sorted(offered)}")
    allowed = _sysctl_words("tcp_allowed_congestion_control")
    if name not in allowed:
        raise ValueError(f"tcp_congestion: {name!r} is offered but a namespace may only use "
                         f"{sorted(allowed)}; as root: sysctl -w net.ipv4.tcp_allowed_congestion_control="
                         f"'{' '.join(sorted(allowed | {name}))}'")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _readline(proc: subprocess.Popen[str], timeout: float) -> str:
    """One stdout line of ``proc`` within ``timeout`` seconds (a reader thread: readline cannot time out)."""
    lines: queue.Queue[str] = queue.Queue()
    argv = [str(a) for a in proc.args] if isinstance(proc.args, list) else [str(proc.args)]
    stream = proc.stdout
    if stream is None:
        raise NetnsError(argv, "stdout not captured")
    threading.Thread(target=lambda: lines.put(stream.readline()), daemon=True).start()
    try:
        line = lines.get(timeout=timeout)
    except queue.Empty:
        raise NetnsError(argv, f"no output within {timeout:.0f}s") from None
    if not line:
        raise NetnsError(argv, f"exited (rc={proc.poll()}) without output")
    return line


def exit_cleanly_on_signals() -> None:
    """Make SIGTERM and SIGINT unwind the main thread (SystemExit / KeyboardInterrupt), so the ``with``
    blocks and atexit hooks kill the peers and delete the namespaces. Without this SIGTERM ends Python at
    once, and a bench started in the background of a non-interactive shell ignores SIGINT altogether."""
    def _exit(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _exit)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def ready_for_bench(name: str) -> bool:
    """A bench about to build namespaces: False (and why, printed) when this machine cannot; otherwise
    SIGTERM/SIGINT now tear its namespaces down (``exit_cleanly_on_signals``)."""
    why = available()
    if why is not None:
        print(f"{name} needs network namespaces: {why}")
        return False
    exit_cleanly_on_signals()
    return True


def _tbf_counters(ns: str, dev: str) -> dict[str, int]:
    """``bytes``, ``packets`` and ``drops`` of the root qdisc of ``dev`` in namespace ``ns``."""
    out = _run(["tc", "-n", ns, "-s", "-j", "qdisc", "show", "dev", dev])
    try:
        root = next(q for q in json.loads(out) if q.get("root"))
        return {name: int(root[name]) for name in ("bytes", "packets", "drops")}
    except (json.JSONDecodeError, StopIteration, KeyError, TypeError, ValueError) as exc:
        raise NetnsError(["tc", "-s", "-j", "qdisc", "show"], f"unreadable statistics: {exc}") from exc


def sweep_stale() -> list[str]:
    """Delete testbed namespaces (``dn<pid>x...``) whose creating process is gone (a run killed hard)."""
    removed = []
    for line in _run(["ip", "netns", "list"]).splitlines():
        name = line.split()[0] if line.strip() else ""
        head = name.split("x", 1)[0]
        if not (name.startswith("dn") and head[2:].isdigit() and "x" in name):
            continue
        if not _pid_alive(int(head[2:])):
            _run(["ip", "netns", "del", name], check=False)
            removed.append(name)
    return removed


class Network:
    """Namespaces ``<prefix>-hub`` and ``<prefix>-p<i>``, peer i at 10.77.0.(i+1) (or ``subnet``), shaped per
    ``links``.

    Use as a context manager (or call :meth:`close`); an atexit hook also closes it, so even an
    interpreter leaving by an uncaught exception deletes what it made.
    """

    def __init__(self, links: Sequence[Link], nats: Mapping[int, Nat] | None = None, *,
                 subnet: str = SUBNET, tcp_congestion: str | None = None, time_scale: float = 1.0) -> None:
        """``tcp_congestion``: the TCP congestion control every peer's namespace sends with (``cubic``, the
        default of most volunteers' systems); None keeps what new namespaces inherit from the host.
        ``time_scale``: for links at 1/``time_scale`` of a profile's rates, each queue and burst holds the
        bytes it would at the profile's own rates (:func:`tbf_args`)."""
        why = available() or (nat.available() if nats else None)
        if why is not None:
            raise NetnsError(["ip", "netns"], why)
        check_congestion_control(tcp_congestion)
        self.tcp_congestion = tcp_congestion
        tbf_args(1.0, time_scale)  # refuses a bad scale before anything exists
        self.time_scale = time_scale
        if not 1 <= len(links) <= MAX_PEERS:
            raise ValueError(f"links: need 1..{MAX_PEERS} peers, got {len(links)}")
        self.nats = dict(nats or {})
        if not set(self.nats) <= set(range(len(links))):
            raise ValueError(f"nats: peers {sorted(set(self.nats) - set(range(len(links))))} do not exist")
        self.links = list(links)
        self.subnet = subnet
        self.prefix = f"dn{os.getpid()}x{next(_instances)}"
        self.hub = f"{self.prefix}-hub"
        self.namespaces: list[str] = []
        self._cut: set[int] = set()
        self._split: set[int] = set()
        atexit.register(self.close)
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def ns(self, i: int) -> str:
        return f"{self.prefix}-p{i}"

    def router_ns(self, i: int) -> str:
        return f"{self.prefix}-r{i}"

    def address(self, i: int) -> str:
        """Where the others reach peer i: its own address, or its router's WAN address behind a NAT."""
        return f"{self.subnet}.{i + 1}"

    def listen_address(self, i: int) -> str:
        """The address peer i itself has (behind a NAT: its LAN address, node/testbed/nat.py)."""
        return nat.lan_address(i) if i in self.nats else self.address(i)

    def exec_prefix(self, i: int) -> list[str]:
        """argv prefix running a command in peer i's namespace (``ip netns exec`` execs it: same pid)."""
        return ["ip", "netns", "exec", self.ns(i)]

    def _add_ns(self, name: str) -> None:
        _run(["ip", "netns", "add", name])
        self.namespaces.append(name)
        _run(["ip", "-n", name, "link", "set", "lo", "up"])

    def _build(self) -> None:
        self._add_ns(self.hub)
        for bridge in (BRIDGE, SPLIT_BRIDGE):
            _run(["ip", "-n", self.hub, "link", "add", bridge, "type", "bridge"])
            _run(["ip", "-n", self.hub, "link", "set", bridge, "up"])
        for i, link in enumerate(self.links):
            ns, port = self.ns(i), f"p{i}"
            self._add_ns(ns)
            if self.tcp_congestion is not None:
                _run(["ip", "netns", "exec", ns, "sysctl", "-qw",
                      f"net.ipv4.tcp_congestion_control={self.tcp_congestion}"])
            if i in self.nats:
                nat.plumb(i, self.nats[i], peer=ns, router=self.router_ns(i), hub=self.hub,
                          public=f"{self.address(i)}/{PREFIX_LEN}", peer_if=PEER_IF, add_ns=self._add_ns)
            else:
                _run(["ip", "-n", ns, "link", "add", PEER_IF, "type", "veth",
                      "peer", "name", port, "netns", self.hub])
                for where, dev in ((ns, PEER_IF), (self.hub, port)):  # frames, not GSO trains (see above)
                    _run(["ip", "-n", where, "link", "set", "dev", dev, "gso_max_segs", "1"])
                _run(["ip", "-n", ns, "addr", "add", f"{self.address(i)}/{PREFIX_LEN}", "dev", PEER_IF])
                _run(["ip", "-n", ns, "link", "set", PEER_IF, "up"])
            _run(["ip", "-n", self.hub, "link", "set", port, "master", BRIDGE])
            _run(["ip", "-n", self.hub, "link", "set", port, "up"])
            self.shape(i, link)

    def shape(self, i: int, link: Link) -> None:
        """(Re)shape peer i's link: upload on its own veth end, download on the hub's end."""
        _run(["tc", "-n", self.ns(i), "qdisc", "replace", "dev", PEER_IF, "root",
              *tbf_args(link.up_mbit, self.time_scale)])
        _run(["tc", "-n", self.hub, "qdisc", "replace", "dev", f"p{i}", "root",
              *tbf_args(link.down_mbit, self.time_scale)])
        self.links[i] = link

    def qdiscs(self, i: int) -> dict[str, str]:
        """What tc reports for peer i's two shaped ends (for the record of a measurement)."""
        return {"upload": _run(["tc", "-n", self.ns(i), "qdisc", "show", "dev", PEER_IF]).strip(),
                "download": _run(["tc", "-n", self.hub, "qdisc", "show", "dev", f"p{i}"]).strip()}

    def uplink_counters(self, i: int) -> dict[str, int]:
        """What peer i's upload token bucket has done so far: ``bytes`` and ``packets`` sent, every frame
        counted (payload, TCP/IP headers, acknowledgements of what it downloads, gossip), and ``drops``
        (a full queue: each one a TCP retransmission). Against the payload bytes a peer served, they say
        what its line carries besides them."""
        return _tbf_counters(self.ns(i), PEER_IF)

    def downlink_counters(self, i: int) -> dict[str, int]:
        """The same for peer i's download bucket (the hub's end). Its drops matter to the uplink too: each
        hole in what a peer receives has it acknowledge every segment until the hole is filled."""
        return _tbf_counters(self.hub, f"p{i}")

    def measure(self, srcs: Sequence[int], dst: int, seconds: float = 4.0,
                connect_timeout: float = 10.0, paced: float | None = None) -> dict[str, float]:
        """Bulk TCP from each peer in ``srcs`` to ``dst`` at once (node/testbed/probe.py); the receiver's
        total rate. One source measures min(its upload, dst's download); several measure dst's download.
        ``paced``: the receivers read as the daemon does, pacing for at most that many seconds (None: as
        fast as the bytes come). NetnsError if a sender cannot connect within ``connect_timeout`` (a cut or
        partitioned link)."""
        probe = [sys.executable, "-m", "distro_node.node.testbed.probe"]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        procs: list[subprocess.Popen[str] | subprocess.Popen[bytes]] = []
        try:
            receivers: list[subprocess.Popen[str]] = []
            recv = ["recv", self.address(dst)] if paced is None else [
                "recv-paced", self.address(dst), str(paced)]
            for _ in srcs:
                receivers.append(subprocess.Popen([*self.exec_prefix(dst), *probe, *recv],
                                                  stdout=subprocess.PIPE, text=True, env=env))
                procs.append(receivers[-1])
            ports = [json.loads(_readline(r, 30.0))["port"] for r in receivers]
            senders: list[tuple[list[str], subprocess.Popen[bytes]]] = []
            for src, port in zip(srcs, ports, strict=True):
                argv = [*self.exec_prefix(src), *probe, "send", self.address(dst), str(port), str(seconds),
                        str(connect_timeout)]
                senders.append((argv, subprocess.Popen(argv, env=env, stderr=subprocess.DEVNULL)))
                procs.append(senders[-1][1])
            for argv, sender in senders:
                if sender.wait(timeout=seconds + connect_timeout + 60.0) != 0:
                    raise NetnsError(argv, f"sender failed (rc={sender.returncode})")
            results = [json.loads(_readline(r, 60.0)) for r in receivers]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait(timeout=10)
        total = sum(r["bytes"] for r in results)
        span = max(r["seconds"] for r in results)
        return {"bytes": total, "seconds": span, "mbit": round(total * 8 / span / 1e6, 2)}

    # Fault actions. A cut or a partition drops packets silently (no RST, no ICMP), as a dead home router
    # or a broken transit link would: TCP connections stall and either resume on heal or time out.

    def cut(self, i: int) -> None:
        """Take peer i's link down at the hub (the peer keeps its address; nothing reaches it)."""
        _run(["ip", "-n", self.hub, "link", "set", f"p{i}", "down"])
        self._cut.add(i)

    def restore(self, i: int) -> None:
        _run(["ip", "-n", self.hub, "link", "set", f"p{i}", "up"])
        self._cut.discard(i)

    def partition(self, side: Sequence[int]) -> None:
        """Split the swarm: the peers in ``side`` move to a second bridge, unreachable from the first."""
        for i in side:
            _run(["ip", "-n", self.hub, "link", "set", f"p{i}", "master", SPLIT_BRIDGE])
            self._split.add(i)

    def heal(self) -> None:
        """Undo :meth:`partition` and every :meth:`cut`."""
        for i in sorted(self._split):
            _run(["ip", "-n", self.hub, "link", "set", f"p{i}", "master", BRIDGE])
        self._split.clear()
        for i in sorted(self._cut):
            self.restore(i)

    def close(self) -> None:
        """Delete every namespace made here (their veth ends go with them); safe to call twice."""
        while self.namespaces:
            _run(["ip", "netns", "del", self.namespaces.pop()], check=False)
        atexit.unregister(self.close)

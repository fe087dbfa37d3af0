"""The node's settings: one frozen, validated dataclass per component and a root :class:`NodeConfig`.

Validation runs at construction, however a config is made (file, environment, flags or code), so a bad value
stops the node at start-up with the field's dotted name rather than failing hours into a run. Each field
carries a ``doc`` used for the commented file ``distro-node init`` writes, so the documentation an operator
reads is the one the code validates against.

The shared base (:class:`Section`, :func:`doc`) is in section.py and the run's sections in run.py; this
module holds the node's own sections and the root, and re-exports the rest so callers import one module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from distro_node.node.config.prepare import PrepareConfig
from distro_node.node.config.run import DATA_KINDS, TOKEN_DTYPES, DataConfig, RoundsConfig, RunConfig
from distro_node.node.config.section import Section, doc
from distro_node.node.device import DEVICES, PRECISIONS
from distro_node.protocol.relay_config import RelayServiceConfig

LOG_LEVELS: tuple[str, ...] = ("debug", "info", "warning", "error", "critical")
# How a node downloads payloads (node/peer/payload_exchange.py); the first is the default.
PAYLOAD_FETCHES: tuple[str, ...] = ("pieces", "whole")
# A relay's circuits shorter than these would be renewed every second or within one Noise handshake's bytes.
MIN_RELAY_CIRCUIT_SECONDS = 2
MIN_RELAY_CIRCUIT_BYTES = 64 * 1024


def _check_multiaddrs(section: Section, name: str, *, need_peer_id: bool) -> None:
    # Imported here: libp2p is slow to import and only needed when addresses are actually set.
    from distro_node.protocol.addrs import parse_multiaddr, split_peer_addr
    from distro_node.protocol.errors import BadMultiaddrError

    for i, text in enumerate(getattr(section, name)):
        try:
            split_peer_addr(text) if need_peer_id else parse_multiaddr(text)
        except BadMultiaddrError as exc:
            raise section._fail(name, f"entry {i}: {exc}") from None


@dataclass(frozen=True)
class NetworkConfig(Section):
    """How the node reaches the swarm."""

    SECTION: ClassVar[str] = "network"

    listen: tuple[str, ...] = field(
        default=("/ip4/0.0.0.0/tcp/4747",),
        metadata=doc("multiaddrs to listen on (tcp/0: any port)"),
    )
    bootstrap: tuple[str, ...] = field(
        default=(),
        metadata=doc("peers to join through, each ending in /p2p/<peer id>; empty: found a run"),
    )
    announce_addrs: tuple[str, ...] = field(
        default=(),
        metadata=doc("public multiaddrs to advertise (behind NAT); empty: the listen ones"),
    )
    upnp: bool = field(
        default=True,
        metadata=doc("ask the home router (UPnP IGD) to forward the TCP listen port; the external address is "
                     "advertised only once peers confirm they can dial it. Not tried on loopback; nothing "
                     "mapped: said once, and the node goes on"),
    )
    key_file: Path | None = field(
        default=None,
        metadata=doc(
            "ed25519 identity key; unset: <data_dir>/identity.key",
            example="/var/lib/distro-node/identity.key",
        ),
    )
    ticket: Path | None = field(
        default=None,
        metadata=doc("admission ticket for a permissioned run, a file written by the founder's `distro-node "
                     "ticket issue` for this peer's id (`distro-node ticket id`); unset: none (open runs)",
                     example="/var/lib/distro-node/ticket.hex"),
    )
    max_peers: int = field(default=64, metadata=doc("most peers kept connected at once (a connection cap)"))
    max_peers_per_address: int = field(
        default=4,
        metadata=doc("most peer ids connected from one IP address, so one machine cannot bring a crowd of "
                     "identities (loopback is exempt; a few, since volunteers may share a home NAT; 0: no "
                     "limit)"),
    )
    peer_exchange_seconds: float = field(
        default=1.0,
        metadata=doc("how often to ask a connected peer for the peers it knows; short, so a swarm healed "
                     "after a partition finds itself again within seconds"),
    )
    reannounce_seconds: float = field(
        default=2.0,
        metadata=doc("republish our announcement this often while a round is stalled (a partition may have "
                     "eaten it)"),
    )
    fetch_retry_seconds: float = field(
        default=1.0,
        metadata=doc("retry a payload fetch that failed after this long"),
    )
    apply_timeout_seconds: float = field(
        default=30.0,
        metadata=doc("a decided step whose payloads cannot be fetched within this long asks for a state "
                     "sync"),
    )
    resync_cooldown_seconds: float = field(
        default=10.0,
        metadata=doc("wait at least this long between two state syncs"),
    )
    behind_steps: int = field(
        default=4,
        metadata=doc("resync when most of the roster reports a step at least this far ahead of ours"),
    )
    attest_every_steps: int = field(
        default=100,
        metadata=doc("runs whose manifest names a root (a permissioned run's founder, an open run's "
                     "genesis): sign the round state at every this many steps (and whenever the active peers "
                     "change), so joiners can check the roster from the root on"),
    )
    relay_circuit_seconds: int = field(
        default=RelayServiceConfig.circuit_seconds,
        metadata=doc("as a relay (once peers confirm this node public): a circuit between two other peers is "
                     "cut after this many seconds; the peer that dialed it opens a fresh one shortly before, "
                     "so no round is lost"),
    )
    relay_circuit_bytes: int = field(
        default=RelayServiceConfig.circuit_bytes,
        metadata=doc("as a relay: a circuit is cut after carrying this many bytes, both directions together "
                     "(renewed before that like the time cap)"),
    )
    payload_fetch: str = field(
        default=PAYLOAD_FETCHES[0],
        metadata=doc(f"how this node downloads peers' payloads: {' | '.join(PAYLOAD_FETCHES)}. pieces: in "
                     "verified 128 KiB pieces from every holder at once, each piece served on as soon as it "
                     "is in, so a slow origin uploads each piece about once; whole: the whole payload from "
                     "one holder at a time, origin first (it uploads a copy per peer). Both are served "
                     "either way"),
    )
    max_link_steps: int = field(
        default=10_000,
        metadata=doc("runs whose manifest names a root: a roster vouches for states at most this many steps "
                     "after its own (several times attest_every_steps)"),
    )

    def check(self) -> None:
        if not self.listen:
            raise self._fail("listen", "must name at least one address")
        _check_multiaddrs(self, "listen", need_peer_id=False)
        _check_multiaddrs(self, "bootstrap", need_peer_id=True)
        _check_multiaddrs(self, "announce_addrs", need_peer_id=False)
        for name in ("peer_exchange_seconds", "reannounce_seconds", "fetch_retry_seconds",
                     "apply_timeout_seconds", "resync_cooldown_seconds"):
            self._positive(name)
            self._range(name, 0.0, 86400.0)
        self._range("max_peers", 1, 4096)
        self._range("max_peers_per_address", 0, 4096)
        self._range("behind_steps", 1, 1_000_000)
        self._range("attest_every_steps", 1, 1_000_000)
        self._range("max_link_steps", 1, 1_000_000_000)
        if self.payload_fetch not in PAYLOAD_FETCHES:
            raise self._fail("payload_fetch", f"must be one of {', '.join(PAYLOAD_FETCHES)}, got "
                                              f"{self.payload_fetch!r}")
        self._range("relay_circuit_seconds", MIN_RELAY_CIRCUIT_SECONDS, 7 * 86400)
        self._range("relay_circuit_bytes", MIN_RELAY_CIRCUIT_BYTES, 1 << 40)
        if self.max_link_steps < 2 * self.attest_every_steps:
            raise self._fail("max_link_steps", "must be at least twice attest_every_steps, or an honest "
                                               "chain could have no link within reach")


@dataclass(frozen=True)
class CheckpointConfig(Section):
    """Periodic checkpoints for resuming (threats.md C1, C4)."""

    SECTION: ClassVar[str] = "checkpoint"

    enabled: bool = field(default=True, metadata=doc("write checkpoints"))
    dir: Path | None = field(
        default=None,
        metadata=doc("unset: <data_dir>/checkpoints", example="/var/lib/distro-node/checkpoints"),
    )
    every_steps: int = field(default=100, metadata=doc("save after every this many steps"))
    keep_last: int = field(
        default=3,
        metadata=doc("checkpoints kept; older ones are deleted after a successful save"),
    )

    def check(self) -> None:
        self._range("every_steps", 1, 2**31 - 1)
        self._range("keep_last", 1, 10_000)


@dataclass(frozen=True)
class MetricsConfig(Section):
    """The Prometheus endpoint."""

    SECTION: ClassVar[str] = "metrics"

    enabled: bool = field(default=True, metadata=doc("serve /metrics"))
    host: str = field(default="127.0.0.1", metadata=doc("address to bind; 0.0.0.0 exposes it to the network"))
    port: int = field(default=9400, metadata=doc("TCP port; 0 picks a free one (reported at start-up)"))

    def check(self) -> None:
        if not self.host.strip():
            raise self._fail("host", "must not be empty")
        self._range("port", 0, 65535)


@dataclass(frozen=True)
class NodeConfig(Section):
    """Root of the config: process-wide settings plus one table per component."""

    SECTION: ClassVar[str] = ""

    data_dir: Path = field(
        default=Path("~/.distro-node"),
        metadata=doc("state of this node: identity, checkpoints, logs"),
    )
    device: str = field(
        default="auto",
        metadata=doc(f"compute device of this process: {' | '.join(DEVICES)} (auto: cuda, else mps, else "
                     "cpu); local, peers with different devices train the same run"),
    )
    precision: str = field(
        default="auto",
        metadata=doc(f"forward-pass precision: {' | '.join(PRECISIONS)} (auto: bf16 autocast on cuda, else "
                     "fp32); local like device"),
    )
    log_level: str = field(default="info", metadata=doc(f"log verbosity: {' | '.join(LOG_LEVELS)}"))
    run: RunConfig = field(default_factory=RunConfig, metadata=doc("the training run"))
    network: NetworkConfig = field(default_factory=NetworkConfig, metadata=doc("peer-to-peer networking"))
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig, metadata=doc("checkpoints"))
    metrics: MetricsConfig = field(default_factory=MetricsConfig, metadata=doc("Prometheus metrics"))
    prepare: PrepareConfig = field(
        default_factory=PrepareConfig, metadata=doc("`distro-node data prepare`: tokenizer and shards")
    )

    def check(self) -> None:
        self._choice("device", DEVICES)
        self._choice("precision", PRECISIONS)
        self._choice("log_level", LOG_LEVELS)

    @property
    def checkpoint_dir(self) -> Path:
        """Where checkpoints go, with ``~`` expanded."""
        return (self.checkpoint.dir or self.data_dir / "checkpoints").expanduser()

    @property
    def key_file(self) -> Path:
        """The identity key path, with ``~`` expanded."""
        return (self.network.key_file or self.data_dir / "identity.key").expanduser()


__all__ = [
    "DATA_KINDS",
    "DEVICES",
    "LOG_LEVELS",
    "PRECISIONS",
    "TOKEN_DTYPES",
    "CheckpointConfig",
    "DataConfig",
    "MetricsConfig",
    "NetworkConfig",
    "NodeConfig",
    "PrepareConfig",
    "RoundsConfig",
    "RunConfig",
    "Section",
    "doc",
]

"""The node's settings: one frozen, validated dataclass per component and a root :class:`NodeConfig`.

Validation runs at construction, however a config is made (file, environment, flags or code), so a bad value
stops the node at start-up with the field's dotted name rather than failing hours into a run. Each field
carries a ``doc`` used for the commented file ``distro-node init`` writes, so the documentation an operator
reads is the one the code validates against.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import ClassVar, get_type_hints

from distro_node.node.config.errors import ConfigFieldError
from distro_node.node.config.fields import normalize
from distro_node.node.device import DEVICES, PRECISIONS
from distro_node.node.presets import UnknownPresetError, preset
from distro_node.optimizer.config import StrategyConfig
from distro_node.optimizer.errors import ConfigError
from distro_node.optimizer.registry import STRATEGIES, make_config

LOG_LEVELS: tuple[str, ...] = ("debug", "info", "warning", "error", "critical")
DATA_KINDS: tuple[str, ...] = ("embedded", "text", "tokens")
TOKEN_DTYPES: tuple[str, ...] = ("auto", "uint16", "uint32")


def doc(text: str, example: str = "") -> dict[str, str]:
    """Field metadata: the documentation (and, for unset optional fields, an example value) that the rendered
    config file shows above the field."""
    return {"doc": text, "example": example}


@dataclass(frozen=True)
class Section:
    """Common validation: every field is type-checked against its annotation, then :meth:`check` runs the
    section's own range and cross-field rules. ``SECTION`` is the dotted prefix errors are reported under."""

    SECTION: ClassVar[str] = ""

    def __post_init__(self) -> None:
        hints = get_type_hints(type(self))
        for f in fields(self):
            value = normalize(self.dotted(f.name), getattr(self, f.name), hints[f.name])
            object.__setattr__(self, f.name, value)
        self.check()

    @classmethod
    def dotted(cls, name: str) -> str:
        return f"{cls.SECTION}.{name}" if cls.SECTION else name

    def check(self) -> None:
        """Range and cross-field rules of the section; the default has none."""

    def _fail(self, name: str, detail: str) -> ConfigFieldError:
        return ConfigFieldError(self.dotted(name), detail)

    def _choice(self, name: str, choices: tuple[str, ...]) -> None:
        value = getattr(self, name)
        if value not in choices:
            raise self._fail(name, f"must be one of {', '.join(choices)}, got {value!r}")

    def _range(self, name: str, low: float, high: float) -> None:
        value = getattr(self, name)
        if not low <= value <= high:
            raise self._fail(name, f"must be in [{low}, {high}], got {value}")

    def _positive(self, name: str) -> None:
        value = getattr(self, name)
        if not value > 0:
            raise self._fail(name, f"must be > 0, got {value}")


@dataclass(frozen=True)
class DataConfig(Section):
    """Where training tokens come from; every peer of a run must use the same data to share a loss floor."""

    SECTION: ClassVar[str] = "run.data"

    kind: str = field(
        default="embedded",
        metadata=doc("embedded (offline Markov corpus, known loss floor) | text | tokens"),
    )
    path: Path | None = field(
        default=None,
        metadata=doc(
            "text: any UTF-8/bytes file (byte vocabulary); tokens: flat little-endian token ids; local: "
            "join checks the file's sha256 and size against the run manifest",
            example="/data/corpus.u16",
        ),
    )
    token_dtype: str = field(
        default="auto",
        metadata=doc("tokens only: auto (from the .u16/.u32 suffix) | uint16 | uint32"),
    )
    eval_fraction: float = field(
        default=0.01,
        metadata=doc("tail fraction of a file held out for evaluation, in (0, 1)"),
    )
    seed: int = field(default=0, metadata=doc("seed of the embedded corpus (the same on every peer)"))

    def check(self) -> None:
        self._choice("kind", DATA_KINDS)
        self._choice("token_dtype", TOKEN_DTYPES)
        if not 0 < self.eval_fraction < 1:
            raise self._fail("eval_fraction", f"must be in (0, 1), got {self.eval_fraction}")
        self._range("seed", 0, 2**63 - 1)
        # A path with kind "embedded" is allowed here: a joiner sets only its local copy's path and takes the
        # kind from the run manifest; a founder doing so is refused in node/peer/settings.py.
        if self.kind != "embedded" and self.path is None:
            raise self._fail("path", f"is required for kind {self.kind!r}")


def _strategy_field(exc: ConfigError, strategy: str) -> str:
    """Map the optimizer's field names (``distro.topk``, ``schedule.lr``) onto this file's layout."""
    name = exc.field
    base = RunConfig.dotted("strategy_settings")
    if name == "strategy":
        return RunConfig.dotted("strategy")
    if name == strategy:
        return base
    if name.startswith(strategy + "."):
        return f"{base}.{name[len(strategy) + 1:]}"
    return f"{base}.{name}"


@dataclass(frozen=True)
class RoundsConfig(Section):
    """Round timings and roster rules. Replicated state, not a local preference: every replica must drop and
    activate peers at the same step, so a founder writes these into the run manifest and joiners follow it."""

    SECTION: ClassVar[str] = "run.rounds"

    round_timeout_seconds: float = field(
        default=10.0,
        metadata=doc("a round collects announcements and payloads this long, then closes without the "
                     "missing peers"),
    )
    leader_timeout_seconds: float = field(
        default=2.0,
        metadata=doc("the next leader takes over a round whose leader is silent after this long"),
    )
    liveness_timeout_seconds: float = field(
        default=5.0,
        metadata=doc("a peer without a heartbeat for this long is no longer waited for; a peer whose "
                     "connections all closed (a crash) is not waited for at all"),
    )
    warmup_rounds: int = field(default=3, metadata=doc("rounds a newcomer trains without being included"))
    max_missed_rounds: int = field(
        default=3,
        metadata=doc("consecutive lists a roster peer may miss before every replica drops it"),
    )

    def check(self) -> None:
        for name in ("round_timeout_seconds", "leader_timeout_seconds", "liveness_timeout_seconds"):
            self._positive(name)
            self._range(name, 0.0, 86400.0)
        if self.leader_timeout_seconds >= 4 * self.round_timeout_seconds:
            raise self._fail("leader_timeout_seconds", "must be < 4 x round_timeout_seconds")
        for name in ("warmup_rounds", "max_missed_rounds"):
            self._range(name, 1, 1000)


@dataclass(frozen=True)
class RunConfig(Section):
    """What defines a training run; peers must agree on all of it (see :meth:`digest`)."""

    SECTION: ClassVar[str] = "run"

    model: str = field(default="tiny", metadata=doc("model preset: tiny | small | 20m | 150m | 1.2b"))
    strategy: str = field(default="distro", metadata=doc(f"optimizer strategy: {' | '.join(STRATEGIES)}"))
    # Always a typed strategy config after construction; None (or a plain mapping) means "build it from the
    # strategy's defaults (or that mapping)", so changing ``strategy`` alone never leaves stale settings.
    strategy_settings: StrategyConfig | None = field(
        default=None,
        metadata=doc("settings of the chosen strategy (optimizer/config.py); unknown keys are errors"),
    )
    data: DataConfig = field(default_factory=DataConfig, metadata=doc("training data"))
    batch_size: int = field(default=4, metadata=doc("sequences per peer per step"))
    seq_len: int = field(default=32, metadata=doc("tokens per sequence (at most the preset's seq_len)"))
    grad_accum: int = field(
        default=1,
        metadata=doc("micro-batches the step's batch is split into (must divide batch_size); local: less "
                     "memory, same run"),
    )
    grad_clip: float = field(
        default=1.0,
        metadata=doc("max global gradient norm before the strategy sees it; 0 disables"),
    )
    rounds: RoundsConfig = field(default_factory=RoundsConfig, metadata=doc("round timings and roster rules"))
    seed: int = field(default=0, metadata=doc("seed of the initial weights (the same on every peer)"))

    def check(self) -> None:
        try:
            shape = preset(self.model)
        except UnknownPresetError as exc:
            raise self._fail("model", str(exc)) from None
        try:
            settings = make_config(self.strategy, self.strategy_settings)
        except ConfigError as exc:
            field_name = _strategy_field(exc, self.strategy)
            detail = str(exc).removeprefix(f"{exc.field}: ")
            raise ConfigFieldError(field_name, detail) from None
        object.__setattr__(self, "strategy_settings", settings)
        for name in ("batch_size", "seq_len", "grad_accum"):
            self._range(name, 1, 2**31 - 1)
        if self.seq_len > shape.seq_len:
            limit = f"must be <= {shape.seq_len} (preset {self.model!r})"
            raise self._fail("seq_len", f"{limit}, got {self.seq_len}")
        self._range("grad_clip", 0.0, 1e9)
        self._range("seed", 0, 2**63 - 1)

    @property
    def strategy_config(self) -> StrategyConfig:
        """The typed strategy settings. :meth:`check` always builds them; the field admits None only as an
        input ("the strategy's defaults")."""
        if self.strategy_settings is None:
            raise self._fail("strategy_settings", "not built (RunConfig.check did not run)")
        return self.strategy_settings

    def digest(self) -> str:
        """sha256 (hex) of the canonical JSON of every run setting: a checkpoint or a peer with another digest
        belongs to a different run."""
        body = json.dumps(asdict(self), sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(body.encode()).hexdigest()


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
    key_file: Path | None = field(
        default=None,
        metadata=doc(
            "ed25519 identity key; unset: <data_dir>/identity.key",
            example="/var/lib/distro-node/identity.key",
        ),
    )
    max_peers: int = field(default=64, metadata=doc("most peers kept connected at once (a connection cap)"))
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
        self._range("behind_steps", 1, 1_000_000)


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
    "RoundsConfig",
    "RunConfig",
    "Section",
    "doc",
]

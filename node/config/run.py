"""The ``[run]`` sections: what defines a training run (model, strategy, data, round rules).

Every peer of a run must agree on all of these (:meth:`RunConfig.digest`); a founder writes them into the
run manifest and joiners follow it. Local, per-process settings are in schema.py.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar

from distro_node.node.config.errors import ConfigFieldError
from distro_node.node.config.section import Section, doc
from distro_node.node.presets import UnknownPresetError, preset
from distro_node.optimizer.config import StrategyConfig
from distro_node.optimizer.errors import ConfigError
from distro_node.optimizer.registry import STRATEGIES, make_config
from distro_node.protocol.messages import MAX_LIST_PEERS

DATA_KINDS: tuple[str, ...] = ("embedded", "text", "tokens", "shards")
TOKEN_DTYPES: tuple[str, ...] = ("auto", "uint16", "uint32")


@dataclass(frozen=True)
class DataConfig(Section):
    """Where training tokens come from; every peer of a run must use the same data to share a loss floor."""

    SECTION: ClassVar[str] = "run.data"

    kind: str = field(
        default="embedded",
        metadata=doc("embedded (offline Markov corpus, known loss floor) | text | tokens | shards (a dataset "
                     "from `distro-node data prepare`; the model takes its tokenizer's vocabulary size)"),
    )
    path: Path | None = field(
        default=None,
        metadata=doc(
            "text: any UTF-8/bytes file (byte vocabulary); tokens: flat little-endian token ids; shards: "
            "the folder `data prepare` wrote (or its data.json); local: join checks the file's sha256 and "
            "size against the run manifest",
            example="/data/corpus.u16",
        ),
    )
    token_dtype: str = field(
        default="auto",
        metadata=doc("tokens only: auto (from the .u16/.u32 suffix) | uint16 | uint32"),
    )
    eval_fraction: float = field(
        default=0.01,
        metadata=doc("tail fraction of a file held out for evaluation, in (0, 1); shards: the fraction of "
                     "documents `data prepare` holds out (the run uses the split the dataset records)"),
    )
    seed: int = field(default=0, metadata=doc("seed of the embedded corpus (the same on every peer)"))
    cache_bytes: int = field(
        default=8 << 30,
        metadata=doc("shards: disk budget in bytes of a joiner that fetches the shards its batches need from "
                     "peers (no local copy); least recently used shards not needed soon are evicted; local, "
                     "at least the largest shard"),
    )

    def check(self) -> None:
        self._choice("kind", DATA_KINDS)
        self._range("cache_bytes", 1, 2**63 - 1)
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
    max_included: int = field(
        default=0,
        metadata=doc("at most this many payloads per step, the peers that waited longest first; 0: all "
                     "(traffic per peer then grows with the swarm; see docs/benchmarks.md)"),
    )

    def check(self) -> None:
        for name in ("round_timeout_seconds", "leader_timeout_seconds", "liveness_timeout_seconds"):
            self._positive(name)
            self._range(name, 0.0, 86400.0)
        if self.leader_timeout_seconds >= 4 * self.round_timeout_seconds:
            raise self._fail("leader_timeout_seconds", "must be < 4 x round_timeout_seconds")
        for name in ("warmup_rounds", "max_missed_rounds"):
            self._range(name, 1, 1000)
        self._range("max_included", 0, MAX_LIST_PEERS)


ADMISSION_MODES: tuple[str, ...] = ("open", "permissioned")


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
    admission: str = field(
        default="open",
        metadata=doc("who may join, set by the founder: open (anyone) | permissioned (only peers holding "
                     "a ticket signed by the founder's key, `distro-node ticket issue`; the founder needs a "
                     "key file)"),
    )
    seed: int = field(default=0, metadata=doc("seed of the initial weights (the same on every peer)"))
    init_from: Path | None = field(
        default=None,
        metadata=doc(
            "start from a local Hugging Face LlamaForCausalLM checkpoint directory (config.json + "
            "model.safetensors, or shards with model.safetensors.index.json) instead of the seed; founders: "
            "its config.json sets the model shape (run.model is not used) and the manifest names its weights "
            "and files by sha256; local: joiners may leave it unset (the files are fetched from the swarm "
            "into <data_dir>/init) or pass their own copy, checked against the weights hash",
            example="/models/my-llama",
        ),
    )

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
        # An imported model's length is known once its config.json is read (the founder's manifest checks it).
        if self.init_from is None and self.seq_len > shape.seq_len:
            limit = f"must be <= {shape.seq_len} (preset {self.model!r})"
            raise self._fail("seq_len", f"{limit}, got {self.seq_len}")
        self._range("grad_clip", 0.0, 1e9)
        self._range("seed", 0, 2**63 - 1)
        if self.admission not in ADMISSION_MODES:
            modes = " | ".join(ADMISSION_MODES)
            raise self._fail("admission", f"must be one of {modes}, got {self.admission!r}")

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
        fields = asdict(self)
        if fields["init_from"] is None:  # added later: left out unset, so older digests stay what they were
            del fields["init_from"]
        if fields["admission"] == "open":  # added later: left out at its default, as init_from
            del fields["admission"]
        body = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(body.encode()).hexdigest()

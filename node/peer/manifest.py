"""The run manifest: everything peers must share to train the same model the same way.

Founders create it; joiners fetch it from their bootstrap peer (``/distro/manifest/1.0.0``). The run id is the
sha256 of its canonical bytes (JSON, sorted keys, no whitespace), so a joiner given the run id can check that
the bootstrap served the right run, and every payload, announcement and batch is bound to it. A random nonce
makes two runs founded with equal settings distinct runs.

Round timings and the roster rules (warm-up rounds, missed rounds) are in the manifest too: they are
replicated state (every replica must drop and activate peers at the same step), not a local preference.

Fields added after the first version (``grad_clip``, ``data``, ``init``, ``founder``, ``genesis``,
``rounds.max_included``) are left out of the canonical bytes while they hold their default, so an
embedded-data run with the default clipping has the same bytes, hence the same run id, as before they
existed (a founder's checkpoint still resumes its run).
Writing such a field out at its default is not canonical and is refused, so every manifest still has exactly
one byte form. What stays out of the manifest on purpose: the device, the precision, gradient accumulation
and the paths of the data file and of an imported checkpoint, which are per-process choices
(node/peer/local.py).

A run imported from a Hugging Face checkpoint (``init``) has no preset: the model shape is the one its
config.json gave, carried in ``init.model``, and its weights are named by ``init.sha256``, the weights hash of
the imported tensors (node/hf/convert.py). ``init.files`` names the directory's files by sha256 and size, so
a joiner without a copy fetches them from its peers; every peer still checks the loaded weights against
``init.sha256`` (node/peer/init_spec.py, run_init.py, init_fetch.py).
"""

from __future__ import annotations

import hashlib
import json
import math
import secrets
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from distro_node.compression.wire import max_encoded_nbytes
from distro_node.node.config.schema import NetworkConfig, RoundsConfig, RunConfig
from distro_node.node.model import ModelConfig
from distro_node.optimizer.errors import ConfigError
from distro_node.optimizer.registry import STRATEGIES, make_config
from distro_node.protocol.consensus import RoundConfig, RoundConfigError
from distro_node.protocol.messages import MAX_LIST_PEERS
from distro_node.protocol.signatures import is_ed25519_peer_id

from ..data.data_manifest import MAX_VOCAB
from ..presets import UnknownPresetError, preset, with_vocab
from .init_spec import InitSpec
from .manifest_error import SHA256_HEX as _SHA256_HEX
from .manifest_error import ManifestError

MANIFEST_VERSION = 1
MAX_MANIFEST_BYTES = 64 * 1024
DATA_FILE_KINDS: tuple[str, ...] = ("text", "tokens", "shards")
TOKEN_DTYPES: tuple[str, ...] = ("uint16", "uint32")
_RUN = RunConfig()  # the defaults below come from the node config's [run] table (one source)
DEFAULT_GRAD_CLIP = _RUN.grad_clip

_ROUNDS = RoundsConfig()  # the defaults come from the node config (one source); see RoundsConfig's docs


@dataclass(frozen=True)
class RoundSettings:
    """``[run.rounds]`` as the manifest carries it. The field names are the manifest's wire names (they are
    part of the bytes the run id hashes), hence without the config's ``_seconds`` suffix."""

    round_timeout: float = _ROUNDS.round_timeout_seconds
    leader_timeout: float = _ROUNDS.leader_timeout_seconds
    liveness_timeout: float = _ROUNDS.liveness_timeout_seconds
    warmup_rounds: int = _ROUNDS.warmup_rounds
    max_missed_rounds: int = _ROUNDS.max_missed_rounds
    # The most payloads a step includes (protocol/consensus/inclusion_bound.py); 0: all. Left out of the bytes
    # at 0, so runs from before it existed keep their run id.
    max_included: int = _ROUNDS.max_included

    @classmethod
    def from_config(cls, rounds: RoundsConfig) -> RoundSettings:
        return cls(round_timeout=rounds.round_timeout_seconds, leader_timeout=rounds.leader_timeout_seconds,
                   liveness_timeout=rounds.liveness_timeout_seconds, warmup_rounds=rounds.warmup_rounds,
                   max_missed_rounds=rounds.max_missed_rounds, max_included=rounds.max_included)


@dataclass(frozen=True)
class DataSpec:
    """The run's training data as every peer must hold it. A file is named by kind, sha256 and size, never by
    path: each peer keeps its copy where it likes, and the hash proves they train on the same bytes.
    ``token_dtype`` (token files) and ``eval_fraction`` decide the tokens and the train split, so they are
    shared too. The default is the embedded dataset (seeded by the manifest's ``data_seed``).

    A prepared dataset (kind ``shards``) is named by its data manifest (data.json: sha256 and size of that
    file, which names every shard by sha256), with the split and width it records, plus its tokenizer's
    sha256 and vocabulary size: the model takes that vocabulary instead of the preset's
    (:meth:`RunManifest.model_config`). These two fields exist for shards only and are left out of the
    bytes otherwise, so the run ids of file runs stay what they were."""

    kind: str = "embedded"
    sha256: str = ""
    size: int = 0
    token_dtype: str = ""
    eval_fraction: float = 0.01
    tokenizer_sha256: str = ""
    vocab_size: int = 0

    def check(self) -> None:
        if self.kind == "embedded":
            if self != DataSpec():
                raise ManifestError("data", "the embedded dataset takes no file fields")
            return
        if self.kind not in DATA_FILE_KINDS:
            raise ManifestError("data.kind", f"must be embedded or one of {DATA_FILE_KINDS}, "
                                             f"got {self.kind!r}")
        if not isinstance(self.sha256, str) or not _SHA256_HEX.fullmatch(self.sha256):
            raise ManifestError("data.sha256", "must be 64 lowercase hex characters")
        if type(self.size) is not int or not 0 < self.size < 2**63:
            raise ManifestError("data.size", f"must be a positive int, got {self.size!r}")
        wanted = TOKEN_DTYPES if self.kind == "tokens" else ("",)
        if self.kind == "shards":
            self._check_tokenizer()
            wanted = ("uint16" if self.vocab_size <= 1 << 16 else "uint32",)
        elif (self.tokenizer_sha256, self.vocab_size) != ("", 0):
            raise ManifestError("data.tokenizer_sha256", f"only kind shards has a tokenizer, not "
                                                         f"{self.kind!r}")
        if self.token_dtype not in wanted:
            raise ManifestError("data.token_dtype", f"must be one of {wanted} for kind {self.kind!r}")
        fraction = self.eval_fraction
        if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 < fraction < 1:
            raise ManifestError("data.eval_fraction", f"must be in (0, 1), got {fraction!r}")

    def _check_tokenizer(self) -> None:
        if not isinstance(self.tokenizer_sha256, str) or not _SHA256_HEX.fullmatch(self.tokenizer_sha256):
            raise ManifestError("data.tokenizer_sha256", "must be 64 lowercase hex characters")
        # The model's embedding is sized by it before any local file is read: capped (MAX_VOCAB).
        if type(self.vocab_size) is not int or not 2 <= self.vocab_size <= MAX_VOCAB:
            raise ManifestError("data.vocab_size", f"must be an int in [2, {MAX_VOCAB}], "
                                                   f"got {self.vocab_size!r}")


# Later fields and the values at which they are left out of the canonical bytes (see the module docstring).
_DATA_OMITTED_AT_DEFAULT: dict[str, Any] = {"tokenizer_sha256": "", "vocab_size": 0}
_ROUNDS_OMITTED_AT_DEFAULT: dict[str, Any] = {"max_included": 0}
_OMITTED_AT_DEFAULT: dict[str, Any] = {"grad_clip": DEFAULT_GRAD_CLIP, "data": DataSpec(), "init": InitSpec(),
                                       "founder": "", "genesis": ""}


@dataclass(frozen=True)
class RunManifest:
    preset: str = _RUN.model
    strategy: str = _RUN.strategy
    settings: Mapping[str, Any] = field(default_factory=dict)
    batch_size: int = _RUN.batch_size
    seq_len: int = _RUN.seq_len
    seed: int = _RUN.seed
    data_seed: int = _RUN.data.seed
    grad_clip: float = DEFAULT_GRAD_CLIP  # max global gradient norm before the strategy sees it; 0: off
    data: DataSpec = field(default_factory=DataSpec)
    init: InitSpec = field(default_factory=InitSpec)
    rounds: RoundSettings = field(default_factory=RoundSettings)
    nonce: str = ""
    # A permissioned run's founder peer id: only it and the holders of a ticket its key signed are admitted
    # (protocol/admission.py). Empty: an open run.
    founder: str = ""
    # An open run's founder peer id, when it founded with a kept key: the root a newcomer checks the chain of
    # attested rosters from (node/peer/trust_chain.py), so that no bootstrap peer's word chooses its roster.
    # It admits nobody (that is ``founder``). Empty: a permissioned run (its root is ``founder``), or an open
    # run whose founder had a fresh identity per process (newcomers then trust their bootstrap's roster).
    genesis: str = ""
    version: int = MANIFEST_VERSION

    def __post_init__(self) -> None:
        if not isinstance(self.init, InitSpec):
            raise ManifestError("init", "must be an InitSpec")
        self.init.check()
        if not isinstance(self.data, DataSpec):
            raise ManifestError("data", "must be a DataSpec")
        self.data.check()  # before the shape: a tokenizer's vocabulary size is part of it
        model = self.model_config()
        if self.strategy not in STRATEGIES:
            raise ManifestError("strategy", f"must be one of {sorted(STRATEGIES)}")
        try:
            make_config(self.strategy, dict(self.settings))
        except (ConfigError, TypeError, ValueError) as exc:
            raise ManifestError("settings", str(exc)) from None
        for name in ("batch_size", "seq_len"):
            value = getattr(self, name)
            if type(value) is not int or not 1 <= value <= 1 << 20:
                raise ManifestError(name, f"must be a positive int, got {value!r}")
        if self.seq_len > model.seq_len:
            raise ManifestError("seq_len", f"{self.seq_len} exceeds the model's {model.seq_len}")
        for name in ("seed", "data_seed"):
            value = getattr(self, name)
            if type(value) is not int or not 0 <= value < 2**63:
                raise ManifestError(name, f"must be a non-negative int, got {value!r}")
        clip = self.grad_clip
        if isinstance(clip, bool) or not isinstance(clip, int | float) or not (
            math.isfinite(clip) and 0 <= clip <= 1e9
        ):
            raise ManifestError("grad_clip", f"must be a number in [0, 1e9], got {clip!r}")
        if not isinstance(self.nonce, str) or len(self.nonce) > 64:
            raise ManifestError("nonce", "must be a string of at most 64 characters")
        if not isinstance(self.founder, str) or (self.founder and not is_ed25519_peer_id(self.founder)):
            raise ManifestError("founder", "must be empty (an open run) or an ed25519 peer id")
        if not isinstance(self.genesis, str) or (self.genesis and not is_ed25519_peer_id(self.genesis)):
            raise ManifestError("genesis", "must be empty or an ed25519 peer id")
        if self.genesis and self.founder:
            raise ManifestError("genesis", "must be empty in a permissioned run: its root is the founder")
        if self.version != MANIFEST_VERSION:
            raise ManifestError("version", f"unsupported manifest version {self.version!r}")
        r = self.rounds
        if r.leader_timeout >= r.round_timeout * 4 or r.liveness_timeout <= 0:
            raise ManifestError("rounds", "timeouts out of range")
        if type(r.max_included) is not int or not 0 <= r.max_included <= MAX_LIST_PEERS:
            raise ManifestError("rounds.max_included", f"must be an int in [0, {MAX_LIST_PEERS}] (0: all), "
                                                       f"got {r.max_included!r}")

    @property
    def chain_root(self) -> str:
        """The peer id a newcomer's chain of attested rosters starts from ('' when the run names none)."""
        return self.founder or self.genesis

    def model_config(self) -> ModelConfig:
        """The model's shape: the preset's, or for an imported run ``init.model`` (it has no preset). With
        a tokenizer's data (``data.vocab_size``) a preset takes its vocabulary; an imported model must have
        it already."""
        vocab = self.data.vocab_size
        if self.init.kind != "seed":
            if self.preset:
                raise ManifestError("preset", "must be empty for an imported run (init.model is its shape)")
            shape = self.init.model_config()
            if vocab and shape.vocab_size != vocab:
                raise ManifestError("data.vocab_size", f"the run's tokenizer has {vocab} ids but the "
                                                       f"imported model's vocabulary is {shape.vocab_size}")
            return shape
        try:
            shape = preset(self.preset)
        except UnknownPresetError as exc:
            raise ManifestError("preset", str(exc)) from None
        return with_vocab(shape, vocab) if vocab else shape

    @property
    def model_name(self) -> str:
        """How to name the model to a person: the preset, or the imported checkpoint's hash."""
        return self.preset if self.init.kind == "seed" else f"imported {self.init.sha256[:12]}"

    @classmethod
    def found(cls, **kwargs: Any) -> RunManifest:
        """A new run: the given settings plus a fresh nonce."""
        return cls(nonce=secrets.token_hex(8), **kwargs)

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["settings"] = json.loads(json.dumps(dict(self.settings)))
        doc["init"] = self.init.to_doc()
        for name, default in _OMITTED_AT_DEFAULT.items():
            if getattr(self, name) == default:
                del doc[name]
        for name, default in _DATA_OMITTED_AT_DEFAULT.items():
            if "data" in doc and doc["data"][name] == default:
                del doc["data"][name]
        for name, default in _ROUNDS_OMITTED_AT_DEFAULT.items():
            if doc["rounds"][name] == default:
                del doc["rounds"][name]
        return doc

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), allow_nan=False).encode()

    def run_id(self) -> bytes:
        return hashlib.sha256(self.to_bytes()).digest()

    @classmethod
    def from_bytes(cls, data: bytes) -> RunManifest:
        """Strict parse of peer bytes: exact key sets, typed values, canonical form."""
        if len(data) > MAX_MANIFEST_BYTES:
            raise ManifestError("size", f"{len(data)} bytes, cap {MAX_MANIFEST_BYTES}")
        try:
            doc = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ManifestError("json", str(exc)[:120]) from None
        keys = {f for f in cls.__dataclass_fields__}
        required = keys - set(_OMITTED_AT_DEFAULT)
        if not isinstance(doc, dict) or not required <= set(doc) <= keys:
            optional = sorted(_OMITTED_AT_DEFAULT)
            raise ManifestError("keys", f"expected {sorted(required)}, optionally {optional}")
        data_doc = doc.get("data", asdict(DataSpec()))
        data_keys = set(DataSpec.__dataclass_fields__)
        data_required = data_keys - set(_DATA_OMITTED_AT_DEFAULT)
        if not isinstance(data_doc, dict) or not data_required <= set(data_doc) <= data_keys:
            raise ManifestError("data", f"expected {sorted(data_required)}, optionally "
                                        f"{sorted(_DATA_OMITTED_AT_DEFAULT)}")
        for name in ("kind", "sha256", "token_dtype", "tokenizer_sha256"):
            if name in data_doc and not isinstance(data_doc[name], str):
                raise ManifestError(f"data.{name}", "must be a string")
        init = InitSpec.from_doc(doc.get("init", InitSpec().to_doc()))
        rounds = doc["rounds"]
        round_keys = set(RoundSettings.__dataclass_fields__)
        round_required = round_keys - set(_ROUNDS_OMITTED_AT_DEFAULT)
        if not isinstance(rounds, dict) or not round_required <= set(rounds) <= round_keys:
            raise ManifestError("rounds", f"expected {sorted(round_required)}, optionally "
                                          f"{sorted(_ROUNDS_OMITTED_AT_DEFAULT)}")
        for name in ("round_timeout", "leader_timeout", "liveness_timeout"):
            if isinstance(rounds[name], bool) or not isinstance(rounds[name], int | float):
                raise ManifestError(f"rounds.{name}", "must be a number")
        for name in ("warmup_rounds", "max_missed_rounds", "max_included"):
            if name in rounds and type(rounds[name]) is not int:
                raise ManifestError(f"rounds.{name}", "must be an int")
        if not isinstance(doc["settings"], dict):
            raise ManifestError("settings", "must be a mapping")
        for name in ("preset", "strategy", "nonce", "founder", "genesis"):
            if name in doc and not isinstance(doc[name], str):
                raise ManifestError(name, "must be a string")
        manifest = cls(**{**doc, "rounds": RoundSettings(**rounds), "data": DataSpec(**data_doc),
                          "init": init})
        if manifest.to_bytes() != bytes(data):
            raise ManifestError("encoding", "not in canonical form (sorted keys, no whitespace)")
        return manifest

    def round_config(self, max_payload_bytes: int, network: NetworkConfig | None = None) -> RoundConfig:
        """The round machine's settings: the replicated ones from this manifest, this peer's own retry and
        resync pacing from ``network`` (the node config; None: its defaults)."""
        r = self.rounds
        net = network if network is not None else NetworkConfig()
        try:
            return RoundConfig(
                run_id=self.run_id(),
                collect_timeout=float(r.round_timeout),
                leader_timeout=float(r.leader_timeout),
                liveness_timeout=float(r.liveness_timeout),
                warmup_rounds=r.warmup_rounds,
                max_missed_rounds=r.max_missed_rounds,
                max_included=r.max_included,
                max_payload_bytes=max_payload_bytes,
                behind_steps=net.behind_steps,
                reannounce_interval=net.reannounce_seconds,
                fetch_retry_interval=net.fetch_retry_seconds,
                apply_timeout=net.apply_timeout_seconds,
                resync_cooldown=net.resync_cooldown_seconds,
            )
        except RoundConfigError as exc:
            raise ManifestError("rounds", str(exc)) from None


def payload_cap(spec: Any) -> int:
    """The largest payload a peer of this run may send: the codec's exact bound for the spec."""
    return int(max_encoded_nbytes(spec))


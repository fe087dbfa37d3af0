"""One typed, validated settings dataclass per strategy.

Validation happens at construction so a bad value fails before any training step, and every error names the
field (``ConfigError.field``) so it can be traced back to the operator's config file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import MISSING, Field, asdict, dataclass, field, fields
from typing import Any, ClassVar, Protocol, TypeVar, get_type_hints

from distro_node.compression.indices import INDEX_CODECS
from distro_node.compression.values import VALUE_CODECS

from .errors import ConfigError

SCHEDULE_KINDS: tuple[str, ...] = ("constant", "cosine", "wsd")
UPDATE_RULES: tuple[str, ...] = ("sign", "adam")
# Names of optimizer/robust.py's AGGREGATORS (listed here so config.py does not import torch code).
AGGREGATIONS: tuple[str, ...] = ("mean", "clipped")


class SettingsDataclass(Protocol):
    """Any settings dataclass: the one thing ``fields`` and ``asdict`` need, so the helpers below take every
    config class (and a future one) without naming them."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]


def _finite(owner: str, name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{owner}.{name}", f"must be a finite number, got {value!r}")


def _integer(owner: str, name: str, value: int, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{owner}.{name}", f"must be an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{owner}.{name}", f"must be >= {minimum}, got {value}")


def _in_range(
    owner: str, name: str, value: float, low: float, high: float, *, open_high: bool = False
) -> None:
    _finite(owner, name, value)
    if value < low or value > high or (open_high and value == high):
        bracket = ")" if open_high else "]"
        raise ConfigError(f"{owner}.{name}", f"must be in [{low}, {high}{bracket}, got {value}")


def _check_codecs(owner: str, value_codec: str, index_codec: str) -> None:
    if value_codec not in VALUE_CODECS:
        raise ConfigError(
            f"{owner}.value_codec", f"must be one of {tuple(VALUE_CODECS)}, got {value_codec!r}"
        )
    if not isinstance(index_codec, str) or not index_codec:
        raise ConfigError(f"{owner}.index_codec", f"must be a non-empty string, got {index_codec!r}")
    if index_codec not in INDEX_CODECS:
        raise ConfigError(
            f"{owner}.index_codec", f"must be one of {tuple(INDEX_CODECS)}, got {index_codec!r}"
        )


def _best_index_codec(chunk: int, topk: int) -> str:
    block = max(chunk * chunk, 1)
    try:
        INDEX_CODECS["enum"].check(block, max(1, min(topk, block)))
    except ValueError:
        return "packed"
    return "enum"


@dataclass(frozen=True)
class ScheduleConfig:
    """Learning rate as a pure function of the step, so every peer (and a resumed node) agrees on it.

    ``constant``: ``lr`` after warmup. ``cosine``: from ``lr`` down to ``lr * min_lr_ratio`` at
    ``total_steps``.
    ``wsd`` (warmup-stable-decay): ``lr`` until the last ``decay_steps`` steps, then linear down to the floor.
    Warmup is linear from ``lr / warmup_steps`` at step 0 to ``lr``.
    """

    kind: str = "constant"
    lr: float = 4e-4
    warmup_steps: int = 0
    total_steps: int = 0
    min_lr_ratio: float = 0.1
    decay_steps: int = 0

    def __post_init__(self) -> None:
        owner = "schedule"
        if self.kind not in SCHEDULE_KINDS:
            raise ConfigError(f"{owner}.kind", f"must be one of {SCHEDULE_KINDS}, got {self.kind!r}")
        _finite(owner, "lr", self.lr)
        if self.lr <= 0:
            raise ConfigError(f"{owner}.lr", f"must be > 0, got {self.lr}")
        _integer(owner, "warmup_steps", self.warmup_steps, 0)
        _integer(owner, "total_steps", self.total_steps, 0)
        _integer(owner, "decay_steps", self.decay_steps, 0)
        _in_range(owner, "min_lr_ratio", self.min_lr_ratio, 0.0, 1.0)
        if self.kind in ("cosine", "wsd") and self.total_steps <= self.warmup_steps:
            raise ConfigError(
                f"{owner}.total_steps",
                f"must exceed warmup_steps ({self.warmup_steps}) for a {self.kind} schedule, "
                f"got {self.total_steps}",
            )
        if self.kind == "wsd" and not 0 < self.decay_steps <= self.total_steps - self.warmup_steps:
            raise ConfigError(
                f"{owner}.decay_steps",
                f"must be in [1, total_steps - warmup_steps = {self.total_steps - self.warmup_steps}] "
                f"for wsd, "
                f"got {self.decay_steps}",
            )


@dataclass(frozen=True)
class DistroConfig:
    """DisTrO / DeMo settings.

    Defaults: the DeMo step with k=4, enumerative (entropy-optimal) indices and 1-bit values: 1.77 MB per step
    for the report's 1.2B model, under its 2.8 MB (u16 indices would give 2.51 MB).
    """

    chunk: int = 64
    topk: int = 4
    beta: float = 0.999
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    weight_decay: float = 0.0
    update: str = "sign"
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8
    value_codec: str = "1bit"
    # "best" resolves at construction to "enum" where it can carry k of a chunk, else "packed"; the resolved
    # name is what the settings digest sees, so peers agree on it.
    index_codec: str = "best"
    overlapped: bool = False
    # "clipped" (default): every peer's payload is clipped to the median peer norm before the DeMo mean, so a
    # scaled peer cannot dominate (threats.md); with 1-bit values it is bit-identical to "mean" (all norms are
    # equal), so it costs nothing there. "mean": the plain DeMo rule of reference/algorithm.md.
    aggregation: str = "clipped"

    def __post_init__(self) -> None:
        owner = "distro"
        if self.index_codec == "best" and isinstance(self.chunk, int) and isinstance(self.topk, int):
            object.__setattr__(self, "index_codec", _best_index_codec(self.chunk, self.topk))
        _integer(owner, "chunk", self.chunk, 1)
        _integer(owner, "topk", self.topk, 1)
        _in_range(owner, "beta", self.beta, 0.0, 1.0)
        _in_range(owner, "weight_decay", self.weight_decay, 0.0, math.inf)
        if self.update not in UPDATE_RULES:
            raise ConfigError(f"{owner}.update", f"must be one of {UPDATE_RULES}, got {self.update!r}")
        _in_range(owner, "adam_beta2", self.adam_beta2, 0.0, 1.0, open_high=True)
        _finite(owner, "adam_eps", self.adam_eps)
        if self.adam_eps <= 0:
            raise ConfigError(f"{owner}.adam_eps", f"must be > 0, got {self.adam_eps}")
        _check_codecs(owner, self.value_codec, self.index_codec)
        # The largest chunk decides whether the index codec can carry k of it; say so here, naming the field,
        # rather than from deep inside the codec when the first payload is built.
        block = self.chunk * self.chunk
        try:
            INDEX_CODECS[self.index_codec].check(block, min(self.topk, block))
        except ValueError as exc:
            raise ConfigError(f"{owner}.index_codec", str(exc)) from None
        if not isinstance(self.overlapped, bool):
            raise ConfigError(f"{owner}.overlapped", f"must be a bool, got {self.overlapped!r}")
        if self.aggregation not in AGGREGATIONS:
            raise ConfigError(
                f"{owner}.aggregation", f"must be one of {AGGREGATIONS}, got {self.aggregation!r}"
            )
        if not isinstance(self.schedule, ScheduleConfig):
            raise ConfigError(f"{owner}.schedule", "must be a ScheduleConfig")


@dataclass(frozen=True)
class AdamWConfig:
    """The report's baseline: AdamW on the dense mean gradient, sent as bf16 like the report's all-reduce."""

    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1
    value_codec: str = "bf16"
    index_codec: str = "auto"

    def __post_init__(self) -> None:
        owner = "adamw"
        _in_range(owner, "beta1", self.beta1, 0.0, 1.0, open_high=True)
        _in_range(owner, "beta2", self.beta2, 0.0, 1.0, open_high=True)
        _finite(owner, "eps", self.eps)
        if self.eps <= 0:
            raise ConfigError(f"{owner}.eps", f"must be > 0, got {self.eps}")
        _in_range(owner, "weight_decay", self.weight_decay, 0.0, math.inf)
        _check_codecs(owner, self.value_codec, self.index_codec)
        if not isinstance(self.schedule, ScheduleConfig):
            raise ConfigError(f"{owner}.schedule", "must be a ScheduleConfig")


@dataclass(frozen=True)
class DilocoConfig:
    """Local SGD / DiLoCo (seed 001): inner AdamW for ``inner_steps`` steps, then an outer Nesterov step."""

    inner_steps: int = 32
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    inner_beta1: float = 0.9
    inner_beta2: float = 0.95
    inner_eps: float = 1e-8
    inner_weight_decay: float = 0.1
    outer_lr: float = 0.7
    outer_momentum: float = 0.9
    nesterov: bool = True
    value_codec: str = "fp32"
    index_codec: str = "auto"

    def __post_init__(self) -> None:
        owner = "diloco"
        _integer(owner, "inner_steps", self.inner_steps, 1)
        _in_range(owner, "inner_beta1", self.inner_beta1, 0.0, 1.0, open_high=True)
        _in_range(owner, "inner_beta2", self.inner_beta2, 0.0, 1.0, open_high=True)
        _finite(owner, "inner_eps", self.inner_eps)
        if self.inner_eps <= 0:
            raise ConfigError(f"{owner}.inner_eps", f"must be > 0, got {self.inner_eps}")
        _in_range(owner, "inner_weight_decay", self.inner_weight_decay, 0.0, math.inf)
        _finite(owner, "outer_lr", self.outer_lr)
        if self.outer_lr <= 0:
            raise ConfigError(f"{owner}.outer_lr", f"must be > 0, got {self.outer_lr}")
        _in_range(owner, "outer_momentum", self.outer_momentum, 0.0, 1.0, open_high=True)
        if not isinstance(self.nesterov, bool):
            raise ConfigError(f"{owner}.nesterov", f"must be a bool, got {self.nesterov!r}")
        _check_codecs(owner, self.value_codec, self.index_codec)
        if not isinstance(self.schedule, ScheduleConfig):
            raise ConfigError(f"{owner}.schedule", "must be a ScheduleConfig")


@dataclass(frozen=True)
class CocktailConfig:
    """CocktailSGD-style (seed 003): shared random subset, top-k inside it, codec quantization, error
    feedback; SGD with momentum on the averaged sparse gradient."""

    subset_ratio: float = 0.1
    topk_ratio: float = 0.1
    schedule: ScheduleConfig = field(default_factory=lambda: ScheduleConfig(lr=0.01))
    momentum: float = 0.9
    nesterov: bool = False
    weight_decay: float = 0.0
    seed: int = 0
    value_codec: str = "int8"
    index_codec: str = "auto"

    def __post_init__(self) -> None:
        owner = "cocktail"
        _in_range(owner, "subset_ratio", self.subset_ratio, 0.0, 1.0)
        if self.subset_ratio <= 0:
            raise ConfigError(f"{owner}.subset_ratio", f"must be > 0, got {self.subset_ratio}")
        _in_range(owner, "topk_ratio", self.topk_ratio, 0.0, 1.0)
        if self.topk_ratio <= 0:
            raise ConfigError(f"{owner}.topk_ratio", f"must be > 0, got {self.topk_ratio}")
        _in_range(owner, "momentum", self.momentum, 0.0, 1.0, open_high=True)
        if not isinstance(self.nesterov, bool):
            raise ConfigError(f"{owner}.nesterov", f"must be a bool, got {self.nesterov!r}")
        _in_range(owner, "weight_decay", self.weight_decay, 0.0, math.inf)
        _integer(owner, "seed", self.seed, 0)
        _check_codecs(owner, self.value_codec, self.index_codec)
        if not isinstance(self.schedule, ScheduleConfig):
            raise ConfigError(f"{owner}.schedule", "must be a ScheduleConfig")


StrategyConfig = DistroConfig | AdamWConfig | DilocoConfig | CocktailConfig
C = TypeVar("C", bound=SettingsDataclass)


def config_from_dict(cls: type[C], data: Mapping[str, Any], owner: str | None = None) -> C:
    """Build ``cls`` from a plain mapping (a parsed config file), rejecting unknown keys by name so typos do
    not silently fall back to defaults. A nested ``schedule`` mapping becomes a :class:`ScheduleConfig`."""
    owner = owner or cls.__name__
    if not isinstance(data, Mapping):
        raise ConfigError(owner, f"must be a mapping, got {type(data).__name__}")
    hints = get_type_hints(cls)
    known = {f.name: f for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in known:
            raise ConfigError(f"{owner}.{key}", f"unknown setting (known: {sorted(known)})")
        if hints.get(key) is ScheduleConfig and isinstance(value, Mapping):
            value = config_from_dict(ScheduleConfig, value, owner=f"{owner}.{key}")
        kwargs[key] = value
    missing = [n for n, f in known.items() if f.default is MISSING and f.default_factory is MISSING]
    for name in missing:
        if name not in kwargs:
            raise ConfigError(f"{owner}.{name}", "is required")
    return cls(**kwargs)


def config_settings(config: SettingsDataclass) -> dict[str, Any]:
    """Flat, JSON-friendly view of a config for ``PayloadSpec.settings`` (the settings digest)."""
    out: dict[str, Any] = {}
    for key, value in asdict(config).items():
        if isinstance(value, dict):
            for sub, sub_value in value.items():
                out[f"{key}.{sub}"] = sub_value
        else:
            out[key] = value
    return out

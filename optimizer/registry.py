"""Build a strategy by name, so the node's config file and the benchmarks pick strategies the same way."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, assert_never

import torch

from .adamw_allreduce import AdamWAllReduce
from .base import Strategy
from .cocktail import CocktailSGD
from .config import AdamWConfig, CocktailConfig, DilocoConfig, DistroConfig, StrategyConfig, config_from_dict
from .diloco import DiLoCo
from .distro import DisTrO
from .errors import ConfigError

STRATEGIES: dict[str, tuple[type[Strategy], type[StrategyConfig]]] = {
    "distro": (DisTrO, DistroConfig),
    "adamw": (AdamWAllReduce, AdamWConfig),
    "diloco": (DiLoCo, DilocoConfig),
    "cocktail": (CocktailSGD, CocktailConfig),
}


def make_config(name: str, settings: StrategyConfig | Mapping[str, Any] | None = None) -> StrategyConfig:
    """The typed config of strategy ``name`` from a config object, a plain mapping, or None (defaults)."""
    if name not in STRATEGIES:
        raise ConfigError("strategy", f"must be one of {sorted(STRATEGIES)}, got {name!r}")
    config_cls = STRATEGIES[name][1]
    if settings is None:
        return config_cls()
    if isinstance(settings, config_cls):
        return settings
    if isinstance(settings, Mapping):
        return config_from_dict(config_cls, settings, owner=name)
    raise ConfigError(name, f"expected {config_cls.__name__} or a mapping, got {type(settings).__name__}")


def build_strategy(
    name: str,
    model: torch.nn.Module | Iterable[tuple[str, torch.nn.Parameter]],
    settings: StrategyConfig | Mapping[str, Any] | None = None,
) -> Strategy:
    """E.g. ``build_strategy("distro", model, {"topk": 32, "schedule": {"kind": "cosine", ...}})``."""
    return _construct(model, make_config(name, settings))


def _construct(
    model: torch.nn.Module | Iterable[tuple[str, torch.nn.Parameter]], config: StrategyConfig
) -> Strategy:
    """The strategy ``config`` belongs to.

    Chosen by the config's type rather than by calling ``STRATEGIES[name][0]``: each class takes only its own
    config, a pairing a table of classes cannot state to mypy, and a new config type left out here is a type
    error (``assert_never``) instead of a wrong call at run time.
    """
    match config:
        case DistroConfig():
            return DisTrO(model, config)
        case AdamWConfig():
            return AdamWAllReduce(model, config)
        case DilocoConfig():
            return DiLoCo(model, config)
        case CocktailConfig():
            return CocktailSGD(model, config)
    assert_never(config)

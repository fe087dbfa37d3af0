"""Training strategies (DisTrO and baselines) behind one interface. No networking here.

Build one by name with :func:`build_strategy`; the typed configs live in :mod:`.config`.
"""

from .adamw_allreduce import AdamWAllReduce
from .aggregate import Aggregator
from .base import Strategy
from .cocktail import CocktailSGD
from .config import AdamWConfig, CocktailConfig, DilocoConfig, DistroConfig, ScheduleConfig
from .diloco import DiLoCo
from .distro import DisTrO
from .errors import ConfigError, StateError, StepOrderError
from .registry import STRATEGIES, build_strategy, make_config
from .schedule import lr_at

__all__ = [
    "STRATEGIES",
    "AdamWAllReduce",
    "AdamWConfig",
    "Aggregator",
    "CocktailConfig",
    "CocktailSGD",
    "ConfigError",
    "DiLoCo",
    "DilocoConfig",
    "DisTrO",
    "DistroConfig",
    "ScheduleConfig",
    "StateError",
    "StepOrderError",
    "Strategy",
    "build_strategy",
    "lr_at",
    "make_config",
]

"""Config validation names the field; schedules are pure functions of the step."""

from __future__ import annotations

import math

import pytest
from distro_node.optimizer import (
    AdamWConfig,
    CocktailConfig,
    ConfigError,
    DilocoConfig,
    DistroConfig,
    ScheduleConfig,
    lr_at,
    make_config,
)


@pytest.mark.parametrize(
    ("cls", "kwargs", "field"),
    [
        (DistroConfig, {"topk": 0}, "distro.topk"),
        (DistroConfig, {"chunk": 0}, "distro.chunk"),
        (DistroConfig, {"beta": 1.5}, "distro.beta"),
        (DistroConfig, {"beta": math.nan}, "distro.beta"),
        (DistroConfig, {"update": "lion"}, "distro.update"),
        (DistroConfig, {"value_codec": "fp8"}, "distro.value_codec"),
        (DistroConfig, {"index_codec": ""}, "distro.index_codec"),
        (DistroConfig, {"weight_decay": -0.1}, "distro.weight_decay"),
        (DistroConfig, {"overlapped": "yes"}, "distro.overlapped"),
        (DistroConfig, {"topk": True}, "distro.topk"),
        (AdamWConfig, {"beta2": 1.0}, "adamw.beta2"),
        (AdamWConfig, {"eps": 0.0}, "adamw.eps"),
        (DilocoConfig, {"inner_steps": 0}, "diloco.inner_steps"),
        (DilocoConfig, {"outer_lr": -1.0}, "diloco.outer_lr"),
        (DilocoConfig, {"outer_momentum": 1.0}, "diloco.outer_momentum"),
        (CocktailConfig, {"subset_ratio": 0.0}, "cocktail.subset_ratio"),
        (CocktailConfig, {"topk_ratio": 2.0}, "cocktail.topk_ratio"),
        (CocktailConfig, {"seed": -1}, "cocktail.seed"),
        (ScheduleConfig, {"kind": "step"}, "schedule.kind"),
        (ScheduleConfig, {"lr": 0.0}, "schedule.lr"),
        (ScheduleConfig, {"kind": "cosine", "total_steps": 0}, "schedule.total_steps"),
        (ScheduleConfig, {"kind": "wsd", "total_steps": 100}, "schedule.decay_steps"),
        (ScheduleConfig, {"min_lr_ratio": 1.5}, "schedule.min_lr_ratio"),
    ],
)
def test_validation_names_the_field(cls: type, kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        cls(**kwargs)
    assert err.value.field == field
    assert field in str(err.value)
    assert isinstance(err.value, ValueError)


def test_from_mapping_nested_schedule_and_unknown_keys() -> None:
    config = make_config("distro", {"topk": 32, "schedule": {"kind": "cosine", "total_steps": 10}})
    assert isinstance(config, DistroConfig) and config.topk == 32 and config.schedule.kind == "cosine"
    with pytest.raises(ConfigError) as err:
        make_config("distro", {"top_k": 32})
    assert err.value.field == "distro.top_k"
    with pytest.raises(ConfigError) as err:
        make_config("distro", {"schedule": {"lr": -1.0}})
    assert err.value.field == "schedule.lr"
    with pytest.raises(ConfigError) as err:
        make_config("sgd")
    assert err.value.field == "strategy"


def test_schedules() -> None:
    const = ScheduleConfig(lr=1.0, warmup_steps=4)
    assert [lr_at(const, s) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    cos = ScheduleConfig(kind="cosine", lr=1.0, warmup_steps=2, total_steps=12, min_lr_ratio=0.1)
    assert lr_at(cos, 2) == pytest.approx(1.0)
    assert lr_at(cos, 7) == pytest.approx(0.55)
    assert lr_at(cos, 12) == pytest.approx(0.1) and lr_at(cos, 1000) == pytest.approx(0.1)
    values = [lr_at(cos, s) for s in range(2, 13)]
    assert values == sorted(values, reverse=True)
    wsd = ScheduleConfig(kind="wsd", lr=1.0, warmup_steps=0, total_steps=10, decay_steps=4, min_lr_ratio=0.0)
    assert [lr_at(wsd, s) for s in range(11)] == [1, 1, 1, 1, 1, 1, 1.0, 0.75, 0.5, 0.25, 0.0]
    with pytest.raises(ConfigError):
        lr_at(const, -1)


def test_best_index_codec_resolves_by_k() -> None:
    from distro_node.optimizer.config import DistroConfig

    assert DistroConfig().index_codec == "enum"
    assert DistroConfig(topk=32).index_codec == "packed"
    assert DistroConfig(topk=32, index_codec="auto").index_codec == "auto"

"""Node config: sources and their precedence, the rendered default file, and one error per kind of mistake,
each naming the dotted field and the source that set it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from distro_node.node.config.load import (
    ConfigFieldError,
    ConfigFileError,
    ConfigLoadError,
    MetricsConfig,
    NetworkConfig,
    NodeConfig,
    RoundsConfig,
    RunConfig,
    env_name,
    load_config,
    render_toml,
)
from distro_node.optimizer.config import AdamWConfig, DistroConfig, ScheduleConfig
from distro_node.optimizer.errors import ConfigError

PEER = "/ip4/10.0.0.1/tcp/4747/p2p/12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQAJU5SA"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "node.toml"
    path.write_text(text)
    return path


def test_rendered_defaults_load_back_to_defaults(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, render_toml()), env={}) == NodeConfig()


def test_rendered_custom_config_loads_back_equal(tmp_path: Path) -> None:
    config = NodeConfig(
        data_dir=Path("/srv/node"),
        device="cpu",
        run=RunConfig(
            model="small",
            strategy="adamw",
            strategy_settings=AdamWConfig(
                schedule=ScheduleConfig(kind="cosine", total_steps=500), beta2=0.99
            ),
            seq_len=128,
            rounds=RoundsConfig(round_timeout_seconds=2.5),
        ),
        network=NetworkConfig(bootstrap=(PEER,), key_file=Path("/srv/node/key")),
        metrics=MetricsConfig(host='drop "x" \\ 0.1', port=0, enabled=False),
    )
    assert load_config(write(tmp_path, render_toml(config)), env={}) == config


def test_no_sources_gives_defaults() -> None:
    assert load_config(env={}) == NodeConfig()


@pytest.mark.parametrize(
    ("dotted", "file_value", "env_value", "flag_value", "expected"),
    [
        ("metrics.port", "1000", "2000", "3000", (1000, 2000, 3000)),
        ("run.strategy_settings.topk", "8", "16", 32, (8, 16, 32)),
        ("run.rounds.round_timeout_seconds", "5", "6.5", "7", (5.0, 6.5, 7.0)),
        ("checkpoint.enabled", "true", "no", False, (True, False, False)),
    ],
)
def test_file_then_env_then_flag(
    tmp_path: Path, dotted: str, file_value: str, env_value: str, flag_value: Any, expected: tuple
) -> None:
    *tables, key = dotted.split(".")
    path = write(tmp_path, f"[{'.'.join(tables)}]\n{key} = {file_value}\n")
    env = {env_name(dotted): env_value}

    def get(config: NodeConfig) -> Any:
        value: Any = config
        for part in dotted.split("."):
            value = getattr(value, part)
        return value

    assert get(load_config(path, env={})) == expected[0]
    assert get(load_config(path, env=env)) == expected[1]
    assert get(load_config(path, env=env, flags={dotted: flag_value})) == expected[2]
    # A flag given as None is "not given": the environment still wins over the file.
    assert get(load_config(path, env=env, flags={dotted: None})) == expected[1]


def test_env_parsing_of_lists_optionals_and_booleans() -> None:
    env = {
        "DISTRO_NODE_NETWORK__LISTEN": "/ip4/127.0.0.1/tcp/1, /ip4/127.0.0.1/tcp/2",
        "DISTRO_NODE_NETWORK__BOOTSTRAP": PEER,
        "DISTRO_NODE_NETWORK__KEY_FILE": "",
        "DISTRO_NODE_METRICS__ENABLED": "off",
        "DISTRO_NODE_LOG_LEVEL": "debug",
        "DISTRO_NODE_RUN__STRATEGY_SETTINGS__OVERLAPPED": "true",
        "DISTRO_NODE_RUN__STRATEGY_SETTINGS__SCHEDULE__KIND": "cosine",
        "DISTRO_NODE_RUN__STRATEGY_SETTINGS__SCHEDULE__TOTAL_STEPS": "100",
        "HOME_IS_NOT_OURS": "ignored",
    }
    config = load_config(env=env)
    assert config.network.listen == ("/ip4/127.0.0.1/tcp/1", "/ip4/127.0.0.1/tcp/2")
    assert config.network.bootstrap == (PEER,)
    assert config.network.key_file is None
    assert config.metrics.enabled is False
    assert config.log_level == "debug"
    settings = config.run.strategy_settings
    assert isinstance(settings, DistroConfig) and settings.overlapped
    assert settings.schedule == ScheduleConfig(kind="cosine", total_steps=100)


def test_strategy_switch_from_a_later_source_uses_its_settings_types(tmp_path: Path) -> None:
    path = write(tmp_path, '[run]\nstrategy = "distro"\n')
    config = load_config(path, env={"DISTRO_NODE_RUN__STRATEGY_SETTINGS__BETA1": "0.8"},
                         flags={"run.strategy": "adamw"})
    assert config.run.strategy_settings == AdamWConfig(beta1=0.8)


def test_config_path_from_environment(tmp_path: Path) -> None:
    path = write(tmp_path, "[metrics]\nport = 1234\n")
    assert load_config(env={"DISTRO_NODE_CONFIG": str(path)}).metrics.port == 1234


def test_derived_paths_and_digest() -> None:
    config = NodeConfig(data_dir=Path("/srv/n"))
    assert config.checkpoint_dir == Path("/srv/n/checkpoints")
    assert config.key_file == Path("/srv/n/identity.key")
    assert RunConfig().digest() == RunConfig().digest()
    assert RunConfig().digest() != RunConfig(strategy_settings={"topk": 8}).digest()
    assert RunConfig().digest() != RunConfig(batch_size=9).digest()


BAD_CASES = [
    # (file text, env, flags, field, source fragment, message fragment)
    ("bogus = 1\n", {}, {}, "bogus", "file", "unknown setting"),
    ("[metric]\nport = 1\n", {}, {}, "metric", "file", "unknown table"),
    ("[metrics]\nprot = 1\n", {}, {}, "metrics.prot", "file", "unknown setting"),
    ("[run]\nbatchsize = 1\n", {}, {}, "run.batchsize", "file", "unknown setting"),
    ("[run.data]\nfile = 'x'\n", {}, {}, "run.data.file", "file", "unknown setting"),
    ("[run.strategy_settings]\ntop_k = 4\n", {}, {}, "run.strategy_settings.top_k", "file", "unknown"),
    ("[run.strategy_settings.schedule]\nrate = 1\n", {}, {}, "run.strategy_settings.schedule.rate", "file",
     "unknown"),
    ("[metrics]\nport = 'x'\n", {}, {}, "metrics.port", "file", "must be an integer"),
    ("[metrics]\nport = true\n", {}, {}, "metrics.port", "file", "must be an integer"),
    ("[metrics]\nport = 70000\n", {}, {}, "metrics.port", "file", "must be in [0, 65535], got 70000"),
    ("[network]\nlisten = '/ip4/1.2.3.4/tcp/1'\n", {}, {}, "network.listen", "file", "list of strings"),
    ("[network]\nbootstrap = ['/ip4/1.2.3.4/tcp/1']\n", {}, {}, "network.bootstrap", "file", "/p2p/"),
    ("[run.rounds]\nround_timeout_seconds = 0\n", {}, {}, "run.rounds.round_timeout_seconds", "file",
     "> 0"),
    ("[run]\nmodel = 'huge'\n", {}, {}, "run.model", "file", "unknown model preset"),
    ("[run]\nstrategy = 'sgd'\n", {}, {}, "run.strategy", "file", "must be one of"),
    ("[run]\nseq_len = 4096\n", {}, {}, "run.seq_len", "file", "<= 64"),
    ("[run.strategy_settings.schedule]\nlr = -1.0\n", {}, {}, "run.strategy_settings.schedule.lr", "file",
     "> 0"),
    ("metrics = 3\n", {}, {}, "metrics", "file", "must be a table"),
    ("[run.data]\nkind = 'tokens'\n", {}, {}, "run.data.path", None, "is required"),
    ("device = 'tpu'\n", {}, {}, "device", "file", "must be one of"),
    ("[network]\npayload_fetch = 'torrent'\n", {}, {}, "network.payload_fetch", "file",
     "must be one of pieces, whole, got 'torrent'"),
    ("", {"DISTRO_NODE_METRICS__PORT": "eighty"}, {}, "metrics.port", "env DISTRO_NODE_METRICS__PORT",
     "must be an integer, got 'eighty'"),
    ("", {"DISTRO_NODE_METRICS__PORT": "-1"}, {}, "metrics.port", "env DISTRO_NODE_METRICS__PORT",
     "[0, 65535]"),
    ("", {"DISTRO_NODE_CHECKPOINT__ENABLED": "maybe"}, {}, "checkpoint.enabled", "env", "must be a boolean"),
    ("", {"DISTRO_NODE_RUN__GRAD_CLIP": "nan"}, {}, "run.grad_clip", "env", "finite"),
    ("", {"DISTRO_NODE_RUN__STRATEGY_SETTINGS__TOPK": "many"}, {}, "run.strategy_settings.topk", "env",
     "must be an integer"),
    ("", {"DISTRO_NODE_METRICS__PROT": "1"}, {}, "metrics.prot", "env DISTRO_NODE_METRICS__PROT", "unknown"),
    ("", {"DISTRO_NODE_BOGUS": "1"}, {}, "bogus", "env DISTRO_NODE_BOGUS", "unknown"),
    ("", {"DISTRO_NODE_METRICS___PORT": "1"}, {}, "metrics._port", "env DISTRO_NODE_METRICS___PORT",
     "malformed"),
    ("", {"DISTRO_NODE_RUN": "x"}, {}, "run", "env DISTRO_NODE_RUN", "must be a table"),
    ("", {}, {"metrics.port": "99999"}, "metrics.port", "flag metrics.port", "[0, 65535]"),
    ("", {}, {"metrics.port": 1.5}, "metrics.port", "flag metrics.port", "must be an integer"),
    ("", {}, {"metrics.prot": 1}, "metrics.prot", "flag metrics.prot", "unknown"),
    ("", {}, {"Metrics.Port": 1}, "Metrics.Port", "flag Metrics.Port", "malformed"),
]


@pytest.mark.parametrize(("text", "env", "flags", "field", "source", "message"), BAD_CASES)
def test_bad_config_names_field_and_source(
    tmp_path: Path, text: str, env: dict, flags: dict, field: str, source: str | None, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigFieldError) as info:
        load_config(path, env=env, flags=flags)
    err = info.value
    assert err.field == field
    assert message in str(err)
    assert str(err).startswith(f"{field}: ")
    if source is None:
        assert err.source is None
    else:
        assert err.source is not None and source in err.source
        if source == "file":
            assert str(path) in str(err)
    assert isinstance(err, ConfigLoadError) and isinstance(err, ConfigError)


def test_out_of_range_message_is_exact(tmp_path: Path) -> None:
    with pytest.raises(ConfigFieldError) as info:
        load_config(env={"DISTRO_NODE_METRICS__PORT": "70000"})
    assert str(info.value) == (
        "metrics.port: must be in [0, 65535], got 70000 (from env DISTRO_NODE_METRICS__PORT)"
    )


def test_toml_syntax_error_reports_line(tmp_path: Path) -> None:
    path = write(tmp_path, "[metrics]\nport = 9100\nhost 127.0.0.1\n")
    with pytest.raises(ConfigFileError) as info:
        load_config(path, env={})
    assert info.value.line == 3
    assert "line 3" in str(info.value) and str(path) in str(info.value)


def test_unreadable_file_is_a_file_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigFileError, match="cannot read"):
        load_config(tmp_path / "missing.toml", env={})
    (tmp_path / "bin.toml").write_bytes(b"\xff\xfe = 1")
    with pytest.raises(ConfigFileError, match="UTF-8"):
        load_config(tmp_path / "bin.toml", env={})


def test_direct_construction_validates_too() -> None:
    with pytest.raises(ConfigFieldError, match=r"^metrics.port: must be in \[0, 65535\], got -1$"):
        MetricsConfig(port=-1)
    with pytest.raises(ConfigFieldError, match=r"^run\.strategy_settings\.topk"):
        RunConfig(strategy_settings={"topk": 0})
    with pytest.raises(ConfigFieldError, match=r"^run\.grad_clip: must be a number"):
        RunConfig(grad_clip="1")  # type: ignore[arg-type]

"""`distro-node init`: the file it writes loads back to the config it meant, an existing file is never
replaced without --force, and a bad pre-fill value is refused naming the field, before anything is written."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from distro_node.node.cli.main import build_parser, main
from distro_node.node.config.load import NodeConfig, load_config
from distro_node.optimizer.config import AdamWConfig

PEER = "/ip4/10.0.0.1/tcp/4747/p2p/12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQAJU5SA"


def test_written_file_loads_back_to_the_prefilled_config(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    argv = ["init", str(path), "--preset", "small", "--strategy", "adamw", "--device", "cpu",
            "--bootstrap", PEER, "--listen", "/ip4/0.0.0.0/tcp/5000", "--metrics-port", "0"]
    assert main(argv) == 0
    config = load_config(path, env={})
    assert config.run.model == "small"
    assert config.run.strategy == "adamw"
    assert config.run.strategy_settings == AdamWConfig()  # the chosen strategy's own defaults
    assert config.device == "cpu"
    assert config.network.bootstrap == (PEER,)
    assert config.network.listen == ("/ip4/0.0.0.0/tcp/5000",)
    assert config.metrics.port == 0
    text = path.read_text()
    assert text.startswith("# distro-node configuration.")
    assert "# model preset:" in text  # the field docs are there for the operator
    assert [p.name for p in tmp_path.iterdir()] == ["node.toml"]  # no temp file left behind


def test_default_path_is_distro_node_toml_in_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["init"]) == 0
    assert load_config(tmp_path / "distro-node.toml", env={}) == NodeConfig()
    assert "wrote distro-node.toml" in capsys.readouterr().out


def test_environment_is_not_baked_into_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISTRO_NODE_METRICS__PORT", "9999")
    assert main(["init", str(tmp_path / "a.toml")]) == 0
    assert load_config(tmp_path / "a.toml", env={}).metrics.port == 9400


def test_refuses_to_overwrite_without_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "node.toml"
    path.write_text("# mine, hand edited\n")
    assert main(["init", str(path), "--preset", "small"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: path: ")
    assert "already exists" in err and "--force" in err
    assert path.read_text() == "# mine, hand edited\n"

    assert main(["init", str(path), "--preset", "small", "--force"]) == 0
    assert load_config(path, env={}).run.model == "small"
    assert [p.name for p in tmp_path.iterdir()] == ["node.toml"]


def test_creates_missing_parent_folders(tmp_path: Path) -> None:
    path = tmp_path / "etc" / "distro" / "node.toml"
    assert main(["init", str(path)]) == 0
    assert load_config(path, env={}) == NodeConfig()


@pytest.mark.parametrize(
    ("flags", "field"),
    [
        (["--preset", "7b"], "run.model"),
        (["--strategy", "sgd"], "run.strategy"),
        (["--device", "tpu"], "device"),
        (["--listen", "not-a-multiaddr"], "network.listen"),
        (["--bootstrap", "/ip4/10.0.0.1/tcp/4747"], "network.bootstrap"),
        (["--metrics-port", "70000"], "metrics.port"),
    ],
)
def test_bad_prefill_names_the_field_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], field: str
) -> None:
    path = tmp_path / "node.toml"
    assert main(["init", str(path), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {field}: "), err
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []


def test_bad_preset_lists_the_valid_ones(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", str(tmp_path / "x.toml"), "--preset", "huge"]) == 2
    err = capsys.readouterr().err
    assert "unknown model preset 'huge'" in err and "tiny" in err and "1.2b" in err


def test_a_directory_is_not_a_file_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", str(tmp_path), "--force"]) == 2
    assert "error: path: " in capsys.readouterr().err


def _subparser(name: str) -> argparse.ArgumentParser:
    actions = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return actions[0].choices[name]


@pytest.mark.parametrize("command", ["init", "doctor", "status"])
def test_help_explains_every_flag(command: str) -> None:
    parser = _subparser(command)
    assert parser.description
    for action in parser._actions:
        assert action.help, f"{command} {action.option_strings or action.dest} has no help"

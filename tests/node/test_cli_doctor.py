"""`distro-node doctor` on this CPU machine: the tiny preset is measured, the 1.2B preset is sized without
allocating it, the JSON report has a stable shape, and each kind of problem (no room, an address that is
not on this machine, a broken config, a bad flag) gives the right verdict and exit code."""

from __future__ import annotations

import json
import os
import resource
import socket
from pathlib import Path
from typing import Any

import pytest
import torch
from distro_node.compression.envelope import max_encoded_nbytes
from distro_node.node.cli.main import main
from distro_node.node.doctor.listen import try_bind
from distro_node.node.doctor.memory import estimate
from distro_node.node.doctor.payload import budget
from distro_node.node.doctor.report import FAIL, PASS, STATUSES, WARN
from distro_node.node.model import Llama, param_count
from distro_node.node.presets import preset
from distro_node.optimizer.config import AdamWConfig, DilocoConfig, DistroConfig
from distro_node.optimizer.distro import DisTrO

CHECKS = ["config", "device", "memory", "compute", "payload", "bandwidth", "step_time", "listen",
          "reachability"]
LOOPBACK = ["--listen", "/ip4/127.0.0.1/tcp/0"]


@pytest.fixture(autouse=True)
def _no_ambient_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run where no ./distro-node.toml and no DISTRO_NODE_* variable can change the verdicts."""
    monkeypatch.chdir(tmp_path)
    for name in [k for k in os.environ if k.startswith("DISTRO_NODE_")]:
        monkeypatch.delenv(name)


def doctor_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main(["doctor", "--json", *argv])
    return code, json.loads(capsys.readouterr().out)


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report["checks"]}


def test_tiny_preset_passes_with_a_measured_step(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = doctor_json(capsys, *LOOPBACK)
    checks = by_name(report)
    assert code == 0 and report["ok"] is True
    assert [c["name"] for c in report["checks"]] == CHECKS
    for c in report["checks"]:
        assert set(c) == {"name", "status", "summary", "hint", "details"}
        assert c["status"] in STATUSES and c["summary"]
    assert report["context"]["preset"] == "tiny"
    assert report["context"]["params"] == param_count(preset("tiny"))
    assert report["context"]["device"] == "cpu"
    assert checks["device"]["details"]["chosen"] == "cpu"
    assert checks["memory"]["status"] == PASS
    assert checks["compute"]["details"]["how"] == "measured"
    assert checks["compute"]["details"]["seconds"] > 0
    assert checks["bandwidth"]["status"] == "SKIP"  # opt-in only
    assert checks["listen"]["status"] == WARN  # loopback binds, but only local peers can reach it
    reach = checks["reachability"]["details"]
    assert checks["reachability"]["status"] == PASS  # offline: nothing asked, nothing wrong
    assert reach["listen"] == [{"addr": "/ip4/127.0.0.1/tcp/0", "scope": "loopback"}]
    assert reach["upnp"] == "not tried: listening on loopback only"
    assert reach["verdict"] is None and reach["advertise"] == ["/ip4/127.0.0.1/tcp/0"]
    step = checks["step_time"]["details"]
    added = step["compute_seconds"] + step["communication_seconds"]
    assert step["sequential_seconds"] == pytest.approx(added)


def test_1_2b_is_sized_exactly_without_allocating(capsys: pytest.CaptureFixture[str]) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux: a high-water mark
    code, report = doctor_json(capsys, "--preset", "1.2b", "--memory-gb", "64", *LOOPBACK)
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 1024, f"doctor grew the process by {grown_mib:.0f} MiB: it allocated the model"

    assert code == 0, report
    checks = by_name(report)
    n = 1_204_881_408
    assert report["context"]["params"] == n
    fp32 = checks["memory"]["details"]["fp32"]
    assert fp32["weights_bytes"] == fp32["gradients_bytes"] == 4 * n
    assert fp32["optimizer_state_bytes"] == 4 * n  # DisTrO: one fp32 delta, no AdamW moments
    assert checks["memory"]["details"]["bf16"]["weights_bytes"] == 2 * n
    assert checks["compute"]["details"]["how"] == "estimated"

    with torch.device("meta"):
        spec = DisTrO(Llama(preset("1.2b"), seed=None), DistroConfig()).spec()
    payload = checks["payload"]["details"]
    assert payload["wire_bytes"] == max_encoded_nbytes(spec)
    assert payload["upload_bytes_per_exchange"] == 7 * max_encoded_nbytes(spec)
    assert payload["dense_bf16_bytes"] == 2 * n
    assert 1000 < payload["reduction_vs_dense_bf16"] < 2000


def test_a_preset_that_does_not_fit_fails(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--preset", "1.2b", "--memory-gb", "2", "--compute-seconds", "5", *LOOPBACK]
    code, report = doctor_json(capsys, *argv)
    memory = by_name(report)["memory"]
    assert code == 1 and report["ok"] is False
    assert memory["status"] == FAIL
    assert memory["details"]["available_bytes"] == 2_000_000_000
    assert "does not fit" in memory["hint"]


def test_dense_exchange_over_a_home_uplink_misses_the_deadline(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = doctor_json(
        capsys, "--preset", "1.2b", "--strategy", "adamw", "--memory-gb", "1000", "--compute-seconds", "5",
        *LOOPBACK,
    )
    checks = by_name(report)
    assert code == 1
    assert checks["payload"]["status"] == FAIL
    assert "round_timeout_seconds" in checks["payload"]["hint"]
    assert checks["step_time"]["status"] == WARN


def test_an_address_not_on_this_machine_fails(capsys: pytest.CaptureFixture[str]) -> None:
    # 192.0.2.0/24 is TEST-NET-1: never assigned to a host, so binding fails locally and nothing is sent.
    code, report = doctor_json(capsys, "--listen", "/ip4/192.0.2.1/tcp/0", "--compute-seconds", "1")
    listen = by_name(report)["listen"]
    assert code == 1
    assert listen["status"] == FAIL
    assert "not an address of this machine" in listen["summary"]
    assert "network.listen" in listen["hint"]


def test_a_port_in_use_warns() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        result = try_bind(f"/ip4/127.0.0.1/tcp/{port}", announced=False)
    assert result.status == WARN
    assert "in use" in result.note


def test_a_broken_config_file_fails_and_the_rest_still_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[metrics]\nport = 70000\n")
    code, report = doctor_json(capsys, "--config", str(path), "--compute-seconds", "1", *LOOPBACK)
    checks = by_name(report)
    assert code == 1
    assert checks["config"]["status"] == FAIL
    assert "metrics.port" in checks["config"]["summary"]
    assert [c["name"] for c in report["checks"]] == CHECKS


def test_the_local_distro_node_toml_is_used(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", "--preset", "small"]) == 0
    capsys.readouterr()
    code, report = doctor_json(capsys, "--compute-seconds", "1", *LOOPBACK)
    assert code == 0
    assert report["context"]["preset"] == "small"
    assert report["context"]["config"] == "distro-node.toml"


def test_flags_are_checked_together_with_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # seq_len 100 is too long for the default preset (tiny: 64) but fine for the file's preset (small: 128).
    (tmp_path / "distro-node.toml").write_text('[run]\nmodel = "small"\n')
    code, report = doctor_json(capsys, "--seq-len", "100", "--compute-seconds", "1", *LOOPBACK)
    assert code == 0
    assert (report["context"]["preset"], report["context"]["seq_len"]) == ("small", 100)


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--uplink-mbit", "0"], "--uplink-mbit"),
        (["--memory-gb", "-1"], "--memory-gb"),
        (["--compute-seconds", "nan"], "--compute-seconds"),
        (["--peers", "0"], "--peers"),
        (["--bandwidth-mb", "1000"], "--bandwidth-mb"),
        (["--preset", "7b"], "run.model"),
        (["--seq-len", "4096"], "run.seq_len"),
    ],
)
def test_bad_flags_exit_2_naming_the_field(
    capsys: pytest.CaptureFixture[str], argv: list[str], field: str
) -> None:
    assert main(["doctor", *argv]) == 2
    assert capsys.readouterr().err.startswith(f"error: {field}: ")


def test_text_report(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["doctor", "--compute-seconds", "1", "--listen", "/ip4/192.0.2.1/tcp/0"])
    out = capsys.readouterr().out
    assert code == 1
    assert out.startswith("distro-node doctor: preset tiny")
    assert "\nPASS  memory " in out and "\nFAIL  listen " in out
    assert "-> set network.listen" in out
    assert out.rstrip().endswith("not ready: 1 FAIL, 0 WARN, 9 checks")


@pytest.mark.network
def test_measured_loopback_bandwidth(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = doctor_json(capsys, "--measure-bandwidth", "--bandwidth-mb", "2", "--compute-seconds", "1",
                               *LOOPBACK)
    bandwidth = by_name(report)["bandwidth"]
    assert bandwidth["status"] == PASS, bandwidth
    assert bandwidth["details"]["bytes"] == 2_000_000
    assert bandwidth["details"]["bits_per_second"] > 1e6
    assert code == 0


def test_strategy_state_and_cadence_differ_as_documented() -> None:
    cfg = preset("tiny")
    n = param_count(cfg)
    common = {"batch": 8, "seq": 64, "peers": 4, "payload_bytes": 100}
    assert estimate(cfg, "distro", DistroConfig(), **common).optimizer_state == 4 * n
    assert estimate(cfg, "distro", DistroConfig(overlapped=True), **common).optimizer_state == 8 * n
    assert estimate(cfg, "adamw", AdamWConfig(), **common).optimizer_state == 8 * n
    assert estimate(cfg, "adamw", AdamWConfig(), **common, dtype="bf16").optimizer_state == 4 * n
    assert estimate(cfg, "distro", DistroConfig(), **common).payload_buffers == 400
    diloco = budget(cfg, "diloco", DilocoConfig(inner_steps=16), peers=4, uplink_mbit=10)
    assert diloco.every_steps == 16
    assert diloco.body_bytes == 4 * n  # dense fp32 pseudo-gradient, values only


def test_grad_accum_sizes_one_micro_batch(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """run.batch_size is the step's batch; with grad_accum N only a 1/N slice is in memory at once."""
    argv = ["--preset", "1.2b", "--memory-gb", "64", "--batch-size", "8", "--compute-seconds", "5", *LOOPBACK]
    _, whole = doctor_json(capsys, *argv)
    monkeypatch.setenv("DISTRO_NODE_RUN__GRAD_ACCUM", "4")
    _, split = doctor_json(capsys, *argv)
    act_whole = by_name(whole)["memory"]["details"]["fp32"]["activations_bytes"]
    act_split = by_name(split)["memory"]["details"]["fp32"]["activations_bytes"]
    assert split["context"]["grad_accum"] == 4
    assert act_split * 4 == act_whole

"""`distro-node status` against a real metrics endpoint (NodeMetrics + MetricsServer on a free port): the
values a node observed come back out, in text and JSON, in-process and through the installed command, and a
port nobody serves gives the "is join running?" error with exit code 1."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from distro_node.node.cli.main import main
from distro_node.node.cli.status_scrape import StatusError, parse_status
from distro_node.node.metrics import MetricsServer, NodeMetrics

STEPS = 3


def busy_node() -> NodeMetrics:
    metrics = NodeMetrics()
    for step in range(STEPS):
        phases = {"compute": 0.5, "exchange": 0.2 + 0.1 * step, "apply": 0.01}
        metrics.observe_step(step, 4.0 - step * 0.5, phases, 1000, 7000, tokens=512)
    metrics.set_peers(8)
    metrics.set_trust(2, 6)
    metrics.rejected("duplicate_index")
    metrics.rejected("norm", 2)
    metrics.peer_banned()
    metrics.weights_agreement(7, 8)
    metrics.bandwidth_reduction(2_000_000, 1000)
    metrics.round_closed("complete")
    metrics.round_closed("deadline")
    metrics.set_reachability("private")
    metrics.set_connections({"direct": 1, "punched": 1, "relayed": 2}, 2)
    return metrics


@pytest.fixture
def node_url() -> Iterator[str]:
    with MetricsServer(busy_node().registry, host="127.0.0.1", port=0) as server:
        yield server.url


@pytest.fixture
def dead_url() -> str:
    """A loopback port that was just free: bound, then closed, so nothing answers there."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"


def test_text_status_shows_what_the_node_observed(node_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--url", node_url]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"node at {node_url} (distro-node ")
    lines = {line[:23].strip(): line[23:].strip() for line in out.splitlines()[1:]}  # label column, value
    assert lines["step"] == "2"
    assert lines["loss"] == "3.0000"
    assert lines["trust"] == "a step needs 6 signed votes; safe while at most 2 of 8 peers lie"
    assert lines["peers"] == "8"
    assert lines["tokens trained"] == "1,536"
    assert lines["payload sent"] == "3.00 kB"
    assert lines["payload received"] == "21.00 kB"
    assert lines["step time"] == "810 ms mean over 3 steps"
    assert lines["phases (mean)"] == "compute 500 ms, exchange 300 ms, apply 10 ms"
    assert lines["rounds"] == "complete 1, deadline 1"
    assert lines["rejected payloads"] == "duplicate_index 1, norm 2"
    assert lines["banned peers"] == "1"
    assert lines["weights agreement"] == "87.5% of announcing peers agree"
    assert lines["bandwidth reduction"] == "2,000x less than dense bf16"
    assert lines["reachability"].startswith("private: peers could not dial this node back")
    assert lines["connections"] == "1 direct, 1 punched, 2 relayed; reachable through 2 relay(s)"


def test_json_status(node_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--url", node_url, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["url"] == node_url
    assert doc["step"] == 2 and doc["steps_observed"] == STEPS and doc["loss"] == 3.0
    assert doc["sent_bytes"] == 3000 and doc["received_bytes"] == 21000 and doc["tokens"] == 3 * 512
    assert doc["step_mean_seconds"] == pytest.approx(0.81)
    assert doc["phases"]["exchange"] == {"count": 3, "mean_seconds": pytest.approx(0.3)}
    assert set(doc["phases"]) == {"compute", "exchange", "apply"}  # phases never observed are left out
    assert doc["rejected"] == {"duplicate_index": 1, "norm": 2}
    assert doc["rounds"] == {"complete": 1, "deadline": 1}
    assert doc["banned"] == 1
    assert doc["weights_agreement_ratio"] == pytest.approx(7 / 8)
    assert doc["bandwidth_reduction_ratio"] == 2000
    assert doc["reachability"] == "private"
    assert doc["resident_bytes"] > 0 and doc["started_unix"] > 0


def test_installed_command(node_url: str) -> None:
    exe = Path(sys.executable).parent / "distro-node"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISTRO_NODE_")}
    done = subprocess.run(
        [str(exe), "status", "--url", node_url], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    assert "  step                 2\n" in done.stdout
    assert "rejected payloads    duplicate_index 1, norm 2" in done.stdout


def test_no_node_answering(dead_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--url", dead_url]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"no node answering at {dead_url}: is `distro-node join` running?")
    assert "metrics.port" in err


def test_url_comes_from_the_config(
    tmp_path: Path, node_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    port = node_url.rsplit(":", 1)[1].split("/")[0]
    (tmp_path / "distro-node.toml").write_text(f'[metrics]\nhost = "0.0.0.0"\nport = {port}\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DISTRO_NODE_CONFIG", raising=False)
    assert main(["status"]) == 0  # a wildcard bind is reached through loopback
    assert capsys.readouterr().out.startswith(f"node at http://127.0.0.1:{port}/metrics ")


def test_unreachable_default_names_the_configured_port(
    tmp_path: Path, dead_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    port = dead_url.rsplit(":", 1)[1].split("/")[0]
    config = tmp_path / "node.toml"
    config.write_text(f"[metrics]\nport = {port}\n")
    assert main(["status", "--config", str(config)]) == 1
    assert f"metrics.port={port}" in capsys.readouterr().err


def test_a_fresh_node_has_no_step_yet(capsys: pytest.CaptureFixture[str]) -> None:
    with MetricsServer(NodeMetrics().registry, port=0) as server:
        assert main(["status", "--url", server.url]) == 0
    out = capsys.readouterr().out
    assert "no step completed yet" in out
    assert "weights agreement    not reported yet" in out


@pytest.mark.parametrize("url", ["file:///etc/passwd", "127.0.0.1:9400/metrics", "http:///metrics"])
def test_bad_url_exits_2(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--url", url]) == 2
    assert capsys.readouterr().err.startswith("error: --url: ")


def test_an_endpoint_that_is_not_a_node() -> None:
    with pytest.raises(StatusError, match="no distro_step"):
        parse_status("# TYPE other_metric gauge\nother_metric 1\n")
    with pytest.raises(StatusError, match="not a Prometheus text exposition"):
        parse_status("<html>hello</html>\n")

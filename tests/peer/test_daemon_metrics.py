"""`join` serves /metrics from its config (threats.md/DESIGN.md section 7): each node's exposition passes
`promtool check metrics`, and a real Prometheus scraping a 3-node swarm sees every node's distro_step advance.

Prometheus runs from a config this test writes (static targets on the nodes' loopback ports, 1 s scrapes, its
own data dir under tmp) and is killed by pid like every peer."""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from peer_procs import PeerProc, Procs

pytestmark = [pytest.mark.network, pytest.mark.slow, pytest.mark.timeout(300)]

RUN = ["--preset", "tiny", "--batch-size", "4", "--seq-len", "32", "--round-timeout", "10"]
REQUIRED = ("distro_step", "distro_loss", "distro_peers", "distro_payload_sent_bytes_total",
            "distro_payload_received_bytes_total", "distro_step_phase_seconds_bucket",
            "distro_payloads_rejected_total", "distro_peers_banned_total",
            "distro_weights_hash_agreement_ratio",
            "distro_bandwidth_reduction_ratio", "distro_rounds_total")


def _promtool_module() -> ModuleType:
    module = sys.modules.get("promtool")
    if module is None:
        path = Path(__file__).resolve().parents[1] / "node" / "promtool.py"
        spec = importlib.util.spec_from_file_location("promtool", path)
        if spec is None or spec.loader is None:
            raise ImportError(path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["promtool"] = module
        spec.loader.exec_module(module)
    return module


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def sample(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} missing from /metrics")


@pytest.fixture
def prometheus_proc() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def query(port: int, expr: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    body = json.loads(fetch(url))
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def test_three_nodes_metrics_pass_promtool_and_prometheus_sees_steps_advance(
    procs: Procs, tmp_path: Path, prometheus_proc: list[subprocess.Popen[bytes]]
) -> None:
    promtool = _promtool_module().require_promtool()
    prometheus = _promtool_module().require_prometheus()
    founder = procs.start([*RUN, "--genesis-peers", "3", "--metrics-port", "0"], "peer0")
    command = founder.info()["join_command"]
    peers: list[PeerProc] = [founder]
    peers.append(procs.start_command(command, ["--metrics-port", "0"], "peer1"))
    announce = "/ip4/127.0.0.1/tcp/4999"
    peers.append(procs.start_command(command, ["--metrics-port", "0", "--announce", announce], "peer2"))
    urls = [p.info()["metrics_url"] for p in peers]
    assert all(u and u.startswith("http://127.0.0.1:") for u in urls), urls
    assert peers[2].info()["addrs"][0].startswith(announce + "/p2p/")
    for p in peers:
        p.wait_step(3, 120)

    for p, url in zip(peers, urls, strict=True):
        text = fetch(url)
        for name in REQUIRED:
            sample(text, name)
        assert sample(text, "distro_step") >= 3, p.name
        assert sample(text, "distro_peers") == 3, p.name
        assert sample(text, "distro_bandwidth_reduction_ratio") > 100, p.name
        assert sample(text, "distro_weights_hash_agreement_ratio") == 1.0, p.name
        assert sample(text, "distro_payload_received_bytes_total") > 0, p.name
        done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True,
                              timeout=60, check=False)
        assert done.returncode == 0, f"{p.name}: promtool: {done.stdout}{done.stderr}"

    ports = [int(urllib.parse.urlparse(u).port or 0) for u in urls]
    prom_dir = tmp_path / "prometheus"
    prom_dir.mkdir()
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        prom_port = sock.getsockname()[1]
    targets = ", ".join(f"'127.0.0.1:{port}'" for port in ports)
    (prom_dir / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"scrape_configs:\n  - job_name: distro-node\n    static_configs:\n      - targets: [{targets}]\n")
    log = open(prom_dir / "prometheus.log", "wb")
    prometheus_proc.append(subprocess.Popen(
        [prometheus, f"--config.file={prom_dir / 'prometheus.yml'}",
         f"--storage.tsdb.path={prom_dir / 'data'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=log, stderr=subprocess.STDOUT))
    try:
        first: dict[str, float] = {}
        advanced: set[str] = set()
        deadline = time.monotonic() + 120
        while len(advanced) < len(ports) and time.monotonic() < deadline:
            try:
                rows = query(prom_port, 'distro_step{job="distro-node"}')
            except OSError:
                rows = []
            for row in rows:
                instance, value = row["metric"]["instance"], float(row["value"][1])
                first.setdefault(instance, value)
                if value > first[instance]:
                    advanced.add(instance)
            time.sleep(0.5)  # polling interval of a bounded wait, not synchronisation
        assert advanced == {f"127.0.0.1:{port}" for port in ports}, (first, advanced)
    finally:
        log.close()
    for p in peers:
        p.signal(signal.SIGTERM)
    for p in peers:
        assert p.wait_exit(15) == 0, p.name

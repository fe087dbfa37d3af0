"""docker/compose.yaml run without Docker: each service's command and environment as local processes, and
the real Prometheus with deploy/prometheus/prometheus.yml, to show that the swarm the compose file describes
forms, trains, and is fully scraped.

What is adapted, and only that: addresses (the service names `seed`/`node` become 127.0.0.1 with a distinct
port per process; DNS service discovery becomes static targets carrying the same __meta_dns_name the DNS
discovery would set, so the relabelling is tested unchanged) and container paths (the image's config file,
the seed's secret, per-process data directories). Each process starts through docker/entrypoint.sh, as in the
image. `node` runs as two replicas, the way `--scale node=2` would.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_support import (
    ALERT_RULES,
    COMPOSE_FILE,
    DOCKER,
    PROMETHEUS_CONFIG,
    REPO,
    load_healthcheck,
    load_yaml,
    require_prometheus,
)

pytestmark = [pytest.mark.slow, pytest.mark.network]

NODE_REPLICAS = 2
TARGET_STEP = 3
DEADLINE_SECONDS = 240.0
STOP_SECONDS = 20.0  # compose's stop_grace_period, the unit's TimeoutStopSec
IMAGE_CONFIG = "/etc/distro-node/node.toml"  # DISTRO_NODE_CONFIG in the image; docker/node.toml here
BIN = Path(sys.executable).parent  # distro-node and python, as on the image's PATH


def join_unready_reason() -> str | None:
    """Why the compose swarm cannot run yet, or None. The compose file relies on `distro-node join` reading
    the node config (DISTRO_NODE_* variables, DISTRO_NODE_CONFIG) and serving /metrics from its [metrics]
    table; until the command does both this test skips and says which part is missing."""
    done = subprocess.run([str(BIN / "distro-node"), "join", "--help"], capture_output=True, text=True,
                          timeout=120, check=False)
    if done.returncode != 0:
        detail = done.stderr.strip()[-200:]
        return f"`distro-node join` is not available yet (exit {done.returncode}): {detail}"
    paths = [REPO / "node" / "cli" / "join.py", *REPO.glob("node/peer/*.py")]
    sources = "\n".join(p.read_text() for p in paths)
    missing = [what for what, marker in (("load the node config (load_config)", "load_config"),
                                         ("serve metrics (MetricsServer)", "MetricsServer"))
               if marker not in sources]
    if missing:
        return f"`distro-node join` does not {' or '.join(missing)} yet; docker/compose.yaml needs both"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Proc:
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    metrics_port: int = 0

    def tail(self, lines: int = 25) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return f"--- {self.name} (exit {self.process.poll()}) ---\n" + "\n".join(text.splitlines()[-lines:])


def start(name: str, argv: list[str], env: dict[str, str], tmp_path: Path) -> Proc:
    log = tmp_path / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path,
                                   start_new_session=True)
    return Proc(name, process, log)


def stop(procs: list[Proc]) -> None:
    for proc in procs:
        if proc.process.poll() is None:
            proc.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_SECONDS
    for proc in procs:
        try:
            proc.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.process.kill()
            proc.process.wait(timeout=10)


def service_env(service: dict[str, Any], name: str, p2p: int, metrics: int, tmp_path: Path,
                seed_p2p: int, secrets: dict[str, Path]) -> dict[str, str]:
    """The service's environment plus the image's, with addresses and container paths made local."""
    data_dir = tmp_path / name
    env = {
        "PATH": f"{BIN}:/usr/bin:/bin",
        "HOME": str(data_dir),
        "MPLCONFIGDIR": str(tmp_path / "matplotlib"),
        "CONTAINER_ANNOUNCE_PORT": str(p2p),
        "DISTRO_NODE_CONFIG": str(DOCKER / "node.toml"),
        # Container paths and addresses from docker/node.toml, made local:
        "DISTRO_NODE_DATA_DIR": str(data_dir),
        "DISTRO_NODE_NETWORK__KEY_FILE": str(data_dir / "keys" / "identity.key"),
        "DISTRO_NODE_NETWORK__LISTEN": f"/ip4/127.0.0.1/tcp/{p2p}",
        # The entrypoint would announce the container IP; here every peer is on loopback.
        "DISTRO_NODE_NETWORK__ANNOUNCE_ADDRS": f"/ip4/127.0.0.1/tcp/{p2p}",
        "DISTRO_NODE_METRICS__HOST": "127.0.0.1",
        "DISTRO_NODE_METRICS__PORT": str(metrics),
    }
    for key, value in service.get("environment", {}).items():
        text = str(value)
        if text.startswith("/run/secrets/"):
            text = str(secrets[text.removeprefix("/run/secrets/")])
        env[key] = text.replace("/dns4/seed/tcp/4747/", f"/ip4/127.0.0.1/tcp/{seed_p2p}/")
    return env


def prometheus_config(targets: dict[str, list[int]], prom_port: int, path: Path) -> None:
    config = load_yaml(PROMETHEUS_CONFIG)
    for job in config["scrape_configs"]:
        if job["job_name"] == "distro-node":
            [sd] = job.pop("dns_sd_configs")
            assert sd["port"] == 9400
            job["static_configs"] = [
                {"targets": [f"127.0.0.1:{port}" for port in targets[name]],
                 "labels": {"__meta_dns_name": name}}
                for name in sd["names"]
            ]
        else:
            job["static_configs"] = [{"targets": [f"127.0.0.1:{prom_port}"]}]
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    shutil.copy(ALERT_RULES, path.parent / "alerts.yml")


def query(prom_port: int, expr: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{prom_port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.loads(response.read())
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def values(prom_port: int, expr: str) -> dict[str, float]:
    return {r["metric"].get("instance", ""): float(r["value"][1]) for r in query(prom_port, expr)}


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    stop(started)


def wait_for(what: str, check: Any, procs: list[Proc], deadline: float) -> Any:
    last: Any = None
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.process.poll() is not None:
                pytest.fail(f"{proc.name} exited while waiting for {what}\n" +
                            "\n".join(p.tail() for p in procs))
        try:
            last = check()
        except OSError as exc:  # an endpoint not up yet
            last = exc
        else:
            if last:
                return last
        time.sleep(1.0)
    pytest.fail(f"timed out waiting for {what} (last: {last!r})\n" + "\n".join(p.tail() for p in procs))


@pytest.mark.timeout(DEADLINE_SECONDS + 3 * STOP_SECONDS + 60)
def test_compose_services_form_a_swarm_that_prometheus_scrapes(tmp_path: Path, procs: list[Proc]) -> None:
    reason = join_unready_reason()
    if reason is not None:
        pytest.skip(reason)
    prometheus = require_prometheus()
    deadline = time.monotonic() + DEADLINE_SECONDS
    compose = load_yaml(COMPOSE_FILE)
    services = compose["services"]

    # The seed's secret, at a private copy (0600 as a real secret mount would be readable only by the node).
    secrets: dict[str, Path] = {}
    for name, spec in compose["secrets"].items():
        secrets[name] = tmp_path / "secrets" / name
        secrets[name].parent.mkdir(exist_ok=True)
        shutil.copy(DOCKER / spec["file"], secrets[name])
        secrets[name].chmod(0o600)

    names = ["seed", *(f"node-{i}" for i in range(NODE_REPLICAS))]
    ports = {name: (free_port(), free_port()) for name in names}  # (p2p, metrics)
    seed_p2p = ports["seed"][0]
    entrypoint = ["sh", str(DOCKER / "entrypoint.sh")]
    healthcheck = load_healthcheck()

    for name in names:
        service = services["seed" if name == "seed" else "node"]
        env = service_env(service, name, *ports[name], tmp_path, seed_p2p, secrets)
        proc = start(name, entrypoint + service["command"], env, tmp_path)
        proc.metrics_port = ports[name][1]
        procs.append(proc)
        if name == "seed":
            # depends_on: seed: service_healthy -- the image's health check against the seed's metrics port.
            wait_for("the seed to be healthy", lambda: healthcheck.check(ports["seed"][1]) is None, procs,
                     deadline)

    prom_port = free_port()
    prom_dir = tmp_path / "prometheus"
    prom_dir.mkdir()
    targets = {"seed": [ports["seed"][1]], "node": [ports[n][1] for n in names[1:]]}
    prometheus_config(targets, prom_port, prom_dir / "prometheus.yml")
    argv = [prometheus, f"--config.file={prom_dir / 'prometheus.yml'}",
            f"--storage.tsdb.path={prom_dir / 'data'}", f"--web.listen-address=127.0.0.1:{prom_port}"]
    procs.append(start("prometheus", argv, dict(os.environ), tmp_path))

    everyone = len(names)

    def on_all(expr: str) -> dict[str, float] | None:
        found = values(prom_port, expr)
        return found if len(found) == everyone else None

    wait_for("every node to be scraped", lambda: on_all('up{job="distro-node"} == 1'), procs, deadline)
    roles = {r["metric"]["role"]: float(r["value"][1])
             for r in query(prom_port, 'count by (role) (up{job="distro-node"})')}
    assert roles == {"seed": 1.0, "node": float(NODE_REPLICAS)}
    wait_for("the swarm to form", lambda: on_all(f"distro_peers >= {everyone}"), procs, deadline)
    wait_for(f"every node past step {TARGET_STEP}", lambda: on_all(f"distro_step >= {TARGET_STEP}"), procs,
             deadline)
    # Advancing while Prometheus watches (two scrapes at least), as the dashboard's step-rate query sees it.
    wait_for("the step to advance between scrapes", lambda: on_all("changes(distro_step[5m]) > 0"), procs,
             deadline)
    step_rate = 'rate(distro_step_seconds_count{job="distro-node"}[1m]) > 0'
    wait_for("a positive step rate", lambda: on_all(step_rate), procs, deadline)

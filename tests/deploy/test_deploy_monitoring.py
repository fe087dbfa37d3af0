"""deploy/prometheus and deploy/grafana: Prometheus' own promtool accepts the config, the rules and every
dashboard query; the alert rules behave as their unit tests say; and every metric the dashboard and the rules
read is served by a live node's /metrics (so a renamed metric breaks this test, not a dashboard in
production)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_support import (
    ALERT_RULES,
    ALERT_TESTS,
    DEPLOY,
    PROMETHEUS_CONFIG,
    dashboard_queries,
    grafana_to_promql,
    live_sample_names,
    load_dashboard,
    load_yaml,
    metric_names_in,
    require_promtool,
    rule_expressions,
)

# What the dashboard must show (the panel list), as the metric each panel needs.
DASHBOARD_MUST_READ = {
    "distro_loss",
    "distro_step_seconds_count",  # step rate
    "distro_peers",
    "distro_payload_sent_bytes_total",
    "distro_payload_received_bytes_total",
    "distro_bandwidth_reduction_ratio",
    "distro_payloads_rejected_total",
    "distro_step_phase_seconds_sum",
    "distro_step_phase_seconds_count",
    "distro_step_phase_seconds_bucket",
}
ALERTS_MUST_READ = {"distro_step", "distro_payloads_rejected_total", "distro_peers_banned_total"}


def run_promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([require_promtool(), *args], capture_output=True, text=True, timeout=60,
                          check=False, cwd=cwd)


@pytest.fixture(scope="module")
def live_names() -> set[str]:
    return live_sample_names()


# --- metric names ---------------------------------------------------------------------------------------


def test_name_extraction() -> None:
    """The extractor the checks below rely on: whole names, not label values or parts of other words."""
    expr = ('sum by (reason) (rate(distro_payloads_rejected_total{job="distro_fake", instance=~"$instance"}'
            '[$__rate_interval])) / histogram_quantile(0.9, rate(distro_step_seconds_bucket[5m]))'
            ' + my_distro_other + distro_step')
    assert metric_names_in(expr) == {
        "distro_payloads_rejected_total", "distro_step_seconds_bucket", "distro_step",
    }


def test_live_exporter_serves_the_documented_families(live_names: set[str]) -> None:
    # Sanity of the reference set itself: histograms appear as their samples, counters with _total.
    assert {"distro_step", "distro_loss", "distro_build_info", "distro_step_seconds_bucket",
            "distro_step_phase_seconds_count", "distro_payloads_rejected_total"} <= live_names
    assert "distro_step_seconds" not in live_names


def test_every_metric_in_the_dashboard_exists(live_names: set[str]) -> None:
    used: dict[str, set[str]] = {}
    for where, expr in dashboard_queries(load_dashboard()):
        for name in metric_names_in(expr):
            used.setdefault(name, set()).add(where)
    missing = {name: sorted(places) for name, places in used.items() if name not in live_names}
    assert missing == {}
    assert DASHBOARD_MUST_READ <= set(used), DASHBOARD_MUST_READ - set(used)


def test_every_metric_in_the_alert_rules_and_their_tests_exists(live_names: set[str]) -> None:
    used = {name for _, expr in rule_expressions(load_yaml(ALERT_RULES)) for name in metric_names_in(expr)}
    assert used - live_names == set()
    assert ALERTS_MUST_READ <= used
    # The unit tests must feed the series the rules read, not look-alikes.
    series = {name for test in load_yaml(ALERT_TESTS)["tests"] for s in test["input_series"]
              for name in metric_names_in(s["series"].split("{")[0])}
    assert series - live_names == set()


# --- promtool ---------------------------------------------------------------------------------------------


def test_prometheus_config_passes_promtool(tmp_path: Path) -> None:
    # A copy next to the rules it names (rule_files is relative to the config file), as in the container.
    shutil.copy(PROMETHEUS_CONFIG, tmp_path / "prometheus.yml")
    shutil.copy(ALERT_RULES, tmp_path / "alerts.yml")
    done = run_promtool("check", "config", "prometheus.yml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 rule files found" in done.stdout + done.stderr


def test_prometheus_config_discovers_seed_and_node_replicas_by_dns() -> None:
    config = load_yaml(PROMETHEUS_CONFIG)
    job = next(j for j in config["scrape_configs"] if j["job_name"] == "distro-node")
    [sd] = job["dns_sd_configs"]
    assert sd["type"] == "A" and sd["port"] == 9400 and set(sd["names"]) == {"seed", "node"}
    assert config["rule_files"] == ["alerts.yml"]


def test_alert_rules_pass_promtool() -> None:
    done = run_promtool("check", "rules", str(ALERT_RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    alerts = [rule["alert"] for group in load_yaml(ALERT_RULES)["groups"] for rule in group["rules"]]
    assert {"DistroNodeDown", "DistroNodeNoStepProgress", "DistroNodeHighRejectionRate",
            "DistroPeersBanned"} <= set(alerts)


def test_alert_rules_fire_as_their_unit_tests_expect() -> None:
    done = run_promtool("test", "rules", ALERT_TESTS.name, cwd=ALERT_TESTS.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    tested = {t["alertname"] for test in load_yaml(ALERT_TESTS)["tests"] for t in test["alert_rule_test"]}
    alerts = {rule["alert"] for group in load_yaml(ALERT_RULES)["groups"] for rule in group["rules"]}
    assert tested == alerts, "every alert has a unit test"


def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool has no expression checker, but it parses recording rules: each dashboard query (Grafana
    variables replaced by values of the same type) becomes one."""
    queries = list(dashboard_queries(load_dashboard()))
    rules = [{"record": f"dashboard:query_{i}", "expr": grafana_to_promql(expr)}
             for i, (where, expr) in enumerate(queries) if not expr.startswith("label_values(")]
    assert len(rules) >= 15
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = run_promtool("check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr


# --- Grafana provisioning ----------------------------------------------------------------------------------


def test_dashboard_uses_the_provisioned_data_source() -> None:
    datasources = load_yaml(DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yaml")
    [source] = datasources["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    dashboard = load_dashboard()
    refs: list[Any] = []

    def collect(node: Any) -> None:
        if isinstance(node, dict):
            if "datasource" in node:
                refs.append(node["datasource"])
            for value in node.values():
                collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    collect(dashboard)
    assert refs and all(r == {"type": "prometheus", "uid": source["uid"]} for r in refs), refs
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"


def test_dashboard_provider_points_where_compose_mounts_the_dashboards() -> None:
    provider = load_yaml(DEPLOY / "grafana" / "provisioning" / "dashboards" / "distro-node.yaml")
    [entry] = provider["providers"]
    compose = load_yaml(DEPLOY.parent / "docker" / "compose.yaml")
    mounts = compose["services"]["grafana"]["volumes"]
    assert f"../deploy/grafana/dashboards:{entry['options']['path']}:ro" in mounts
    home = compose["services"]["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{entry['options']['path']}/distro-node.json"

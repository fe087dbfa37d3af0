"""Shared helpers of the deployment tests: paths, YAML loading, PromQL metric-name extraction, the live
exporter's metric names, and Prometheus' tools (from tests/node/promtool.py, which installs or skips)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from distro_node.node.metrics import MetricsServer, NodeMetrics
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
DEPLOY = REPO / "deploy"
SCHEMAS = Path(__file__).resolve().parent / "schemas"
COMPOSE_FILE = DOCKER / "compose.yaml"
DEV_SEED_KEY = DOCKER / "DEV-ONLY-seed-identity.key"
PROMETHEUS_CONFIG = DEPLOY / "prometheus" / "prometheus.yml"
ALERT_RULES = DEPLOY / "prometheus" / "alerts.yml"
ALERT_TESTS = DEPLOY / "prometheus" / "alerts_test.yml"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "distro-node.json"


def load_healthcheck() -> ModuleType:
    """docker/healthcheck.py (a script, not a package module), loaded under a name of its own."""
    spec = importlib.util.spec_from_file_location("distro_docker_healthcheck", DOCKER / "healthcheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def load_yaml_all(path: Path) -> list[Any]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def _load_promtool_module() -> ModuleType:
    # Reuse the module tests/node already imported (it caches the one apt install per session), else load it
    # under the same name so a later import of it shares this copy.
    module = sys.modules.get("promtool")
    if module is not None:
        return module
    path = REPO / "tests" / "node" / "promtool.py"
    spec = importlib.util.spec_from_file_location("promtool", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["promtool"] = module
    spec.loader.exec_module(module)
    return module


def require_promtool() -> str:
    require: Callable[[], str] = _load_promtool_module().require_promtool
    return require()


def require_prometheus() -> str:
    require: Callable[[], str] = _load_promtool_module().require_prometheus
    return require()


# --- PromQL ------------------------------------------------------------------------------------------------

# String literals of PromQL ("...", '...', `...`): label values and regexes, where a distro_ word is data, not
# a metric (e.g. {job="distro_x"}). Removed before looking for names.
_PROMQL_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
# A metric name of ours: starts with distro_, not preceded by an identifier character (so a label such as
# my_distro_x does not count) and taken whole (distro_step_seconds_bucket, not distro_step).
_DISTRO_NAME = re.compile(r"(?<![A-Za-z0-9_:])distro_[A-Za-z0-9_:]*")
# Grafana's variables are not PromQL; each is replaced by something of the same type before parsing.
_GRAFANA_VARS = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h", "$instance": ".*"}


def metric_names_in(expr: str) -> set[str]:
    """Every distro_ metric name an expression reads."""
    return set(_DISTRO_NAME.findall(_PROMQL_STRING.sub('""', expr)))


def grafana_to_promql(expr: str) -> str:
    for variable, value in sorted(_GRAFANA_VARS.items(), key=lambda item: -len(item[0])):
        expr = expr.replace(variable, value)
    if "$" in expr:
        raise AssertionError(f"unknown Grafana variable in {expr!r}")
    return expr


def dashboard_queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, expression) for every panel target and every templating query of a dashboard JSON."""

    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in items:
            yield panel
            yield from panels(panel.get("panels", []))  # panels nested in collapsed rows

    for panel in panels(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            if "expr" in target:
                yield f"panel {panel.get('title')!r} target {target.get('refId')}", target["expr"]
    for variable in dashboard.get("templating", {}).get("list", []):
        query = variable.get("query")
        text = query.get("query") if isinstance(query, dict) else query
        if isinstance(text, str) and text:
            yield f"variable {variable.get('name')!r}", text


def rule_expressions(rules_file: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for group in rules_file.get("groups", []):
        for rule in group.get("rules", []):
            name = rule.get("alert") or rule.get("record")
            yield f"rule {name!r}", str(rule["expr"])


def load_dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


# --- the live exporter -------------------------------------------------------------------------------------


def live_sample_names() -> set[str]:
    """Names of every series a node's /metrics serves, read over HTTP from the node's own exporter
    (NodeMetrics + MetricsServer): the same code path a scrape of the daemon takes. Sample names are the
    queryable ones (distro_x_total, distro_x_bucket/_sum/_count, distro_build_info); a histogram's bare
    family name is deliberately absent, since PromQL cannot select it."""
    metrics = NodeMetrics()
    with MetricsServer(metrics.registry, port=0) as server:
        with urllib.request.urlopen(server.url, timeout=10) as response:
            text = response.read().decode()
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}

"""deploy/kubernetes: every core object validates against the Kubernetes 1.37 JSON schemas (strict: unknown
fields are errors; pinned from kubernetes-validate, see schemas/README.md), the ServiceMonitor (a CRD, with
no schema in any offline source) against a hand-written structural schema, and the objects agree with each
other and with the node: selectors, port names, ConfigMap keys, the config the pods will load."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from deploy_support import ALERT_RULES, DEPLOY, DEV_SEED_KEY, DOCKER, SCHEMAS, load_yaml, load_yaml_all
from distro_node.node.config.load import load_config
from distro_node.protocol.identity import load_identity, peer_id_of
from referencing import Registry, Resource

K8S = DEPLOY / "kubernetes"
K8S_SCHEMAS = SCHEMAS / "kubernetes" / "v1.37.0-local-strict"
NOT_CORE = {"kustomization.yaml", "servicemonitor.yaml"}

# The Prometheus Operator's ServiceMonitor, reduced to the fields this repository uses plus their common
# siblings. Written from the operator's API documentation (monitoring.coreos.com/v1); no package on the
# registries this project may use ships the CRD's schema. Unknown endpoint fields are errors here because a
# typo there is silently pruned by the API server and the scrape setting silently lost.
_DURATION = {"type": "string", "pattern": r"^(0|([0-9]+(ms|s|m|h))+)$"}
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}
SERVICE_MONITOR_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 253},
                "namespace": {"type": "string"},
                "labels": _LABELS,
                "annotations": _LABELS,
            },
        },
        "spec": {
            "type": "object",
            "required": ["selector", "endpoints"],
            "additionalProperties": False,
            "properties": {
                "jobLabel": {"type": "string"},
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"matchLabels": _LABELS, "matchExpressions": {"type": "array"}},
                },
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "any": {"type": "boolean"},
                        "matchNames": {"type": "array", "items": {"type": "string"}},
                    },
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "targetPort": {"type": ["string", "integer"]},
                            "path": {"type": "string", "pattern": "^/"},
                            "scheme": {"enum": ["http", "https"]},
                            "interval": _DURATION,
                            "scrapeTimeout": _DURATION,
                            "honorLabels": {"type": "boolean"},
                            "relabelings": {"type": "array"},
                            "metricRelabelings": {"type": "array"},
                        },
                        "oneOf": [{"required": ["port"]}, {"required": ["targetPort"]}],
                    },
                },
            },
        },
    },
}


def objects() -> list[tuple[str, dict[str, Any]]]:
    return [(path.name, doc) for path in sorted(K8S.glob("*.yaml")) for doc in load_yaml_all(path)]


def core_objects() -> list[tuple[str, dict[str, Any]]]:
    return [(name, doc) for name, doc in objects() if name not in NOT_CORE]


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for _, doc in objects() if doc["kind"] == kind]


def schema_file(doc: dict[str, Any]) -> Path:
    """kubernetes-validate's naming: <kind>-<group prefix>-<version>.json, no group for the core API."""
    group, _, version = doc["apiVersion"].rpartition("/")
    group = group.split(".")[0]
    return K8S_SCHEMAS / f"{doc['kind'].lower()}-{group + '-' if group else ''}{version}.json"


@pytest.fixture(scope="module")
def registry() -> Registry:
    definitions = json.loads((K8S_SCHEMAS / "_definitions.json").read_text())
    # The kind schemas reference "/api/_definitions.json#/$defs/...", resolved against their own $id
    # (https://kubernetes.io/api/...): registering the definitions under their $id makes that offline.
    return Registry().with_resource(definitions["$id"], Resource.from_contents(definitions))


def k8s_errors(doc: dict[str, Any], registry: Registry) -> list[str]:
    schema = json.loads(schema_file(doc).read_text())
    validator = jsonschema.Draft202012Validator(schema, registry=registry)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


@pytest.mark.parametrize(("name", "doc"), core_objects(), ids=[n for n, _ in core_objects()])
def test_manifest_matches_the_kubernetes_schema(name: str, doc: dict[str, Any], registry: Registry) -> None:
    assert schema_file(doc).exists(), f"{name}: no pinned schema for {doc['apiVersion']} {doc['kind']}"
    assert k8s_errors(doc, registry) == []


def test_the_kinds_this_directory_needs_are_all_there() -> None:
    kinds = sorted(doc["kind"] for _, doc in objects())
    assert kinds == ["ConfigMap", "Kustomization", "Namespace", "Service", "ServiceMonitor", "StatefulSet",
                     "StatefulSet"]


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d["spec"].update(replicas="4"), "'4' is not of type"),
        (lambda d: d["spec"]["template"]["spec"]["containers"][0].update(imagePullPolicyy="Always"),
         "imagePullPolicyy"),
        (lambda d: d["spec"].pop("selector"), "'selector' is a required property"),
    ],
    ids=["wrong-type", "unknown-field", "missing-required"],
)
def test_the_schema_check_catches_mistakes(registry: Registry, mutate: Any, expected: str) -> None:
    broken = copy.deepcopy(next(d for d in by_kind("StatefulSet") if d["metadata"]["name"] == "distro-node"))
    mutate(broken)
    found = k8s_errors(broken, registry)
    assert any(expected in message for message in found), found


def test_service_monitor_structure() -> None:
    [monitor] = by_kind("ServiceMonitor")
    jsonschema.Draft202012Validator.check_schema(SERVICE_MONITOR_SCHEMA)
    validator = jsonschema.Draft202012Validator(SERVICE_MONITOR_SCHEMA)
    assert [e.message for e in validator.iter_errors(monitor)] == []
    typo = copy.deepcopy(monitor)
    typo["spec"]["endpoints"][0]["intervall"] = "15s"
    assert any("intervall" in e.message for e in validator.iter_errors(typo))


def test_service_monitor_selects_the_service_and_its_metrics_port() -> None:
    [monitor], [service] = by_kind("ServiceMonitor"), by_kind("Service")
    labels = service["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    ports = {p["name"] for p in service["spec"]["ports"]}
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports
    # The operator names the scrape job after the Service; the alert rules select job="distro-node".
    assert service["metadata"]["name"] == "distro-node"
    assert 'job="distro-node"' in ALERT_RULES.read_text()


def test_kustomization_lists_every_core_manifest() -> None:
    kustomization = load_yaml(K8S / "kustomization.yaml")
    files = {p.name for p in K8S.glob("*.yaml")} - NOT_CORE
    assert set(kustomization["resources"]) == files


def test_statefulsets_service_and_configmap_agree() -> None:
    [service], [configmap] = by_kind("Service"), by_kind("ConfigMap")
    assert service["spec"]["clusterIP"] == "None", "headless: stable per-pod DNS names"
    service_ports = {p["name"]: p for p in service["spec"]["ports"]}
    selectors = []
    for sts in by_kind("StatefulSet"):
        name = sts["metadata"]["name"]
        template = sts["spec"]["template"]
        labels = template["metadata"]["labels"]
        selectors.append(tuple(sorted(sts["spec"]["selector"]["matchLabels"].items())))
        assert sts["spec"]["selector"]["matchLabels"].items() <= labels.items(), name
        assert service["spec"]["selector"].items() <= labels.items(), name
        assert sts["spec"]["serviceName"] == service["metadata"]["name"], name
        pod = template["spec"]
        [container] = pod["containers"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        for port in service_ports.values():
            assert ports[port["targetPort"]] == port["port"], (name, port)
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert container[probe]["httpGet"]["port"] in ports, (name, probe)
        assert template["metadata"]["annotations"]["prometheus.io/port"] == str(ports["metrics"])
        # The image's user (docker/Dockerfile), so the volume's fsGroup ownership matches.
        uid = re.search(r"ARG UID=(\d+)", (DOCKER / "Dockerfile").read_text())
        assert uid is not None and pod["securityContext"]["runAsUser"] == int(uid.group(1)), name
        for volume in pod["volumes"]:
            if "configMap" in volume:
                assert volume["configMap"]["name"] == configmap["metadata"]["name"]
                assert {i["key"] for i in volume["configMap"]["items"]} <= set(configmap["data"])
        for env in container["env"]:
            ref = env.get("valueFrom", {}).get("configMapKeyRef")
            if ref:
                assert ref["name"] == configmap["metadata"]["name"] and ref["key"] in configmap["data"]
    assert len(set(selectors)) == len(selectors), "two StatefulSets must not select each other's pods"


def pod_config(sts: dict[str, Any], tmp_path: Path) -> Any:
    """The config a pod of ``sts`` loads: the ConfigMap's file plus the container's environment, with the
    values Kubernetes fills in (pod IP, ConfigMap keys) substituted as it would."""
    [configmap] = by_kind("ConfigMap")
    data = dict(configmap["data"])
    # The shipped placeholder stands for a real peer id; use the dev key's so the address parses.
    data["bootstrap"] = data["bootstrap"].replace(
        "REPLACE_WITH_SEED_PEER_ID", peer_id_of(load_identity(DEV_SEED_KEY)).to_base58()
    )
    config_path = tmp_path / "node.toml"
    config_path.write_text(data["node.toml"])
    env: dict[str, str] = {}
    for item in sts["spec"]["template"]["spec"]["containers"][0]["env"]:
        if "value" in item:
            env[item["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], item["value"])
        elif "fieldRef" in item["valueFrom"]:
            assert item["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
            env[item["name"]] = "10.244.1.7"
        else:
            env[item["name"]] = data[item["valueFrom"]["configMapKeyRef"]["key"]]
    assert env.pop("DISTRO_NODE_CONFIG") == "/etc/distro-node/config/node.toml"
    return load_config(config_path, env=env)


@pytest.mark.parametrize("name", ["distro-node-seed", "distro-node"])
def test_pods_load_a_valid_node_config(name: str, tmp_path: Path) -> None:
    sts = next(d for d in by_kind("StatefulSet") if d["metadata"]["name"] == name)
    config = pod_config(sts, tmp_path)
    assert config.network.announce_addrs == ("/ip4/10.244.1.7/tcp/4747",)
    assert config.metrics.host == "0.0.0.0" and config.metrics.port == 9400
    mounts = {m["mountPath"] for m in sts["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]}
    assert str(config.data_dir) in mounts, "the identity and checkpoints must be on the pod's volume"
    assert config.key_file.parent == config.data_dir
    if name == "distro-node":
        [bootstrap] = config.network.bootstrap
        assert bootstrap.startswith("/dns4/distro-node-seed-0.distro-node/tcp/4747/p2p/")
    else:
        assert config.network.bootstrap == ()

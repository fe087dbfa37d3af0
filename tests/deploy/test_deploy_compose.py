"""docker/compose.yaml: valid against the Compose Specification schema (pinned, see schemas/README.md), and
consistent with the rest of the repository: the seed's committed dev key is the peer id the nodes bootstrap
from, every DISTRO_NODE_* variable is accepted by the node's own config loader, mounted files exist."""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from deploy_support import COMPOSE_FILE, DEV_SEED_KEY, DOCKER, SCHEMAS, load_yaml
from distro_node.node.config.load import ENV_PREFIX, load_config
from distro_node.protocol.addrs import split_peer_addr
from distro_node.protocol.identity import load_identity, peer_id_of

COMPOSE_SCHEMA = SCHEMAS / "compose_spec.json"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = load_yaml(COMPOSE_FILE)
    return data


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    schema = json.loads(COMPOSE_SCHEMA.read_text())
    # The file declares "http://json-schema.org/draft/2019-09/schema#", an id jsonschema does not map to a
    # draft (it knows the https form), so the draft is chosen explicitly instead of guessed.
    jsonschema.Draft201909Validator.check_schema(schema)
    return jsonschema.Draft201909Validator(schema)


def errors(validator: jsonschema.protocols.Validator, document: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
            for e in validator.iter_errors(document)]


def test_compose_file_matches_the_compose_specification(validator: jsonschema.protocols.Validator,
                                                        compose: dict[str, Any]) -> None:
    assert errors(validator, compose) == []


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda c: c["services"]["node"].update(imagee="x"), "imagee"),
        (lambda c: c["services"]["node"]["depends_on"]["seed"].update(condition="healthy"), "healthy"),
        (lambda c: c["services"]["seed"].update(stop_grace_period=20), "20"),
        (lambda c: c.update(volume={}), "volume"),
    ],
    ids=["unknown-service-key", "bad-depends-on-condition", "wrong-type", "unknown-top-level-key"],
)
def test_the_schema_check_catches_mistakes(validator: jsonschema.protocols.Validator, compose: dict[str, Any],
                                           mutate: Any, expected: str) -> None:
    """The pinned schema is strict enough to be worth running: typical slips fail it."""
    broken = copy.deepcopy(compose)
    mutate(broken)
    found = errors(validator, broken)
    assert found and any(expected in message for message in found), found


def test_services_and_the_scaling_contract(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"seed", "node", "prometheus", "grafana"} <= set(services)
    node = services["node"]
    # `--scale node=N` fails on fixed container names or host ports, and replicas sharing one named volume
    # would share one identity key (hence one peer id).
    assert "container_name" not in node and "ports" not in node
    assert not [v for v in node.get("volumes", []) if not str(v).startswith("/")], node.get("volumes")
    assert node["depends_on"]["seed"]["condition"] == "service_healthy"
    for name in ("seed", "node"):
        assert services[name]["build"] == {"context": "..", "dockerfile": "docker/Dockerfile"}
    assert node["command"] == ["join"]
    # The seed founds the run and waits for a genesis cohort, so the first replicas start together.
    assert services["seed"]["command"][:1] == ["join"] and "--genesis-peers" in services["seed"]["command"]


def test_seed_identity_is_the_peer_id_nodes_bootstrap_from(compose: dict[str, Any]) -> None:
    services = compose["services"]
    secret_file = DOCKER / compose["secrets"]["seed_identity"]["file"]
    assert secret_file.resolve() == DEV_SEED_KEY.resolve()
    assert "seed_identity" in services["seed"]["secrets"]
    assert services["seed"]["environment"]["DISTRO_NODE_NETWORK__KEY_FILE"] == "/run/secrets/seed_identity"
    seed_id = peer_id_of(load_identity(DEV_SEED_KEY))
    bootstrap = services["node"]["environment"]["DISTRO_NODE_NETWORK__BOOTSTRAP"]
    peer_id, transport = split_peer_addr(bootstrap)
    assert peer_id == seed_id
    # The seed's service name and the port it listens on (docker/node.toml).
    assert str(transport) == "/dns4/seed/tcp/4747"


@pytest.mark.parametrize("service", ["seed", "node"])
def test_service_environment_is_a_valid_node_config(compose: dict[str, Any], service: str) -> None:
    """The node's own loader accepts the image's config file plus the service's environment: a misspelt
    DISTRO_NODE_* variable is a start-up error (unknown key), caught here instead of in a container."""
    env = {key: str(value) for key, value in compose["services"][service]["environment"].items()}
    config = load_config(DOCKER / "node.toml", env=env)
    assert config.metrics.host == "0.0.0.0" and config.metrics.port == 9400
    assert any(key.startswith(ENV_PREFIX) for key in env)
    if service == "node":
        assert len(config.network.bootstrap) == 1
    else:
        assert config.network.bootstrap == () and str(config.key_file) == "/run/secrets/seed_identity"


def test_only_the_founder_sets_run_settings(compose: dict[str, Any]) -> None:
    """Joiners take the run from the manifest the seed serves; run settings on a node would be ignored at
    best and would suggest a second source of truth."""
    assert any(k.startswith("DISTRO_NODE_RUN__") for k in compose["services"]["seed"]["environment"])
    assert not any(k.startswith("DISTRO_NODE_RUN__") for k in compose["services"]["node"]["environment"])


def test_mounted_files_exist(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = str(volume).split(":", 1)[0]
            if source.startswith("."):
                assert (DOCKER / source).exists(), f"{name}: {source}"


def test_dev_seed_key_is_labelled() -> None:
    # The name says what it is wherever it is seen (a listing, a mount, a leak report).
    assert "DEV-ONLY" in DEV_SEED_KEY.name
    assert "DEV-ONLY" in COMPOSE_FILE.read_text()


def test_make_seed_key_creates_then_rereads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Run in-process: the script is a thin main() over the daemon's identity code, and a subprocess per call
    # would spend seconds importing libp2p.
    spec = importlib.util.spec_from_file_location("make_seed_key", DOCKER / "make-seed-key.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)

    def run(*argv: str) -> tuple[int, dict[str, str], str]:
        code = script.main(list(argv))
        out = capsys.readouterr()
        return code, dict(line.split("=", 1) for line in out.out.split()), out.err

    key = tmp_path / "keys" / "seed.key"
    code1, out1, _ = run(str(key), "--host", "10.1.2.3")
    code2, out2, _ = run(str(key))
    assert code1 == code2 == 0
    assert out1["peer_id"] == out2["peer_id"] == peer_id_of(load_identity(key)).to_base58()
    assert out1["bootstrap"] == f"/ip4/10.1.2.3/tcp/4747/p2p/{out1['peer_id']}"
    assert out2["bootstrap"] == f"/dns4/seed/tcp/4747/p2p/{out1['peer_id']}"
    assert key.stat().st_mode & 0o077 == 0
    code, _, err = run(str(tmp_path))
    assert code == 2 and "is a directory" in err


def test_pinned_schema_is_the_one_the_readme_names() -> None:
    """The schema is a copied data file: it must stay byte-identical to the package's (schemas/README.md)."""
    digest = hashlib.sha256(COMPOSE_SCHEMA.read_bytes()).hexdigest()
    assert digest in (SCHEMAS / "README.md").read_text()

"""docker-compose.yml, the Dockerfile and the lock file, checked without a Docker engine.

The compose file is validated against the Compose Specification's JSON schema (vendored in
deploy/compose-spec.schema.json, see its NOTICE), and its wiring is checked: KRaft Kafka, Redis
with AOF, the one-shot topic initialiser, two workers, the trainer loop, Prometheus under a
profile, and every LOOKAROUND_* variable a real Settings field. tests/test_deploy_wiring.py runs
its commands.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from deploy import constraints
from streams.settings import ENV_PREFIX, Settings

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
SPEC = ROOT / "deploy" / "compose-spec.schema.json"
SETTINGS_ENV = {ENV_PREFIX + name.upper() for name in Settings.model_fields}
REFRESH = re.compile(
    r"lookaround replay-topic --out (\S+) && lookaround train \1 --registry (\S+)$"
)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def lookaround_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: svc
        for name, svc in compose["services"].items()
        if svc.get("image", "").startswith("lookaround")
    }


def workers(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: svc
        for name, svc in lookaround_services(compose).items()
        if svc.get("command") == ["worker"]
    }


def test_compose_file_follows_the_compose_specification(compose: dict[str, Any]) -> None:
    schema = json.loads(SPEC.read_text())
    validator = jsonschema.Draft7Validator(schema)
    errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(compose)]
    assert not errors, errors
    # ... and the schema is effective: a typo is caught.
    bad = json.loads(json.dumps(compose))
    bad["services"]["redis"]["restrat"] = "always"
    assert list(validator.iter_errors(bad))


def test_vendored_schema_is_the_noted_file() -> None:
    notice = (ROOT / "deploy" / "compose-spec.schema.NOTICE").read_text()
    digest = hashlib.sha256(SPEC.read_bytes()).hexdigest()
    assert f"sha256 {digest}" in notice
    assert "Apache License 2.0" in notice


def test_kafka_runs_kraft_single_node(compose: dict[str, Any]) -> None:
    kafka = compose["services"]["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    env = kafka["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert not [k for k in env if "ZOOKEEPER" in k]
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"{env['KAFKA_NODE_ID']}@kafka:9093"
    assert len(base64.urlsafe_b64decode(env["CLUSTER_ID"] + "==")) == 16
    listeners = dict(item.split("://", 1) for item in env["KAFKA_ADVERTISED_LISTENERS"].split(","))
    assert listeners["PLAINTEXT"] == "kafka:9092"
    host_port = listeners["EXTERNAL"].rsplit(":", 1)[1]
    assert f"{host_port}:{host_port}" in kafka["ports"]
    assert "healthcheck" in kafka
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == 1


def test_redis_persists_with_aof(compose: dict[str, Any]) -> None:
    redis = compose["services"]["redis"]
    assert redis["image"].split(":")[0] == "redis"
    command = redis["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert any(v.split(":")[1] == "/data" for v in redis["volumes"])
    assert redis["healthcheck"]["test"][-1] == "ping"


def test_third_party_images_are_pinned(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        image = svc["image"]
        if image.startswith("lookaround"):
            assert svc["build"]["context"] == "."
            continue
        assert re.search(r":[0-9v][\w.-]*$", image), f"{name}: pin a version, not {image}"


def test_topics_is_a_one_shot_after_kafka(compose: dict[str, Any]) -> None:
    topics = compose["services"]["topics"]
    assert topics["command"] == ["topics"]
    assert topics["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert topics["restart"] == "no"


def test_two_workers_with_distinct_ids(compose: dict[str, Any]) -> None:
    found = workers(compose)
    assert len(found) >= 2
    ids = [svc["environment"]["LOOKAROUND_WORKER_ID"] for svc in found.values()]
    assert len(set(ids)) == len(ids)
    host_ports = [p.split(":")[0] for svc in found.values() for p in svc.get("ports", [])]
    assert len(set(host_ports)) == len(host_ports)
    for svc in found.values():
        assert svc["depends_on"]["topics"]["condition"] == "service_completed_successfully"
        assert svc["depends_on"]["redis"]["condition"] == "service_healthy"


def test_trainer_refreshes_into_the_registry_the_workers_read(compose: dict[str, Any]) -> None:
    trainer = compose["services"]["trainer"]
    env = trainer["environment"]
    match = REFRESH.search(env["BATCH_REFRESH"])
    assert match, env["BATCH_REFRESH"]
    registry = match.group(2)
    assert registry == env["LOOKAROUND_REGISTRY_DIR"]
    loop = trainer["command"][0]
    assert '"$$BATCH_REFRESH"' in loop and "while" in loop and "sleep" in loop
    int(env["BATCH_REFRESH_INTERVAL"])

    def volume_at(svc: dict[str, Any], path: str) -> str:
        (volume,) = [v.split(":")[0] for v in svc["volumes"] if v.split(":")[1] == path]
        return volume

    shared = volume_at(trainer, registry)
    assert shared in compose["volumes"]
    for svc in workers(compose).values():
        assert svc["environment"]["LOOKAROUND_REGISTRY_DIR"] == registry
        assert volume_at(svc, registry) == shared


def test_prometheus_is_optional_and_scrapes_every_worker(compose: dict[str, Any]) -> None:
    prometheus = compose["services"]["prometheus"]
    assert prometheus["profiles"] == ["monitoring"]
    (mount,) = prometheus["volumes"]
    config = yaml.safe_load((ROOT / mount.split(":")[0]).read_text())
    targets = {
        t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]
    }
    for name, svc in workers(compose).items():
        port = svc["environment"].get(
            "LOOKAROUND_WEB_PORT", Settings.model_fields["web_port"].default
        )
        assert f"{name}:{port}" in targets
    assert {job["metrics_path"] for job in config["scrape_configs"]} == {"/metrics"}


def test_every_lookaround_variable_is_a_setting(compose: dict[str, Any], monkeypatch) -> None:
    for name, svc in lookaround_services(compose).items():
        env = {k: str(v) for k, v in svc["environment"].items()}
        unknown = {k for k in env if k.startswith(ENV_PREFIX)} - SETTINGS_ENV
        assert not unknown, f"{name}: not Settings fields: {sorted(unknown)}"
        for key in list(os.environ):
            if key.startswith(ENV_PREFIX):
                monkeypatch.delenv(key)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        settings = Settings()
        assert settings.kafka_bootstrap == env["LOOKAROUND_KAFKA_BOOTSTRAP"]
    dockerfile_env = re.findall(r"\b(LOOKAROUND_[A-Z_]+)=", (ROOT / "Dockerfile").read_text())
    assert set(dockerfile_env) <= SETTINGS_ENV


def test_shell_commands_escape_dollars_for_compose(compose: dict[str, Any]) -> None:
    """A lone `$` would be interpolated by compose at parse time, not by the container's sh."""
    for name, svc in compose["services"].items():
        for part in [*svc.get("command", []), *svc.get("entrypoint", [])]:
            assert "$" not in str(part).replace("$$", ""), name


# -- the image ------------------------------------------------------------------------------


def _instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_is_multi_stage_slim_non_root_with_healthcheck() -> None:
    steps = _instructions()
    args = {rest.split("=", 1)[0]: rest.split("=", 1)[1] for word, rest in steps if word == "ARG"}
    stages = [rest for word, rest in steps if word == "FROM"]
    assert len(stages) >= 2
    base = args["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", base)
    assert all(s.startswith("${PYTHON_IMAGE}") for s in stages)
    final = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    runtime = steps[final:]
    user = [rest for word, rest in runtime if word == "USER"]
    assert user and user[-1].split(":")[0] not in ("root", "0")
    assert [rest for word, rest in runtime if word == "COPY" and "--from=build" in rest]
    healthcheck = " ".join(rest for word, rest in runtime if word == "HEALTHCHECK")
    assert "/health" in healthcheck and "LOOKAROUND_WEB_PORT" in healthcheck
    assert ("ENTRYPOINT", '["lookaround"]') in runtime
    assert ("CMD", '["worker"]') in runtime
    build = " ".join(rest for word, rest in steps[:final])
    assert "-r constraints.txt" in build and "--constraint constraints.txt" in build
    # the compiled kernels are built there: setup.py and the vendored header come along
    assert "setup.py" in build and "build-essential" in build
    assert "build-essential" not in " ".join(rest for _, rest in runtime)


def test_dockerfile_copies_every_package_and_dockerignore_keeps_them() -> None:
    import tomllib

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {
        p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    }
    copied = {
        rest.split()[0] for word, rest in _instructions() if word == "COPY" and "--from" not in rest
    }
    assert packages <= copied
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".git", "runs", "tests"} <= ignored
    assert not (packages | {"pyproject.toml", "README.md", "constraints.txt"}) & ignored


def test_constraints_pin_every_runtime_dependency() -> None:
    problems = constraints.problems()
    assert not problems, f"{problems}: regenerate with python -m deploy.constraints"
    pins = constraints.read_pins()
    assert all(re.fullmatch(r"[0-9][\w.+!-]*", v) for v in pins.values())
    assert "pytest" not in pins  # dev tools stay out of the image

"""The Helm chart (charts/lookaround), tested without a helm binary.

The chart is rendered by deploy/helmrender: Go's text/template with sprig, the engine and the
function library Helm uses, plus Helm's own functions (toYaml, include, tpl, required, fail).
It is built once per test session from the Debian packages golang-go,
golang-github-masterminds-sprig-dev and golang-k8s-sigs-yaml-dev (GOPATH mode, offline; .ci/run
installs them). Every rendered manifest is validated against the Kubernetes schemas of a pinned
version (kubernetes-validate), and the wiring between them is checked: labels, selectors, secrets
only by reference, probes, the registry volume, the HPA target, the trainer's command.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from streams.settings import ENV_PREFIX, Settings

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "lookaround"
RENDERER_SRC = ROOT / "deploy" / "helmrender" / "main.go"
KUBE_VERSION = "1.31.0"  # the Kubernetes version every manifest is validated against
GOPATH_SYSTEM = "/usr/share/gocode"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
SETTINGS_ENV = {ENV_PREFIX + name.upper() for name in Settings.model_fields}
STANDARD_LABELS = (
    "helm.sh/chart",
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
)


# -- the renderer ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def helmrender(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build deploy/helmrender once per session (into a temp dir) and return the binary."""
    go = shutil.which("go")
    if go is None:
        pytest.skip("Go toolchain not installed (apt-get install golang-go; .ci/run does this)")
    sprig = Path(GOPATH_SYSTEM, "src", "github.com", "Masterminds", "sprig")
    k8s_yaml = Path(GOPATH_SYSTEM, "src", "sigs.k8s.io", "yaml")
    if not (sprig.is_dir() and k8s_yaml.is_dir()):
        pytest.skip(
            "Go sources of sprig / sigs.k8s.io/yaml missing (apt-get install "
            "golang-github-masterminds-sprig-dev golang-k8s-sigs-yaml-dev; .ci/run does this)"
        )
    work = tmp_path_factory.mktemp("helmrender")
    binary = work / "helmrender"
    env = {
        **os.environ,
        "GO111MODULE": "off",
        "GOPATH": f"{work / 'gopath'}:{GOPATH_SYSTEM}",
        "GOCACHE": str(work / "gocache"),
        "GOFLAGS": "",
        "CGO_ENABLED": "0",
    }
    proc = subprocess.run(
        [go, "build", "-o", str(binary), str(RENDERER_SRC)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"building the renderer failed:\n{proc.stderr}"
    return binary


def _run(helmrender: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helmrender), *map(str, args)], capture_output=True, text=True, timeout=120
    )


def render(helmrender: Path, *values: Path, extra: str = "") -> list[dict[str, Any]]:
    args: list[str | Path] = ["-kube-version", KUBE_VERSION]
    if extra:
        args += ["-api-versions", extra]
    proc = _run(helmrender, *args, CHART, *values)
    assert proc.returncode == 0, proc.stderr
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def merged_values(helmrender: Path, *values: Path) -> dict[str, Any]:
    proc = _run(helmrender, "-values", CHART, *values)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def by_kind(docs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for doc in docs:
        out.setdefault(doc["kind"], []).append(doc)
    return out


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(docs).get(kind, [])
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def pod_specs(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for doc in docs:
        if doc["kind"] == "Deployment":
            out["worker"] = doc["spec"]["template"]["spec"]
        elif doc["kind"] == "CronJob":
            out["trainer"] = doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return out


def containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*spec.get("initContainers", []), *spec["containers"]]


def write_values(tmp_path: Path, values: dict[str, Any], name: str = "values.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(values))
    return path


CASES = [pytest.param(None, id="values.yaml")] + [
    pytest.param(path, id=path.name) for path in CI_VALUES
]


@pytest.fixture(scope="session")
def rendered(helmrender: Path) -> dict[str, list[dict[str, Any]]]:
    out = {"values.yaml": render(helmrender)}
    for path in CI_VALUES:
        out[path.name] = render(helmrender, path)
    return out


def _docs(rendered: dict[str, list[dict[str, Any]]], case: Path | None) -> list[dict[str, Any]]:
    return rendered["values.yaml" if case is None else case.name]


def _values(helmrender: Path, case: Path | None) -> dict[str, Any]:
    return merged_values(helmrender) if case is None else merged_values(helmrender, case)


# -- the chart's files ----------------------------------------------------------------------


def test_chart_has_the_helm_create_file_set() -> None:
    for rel in (
        "Chart.yaml",
        "values.yaml",
        "values.schema.json",
        ".helmignore",
        "templates/_helpers.tpl",
        "templates/deployment.yaml",
        "templates/service.yaml",
        "templates/serviceaccount.yaml",
        "templates/hpa.yaml",
        "templates/NOTES.txt",
        "templates/tests/test-connection.yaml",
    ):
        assert (CHART / rel).is_file(), rel
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == "lookaround"
    assert chart["type"] == "application" and chart["version"] and chart["appVersion"]
    assert len(CI_VALUES) >= 3


def _leaf_paths(values: Any, prefix: str = "") -> set[str]:
    """Dotted paths of the documented values: leaves, and maps/lists documented as a whole."""
    if isinstance(values, dict) and values:
        out = set()
        for key, value in values.items():
            out |= _leaf_paths(value, f"{prefix}.{key}" if prefix else key)
        return out
    return {prefix}


def test_every_value_is_documented_with_a_param_comment() -> None:
    text = (CHART / "values.yaml").read_text()
    documented = set(re.findall(r"^\s*## @param (\S+) \S", text, flags=re.M))
    values = yaml.safe_load(text)
    # A map documented as a whole (resources, podSecurityContext...) covers its children.
    missing = {
        path
        for path in _leaf_paths(values)
        if not any(path == d or path.startswith(d + ".") for d in documented)
    }
    assert not missing, f"values without a ## @param comment: {sorted(missing)}"
    lookup_failures = []
    for path in documented:
        node: Any = values
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                lookup_failures.append(path)
                break
            node = node[part]
    assert not lookup_failures, f"@param for values that do not exist: {lookup_failures}"


# -- values.schema.json ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def values_schema() -> dict[str, Any]:
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    return schema


@pytest.mark.parametrize("case", CASES)
def test_values_schema_accepts_the_default_and_ci_values(
    helmrender: Path, values_schema: dict[str, Any], case: Path | None
) -> None:
    jsonschema.validate(_values(helmrender, case), values_schema)


BAD_VALUES = {
    "sasl without a secret": {"kafka": {"securityProtocol": "SASL_SSL"}},
    "a plain-text redis password": {"redis": {"password": "hunter2"}},
    "a plain-text kafka password": {"kafka": {"sasl": {"password": "hunter2"}}},
    "unknown protocol": {"kafka": {"securityProtocol": "TLS"}},
    "bootstrap without a port": {"kafka": {"bootstrap": "kafka"}},
    "zero partitions": {"topics": {"partitions": 0}},
    "partitions as text": {"topics": {"partitions": "eight"}},
    "unknown scorer": {"scorer": "pagerank"},
    "typo in a key": {"worker": {"replicas": 3}},
    "unknown top-level key": {"workers": {"replicaCount": 3}},
    "bad redis scheme": {"redis": {"url": "http://redis:6379"}},
    "bad cron schedule": {"trainer": {"schedule": "every hour"}},
    "relative registry path": {"registry": {"mountPath": "models"}},
    "bad access mode": {"registry": {"accessModes": ["ReadWriteAll"]}},
    "port out of range": {"worker": {"port": 70000}},
    "bad image pull policy": {"image": {"pullPolicy": "Sometimes"}},
    "bad log format": {"logFormat": "xml"},
}


@pytest.mark.parametrize("bad", list(BAD_VALUES), ids=list(BAD_VALUES))
def test_values_schema_rejects_bad_values(
    helmrender: Path, values_schema: dict[str, Any], tmp_path: Path, bad: str
) -> None:
    values = merged_values(helmrender, write_values(tmp_path, BAD_VALUES[bad]))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(values, values_schema)


def test_values_schema_accepts_sasl_with_a_secret(
    helmrender: Path, values_schema: dict[str, Any], tmp_path: Path
) -> None:
    good = {
        "kafka": {
            "securityProtocol": "SASL_PLAINTEXT",
            "sasl": {"existingSecret": "kafka-creds", "mechanism": "SCRAM-SHA-256"},
        },
        "redis": {"existingSecret": "redis-creds"},
        "pdb": {"maxUnavailable": "25%"},
        "trainer": {"schedule": "@daily"},
    }
    jsonschema.validate(merged_values(helmrender, write_values(tmp_path, good)), values_schema)


def test_ssl_without_a_ca_secret_uses_the_system_cas(
    helmrender: Path, values_schema: dict[str, Any], tmp_path: Path
) -> None:
    """A broker with a publicly trusted certificate needs no CA Secret: nothing is mounted."""
    values = write_values(
        tmp_path,
        {"kafka": {"securityProtocol": "SASL_SSL", "sasl": {"existingSecret": "creds"}}},
    )
    jsonschema.validate(merged_values(helmrender, values), values_schema)
    docs = render(helmrender, values)
    assert "LOOKAROUND_KAFKA_SSL_CAFILE" not in one(docs, "ConfigMap")["data"]
    for spec in pod_specs(docs).values():
        assert "kafka-tls" not in {v["name"] for v in spec["volumes"]}


def test_values_follow_the_settings_and_scorers(values_schema: dict[str, Any]) -> None:
    from online.scorers import SCORER_NAMES

    assert set(values_schema["properties"]["scorer"]["enum"]) == set(SCORER_NAMES)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    defaults = {name: field.default for name, field in Settings.model_fields.items()}
    assert values["scorer"] == defaults["scorer"]
    assert values["batchSize"] == defaults["batch_size"]
    assert values["embeddingDim"] == defaults["embedding_dim"]
    assert values["compactStore"] == defaults["compact_store"]
    assert values["worker"]["port"] == defaults["web_port"]
    topics = values["topics"]
    assert (
        topics["fetched"],
        topics["priorities"],
        topics["embeddings"],
        topics["deadLetter"],
    ) == (
        defaults["topic_fetched"],
        defaults["topic_priorities"],
        defaults["topic_embeddings"],
        defaults["topic_dead_letter"],
    )


def test_values_files_merge_like_helm(helmrender: Path, tmp_path: Path) -> None:
    first = write_values(
        tmp_path, {"topics": {"partitions": 3}, "worker": {"podLabels": {"a": "1"}}}
    )
    second = write_values(tmp_path, {"topics": {"replication": 2}, "commonLabels": None}, "b.yaml")
    values = merged_values(helmrender, first, second)
    assert values["topics"]["partitions"] == 3 and values["topics"]["replication"] == 2
    assert values["topics"]["fetched"] == "lookaround.fetched-pages"  # default kept
    assert values["worker"]["podLabels"] == {"a": "1"}
    assert "commonLabels" not in values  # null removes a key, as in Helm


# -- rendering and Kubernetes validation ----------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_manifests_are_valid_kubernetes(
    rendered: dict[str, list[dict[str, Any]]], case: Path | None
) -> None:
    import kubernetes_validate

    docs = _docs(rendered, case)
    kinds = {doc["kind"] for doc in docs}
    assert {"ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "CronJob"} <= kinds
    for doc in docs:
        if doc["kind"] == "ServiceMonitor":
            _check_service_monitor(doc)
            continue
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def test_the_validator_catches_a_broken_manifest(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    import kubernetes_validate

    deployment = json.loads(json.dumps(one(rendered["values.yaml"], "Deployment")))
    deployment["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["pathh"] = (
        "/health"
    )
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBE_VERSION, strict=True)


def _check_service_monitor(doc: dict[str, Any]) -> None:
    """No Kubernetes schema for the Prometheus Operator's CRD: check its shape by hand."""
    assert doc["apiVersion"] == "monitoring.coreos.com/v1"
    spec = doc["spec"]
    assert set(spec) <= {"selector", "endpoints", "namespaceSelector", "jobLabel"}
    assert spec["selector"]["matchLabels"]
    for endpoint in spec["endpoints"]:
        assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout", "scheme"}
        assert endpoint["path"] == "/metrics" and isinstance(endpoint["port"], str)
        assert re.fullmatch(r"[0-9]+(ms|s|m|h)", endpoint["interval"])


@pytest.mark.parametrize("case", CASES)
def test_standard_labels_and_selectors(
    rendered: dict[str, list[dict[str, Any]]], case: Path | None
) -> None:
    docs = _docs(rendered, case)
    for doc in docs:
        labels = doc["metadata"]["labels"]
        for label in STANDARD_LABELS:
            assert labels.get(label), f"{doc['kind']} {doc['metadata']['name']} lacks {label}"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
    deployment = one(docs, "Deployment")
    selector = deployment["spec"]["selector"]["matchLabels"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= pod_labels.items()
    assert one(docs, "Service")["spec"]["selector"] == selector
    assert one(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"] == selector
    # The trainer's pods must not be picked up by the workers' Service or PDB.
    trainer_labels = one(docs, "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["metadata"][
        "labels"
    ]
    assert not selector.items() <= trainer_labels.items()
    for monitor in by_kind(docs).get("ServiceMonitor", []):
        service = one(docs, "Service")
        assert (
            monitor["spec"]["selector"]["matchLabels"].items()
            <= service["metadata"]["labels"].items()
        )
        ports = {p["name"] for p in service["spec"]["ports"]}
        assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports


@pytest.mark.parametrize("case", CASES)
def test_settings_come_from_the_configmap_and_are_real_settings(
    rendered: dict[str, list[dict[str, Any]]], helmrender: Path, case: Path | None
) -> None:
    docs = _docs(rendered, case)
    values = _values(helmrender, case)
    configmap = one(docs, "ConfigMap")
    data = configmap["data"]
    unknown = set(data) - SETTINGS_ENV
    assert not unknown, f"ConfigMap keys that are not Settings fields: {sorted(unknown)}"
    assert all(isinstance(v, str) for v in data.values())
    # The whole ConfigMap must be accepted by Settings (types, enums, validators).
    Settings.model_validate({k.removeprefix(ENV_PREFIX).lower(): v for k, v in data.items()})
    assert data["LOOKAROUND_KAFKA_BOOTSTRAP"] == values["kafka"]["bootstrap"]
    assert data["LOOKAROUND_TOPIC_PARTITIONS"] == str(values["topics"]["partitions"])
    for name, spec in pod_specs(docs).items():
        for container in containers(spec):
            refs = [e["configMapRef"]["name"] for e in container.get("envFrom", [])]
            assert refs == [configmap["metadata"]["name"]], (name, container["name"])
            env_names = {e["name"] for e in container.get("env", [])}
            unknown = {n for n in env_names if n.startswith(ENV_PREFIX)} - SETTINGS_ENV
            assert not unknown, f"{name}/{container['name']}: not Settings fields: {unknown}"


SECRET_ENV = re.compile(r"PASSWORD|SASL_USERNAME|TOKEN|SECRET")


@pytest.mark.parametrize("case", CASES)
def test_secrets_only_by_reference(
    rendered: dict[str, list[dict[str, Any]]], helmrender: Path, case: Path | None
) -> None:
    docs = _docs(rendered, case)
    values = _values(helmrender, case)
    assert "Secret" not in by_kind(docs), "the chart must not create Secrets with values"
    assert not [k for k in one(docs, "ConfigMap")["data"] if SECRET_ENV.search(k)]
    sasl = values["kafka"]["securityProtocol"].startswith("SASL_")
    for spec in pod_specs(docs).values():
        for container in containers(spec):
            env = {e["name"]: e for e in container.get("env", [])}
            for name, entry in env.items():
                if SECRET_ENV.search(name):
                    assert "value" not in entry, f"{name} set in plain text"
                    assert "secretKeyRef" in entry["valueFrom"], name
            if sasl:
                ref = env["LOOKAROUND_KAFKA_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"]
                assert ref == {
                    "name": values["kafka"]["sasl"]["existingSecret"],
                    "key": values["kafka"]["sasl"]["passwordKey"],
                }
                user = env["LOOKAROUND_KAFKA_SASL_USERNAME"]["valueFrom"]["secretKeyRef"]
                assert user["key"] == values["kafka"]["sasl"]["usernameKey"]
            else:
                assert "LOOKAROUND_KAFKA_SASL_PASSWORD" not in env
            if values["redis"]["existingSecret"]:
                ref = env["LOOKAROUND_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]
                assert ref == {
                    "name": values["redis"]["existingSecret"],
                    "key": values["redis"]["passwordKey"],
                }
            else:
                assert "LOOKAROUND_REDIS_PASSWORD" not in env
            assert env["LOOKAROUND_WORKER_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == (
                "metadata.name"
            )


def test_kafka_tls_files_are_mounted_from_the_secret(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    docs = rendered["sasl-tls-values.yaml"]
    data = one(docs, "ConfigMap")["data"]
    cafile = Path(data["LOOKAROUND_KAFKA_SSL_CAFILE"])
    assert data["LOOKAROUND_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert data["LOOKAROUND_KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"
    for spec in pod_specs(docs).values():
        volumes = {v["name"]: v for v in spec["volumes"]}
        for container in containers(spec):
            mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
            mount = mounts[str(cafile.parent)]
            assert mount["readOnly"] is True
            assert volumes[mount["name"]]["secret"]["secretName"] == "lookaround-kafka-ca"


@pytest.mark.parametrize("case", CASES)
def test_worker_probes_ports_and_security(
    rendered: dict[str, list[dict[str, Any]]], helmrender: Path, case: Path | None
) -> None:
    docs = _docs(rendered, case)
    values = _values(helmrender, case)
    spec = pod_specs(docs)["worker"]
    worker = spec["containers"][0]
    assert worker["args"] == ["worker"]
    port = {p["name"]: p["containerPort"] for p in worker["ports"]}["http"]
    assert port == values["worker"]["port"]
    assert one(docs, "ConfigMap")["data"]["LOOKAROUND_WEB_PORT"] == str(port)
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert worker[probe]["httpGet"] == {"path": "/health", "port": "http"}, probe
    assert one(docs, "Service")["spec"]["ports"][0]["targetPort"] == "http"
    assert spec["securityContext"]["runAsNonRoot"] is True
    for container in containers(spec):
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
    init = [c for c in spec.get("initContainers", []) if c["name"] == "topics"]
    assert bool(init) == values["topics"]["create"]
    if init:
        assert init[0]["args"] == ["topics"]


@pytest.mark.parametrize("case", CASES)
def test_registry_volume_is_mounted_at_the_registry_dir(
    rendered: dict[str, list[dict[str, Any]]], helmrender: Path, case: Path | None
) -> None:
    docs = _docs(rendered, case)
    values = _values(helmrender, case)
    registry_dir = one(docs, "ConfigMap")["data"]["LOOKAROUND_REGISTRY_DIR"]
    assert registry_dir == values["registry"]["mountPath"]
    claims = by_kind(docs).get("PersistentVolumeClaim", [])
    if values["registry"]["existingClaim"]:
        assert not claims
        claim = values["registry"]["existingClaim"]
    else:
        assert len(claims) == 1
        claim = claims[0]["metadata"]["name"]
        assert claims[0]["spec"]["accessModes"] == values["registry"]["accessModes"]
    for name, spec in pod_specs(docs).items():
        volumes = {
            v["name"]: v["persistentVolumeClaim"]["claimName"]
            for v in spec["volumes"]
            if "persistentVolumeClaim" in v
        }
        for container in spec["containers"]:
            mounted = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            assert volumes[mounted[registry_dir]] == claim, name


@pytest.mark.parametrize("case", CASES)
def test_hpa_targets_the_worker_deployment(
    rendered: dict[str, list[dict[str, Any]]], helmrender: Path, case: Path | None
) -> None:
    docs = _docs(rendered, case)
    values = _values(helmrender, case)
    deployment = one(docs, "Deployment")
    hpas = by_kind(docs).get("HorizontalPodAutoscaler", [])
    if not values["autoscaling"]["enabled"]:
        assert not hpas
        assert deployment["spec"]["replicas"] == values["worker"]["replicaCount"]
        return
    (hpa,) = hpas
    assert "replicas" not in deployment["spec"]  # the HPA owns the replica count
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": deployment["apiVersion"],
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    assert hpa["spec"]["minReplicas"] == values["autoscaling"]["minReplicas"]
    assert hpa["spec"]["maxReplicas"] == values["autoscaling"]["maxReplicas"]
    assert hpa["spec"]["maxReplicas"] <= values["topics"]["partitions"]
    resources = {m["resource"]["name"] for m in hpa["spec"]["metrics"]}
    assert "cpu" in resources
    # Utilisation targets need requests on the target's containers.
    requests = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
    assert resources <= set(requests)


@pytest.mark.parametrize("case", CASES)
def test_trainer_cronjob_runs_the_batch_refresh(
    rendered: dict[str, list[dict[str, Any]]], helmrender: Path, case: Path | None
) -> None:
    docs = _docs(rendered, case)
    values = _values(helmrender, case)
    cronjob = one(docs, "CronJob")
    assert cronjob["spec"]["schedule"] == values["trainer"]["schedule"]
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    assert cronjob["spec"]["suspend"] is values["trainer"]["suspend"]
    container = pod_specs(docs)["trainer"]["containers"][0]
    assert container["command"] == ["/bin/sh", "-c"]
    script = " ".join(container["args"][0].split())
    registry = values["registry"]["mountPath"]
    assert re.search(
        rf"lookaround replay-topic --out (\S+) && lookaround train \1 --registry {registry}$",
        script,
    ), script
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/data", registry} <= mounts


def test_trainer_can_be_disabled(helmrender: Path, tmp_path: Path) -> None:
    docs = render(helmrender, write_values(tmp_path, {"trainer": {"enabled": False}}))
    assert "CronJob" not in by_kind(docs)


def test_required_secret_fails_the_render(helmrender: Path, tmp_path: Path) -> None:
    """values.schema.json catches this at install; the template's `required` is the backstop."""
    bad = write_values(tmp_path, {"kafka": {"securityProtocol": "SASL_PLAINTEXT"}})
    proc = _run(helmrender, CHART, bad)
    assert proc.returncode != 0
    assert "kafka.sasl.existingSecret is required" in proc.stderr


def test_release_name_and_overrides(helmrender: Path, tmp_path: Path) -> None:
    proc = _run(helmrender, "-name", "crawl-prod", "-namespace", "crawl", CHART)
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert one(docs, "Deployment")["metadata"]["name"] == "crawl-prod-lookaround-worker"
    assert one(docs, "Deployment")["metadata"]["labels"]["app.kubernetes.io/instance"] == (
        "crawl-prod"
    )
    docs = render(helmrender, write_values(tmp_path, {"fullnameOverride": "la"}))
    assert one(docs, "Deployment")["metadata"]["name"] == "la-worker"
    assert one(docs, "PersistentVolumeClaim")["metadata"]["name"] == "la-registry"


def test_notes_render(helmrender: Path) -> None:
    proc = _run(helmrender, "-notes", CHART)
    assert proc.returncode == 0, proc.stderr
    assert "lookaround.fetched-pages" in proc.stdout and "lookaround.priorities" in proc.stdout
    assert "/health" in proc.stdout and "<no value>" not in proc.stdout
    assert "app.kubernetes.io/name=lookaround,app.kubernetes.io/instance=lookaround" in (
        proc.stdout
    )


def test_config_checksum_changes_with_the_config(helmrender: Path, tmp_path: Path) -> None:
    def checksum(docs: list[dict[str, Any]]) -> str:
        return one(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"][
            "checksum/config"
        ]

    base = checksum(render(helmrender))
    changed = checksum(render(helmrender, write_values(tmp_path, {"scorer": "ccr"})))
    assert re.fullmatch(r"[0-9a-f]{64}", base) and base != changed


def test_renderer_implements_helms_functions(helmrender: Path, tmp_path: Path) -> None:
    """tpl, include, toYaml, fromYaml, toJson, required, fail and the built-in objects."""
    chart = tmp_path / "demo"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(
        "apiVersion: v2\nname: demo\nversion: 1.2.3\nappVersion: '9'\n"
    )
    (chart / "values.yaml").write_text(
        "greeting: 'hello {{ .Release.Name }}'\nbig: 7776000\nlist: [a, b]\nfailIt: false\n"
    )
    (chart / "templates" / "_h.tpl").write_text('{{- define "demo.x" -}}x-{{ . }}{{- end }}')
    (chart / "templates" / "cm.yaml").write_text(
        'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ include "demo.x" .Chart.Name }}\n'
        "data:\n"
        "  greeting: {{ tpl .Values.greeting . | quote }}\n"
        "  big: {{ int64 .Values.big | quote }}\n"
        "  list: {{ toJson .Values.list | quote }}\n"
        "  yaml: {{ toYaml .Values.list | quote }}\n"
        '  round: {{ (fromYaml "a: 1").a | quote }}\n'
        "  ns: {{ .Release.Namespace }}\n"
        "  kube: {{ .Capabilities.KubeVersion.Minor | quote }}\n"
        '  pdb: {{ .Capabilities.APIVersions.Has "policy/v1" | quote }}\n'
        "  chart: {{ .Chart.Version }}-{{ .Chart.AppVersion }}\n"
        "  tmpl: {{ .Template.Name }}\n"
        '{{- if .Values.failIt }}{{ fail "asked to fail" }}{{ end }}\n'
        '{{- $_ := required "need.me is required" .Values.need }}\n'
    )
    (tmp_path / "v.yaml").write_text("need: ok\n")
    proc = _run(helmrender, "-name", "rel", "-namespace", "ns1", chart, tmp_path / "v.yaml")
    assert proc.returncode == 0, proc.stderr
    (doc,) = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert doc["metadata"]["name"] == "x-demo"
    assert doc["data"] == {
        "greeting": "hello rel",
        "big": "7776000",
        "list": '["a","b"]',
        "yaml": "- a\n- b",
        "round": "1",
        "ns": "ns1",
        "kube": KUBE_VERSION.split(".")[1],
        "pdb": "true",
        "chart": "1.2.3-9",
        "tmpl": "demo/templates/cm.yaml",
    }
    proc = _run(helmrender, chart)
    assert proc.returncode != 0 and "need.me is required" in proc.stderr
    (tmp_path / "f.yaml").write_text("need: ok\nfailIt: true\n")
    proc = _run(helmrender, chart, tmp_path / "f.yaml")
    assert proc.returncode != 0 and "asked to fail" in proc.stderr


def test_the_registry_key_comes_from_a_secret(helmrender: Path, tmp_path: Path) -> None:
    """Workers and the trainer get LOOKAROUND_REGISTRY_KEY (signs and checks registry
    artifacts, docs/security.md) from the Secret ``registry.keySecret``; none without one."""
    values = write_values(tmp_path, {"registry": {"keySecret": "model-signing"}})
    for name, spec in pod_specs(render(helmrender, values)).items():
        env = {e["name"]: e for c in spec["containers"] for e in c.get("env", [])}
        ref = env["LOOKAROUND_REGISTRY_KEY"]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": "model-signing", "key": "registry-key"}, name
    for spec in pod_specs(render(helmrender)).values():
        env = {e["name"] for c in spec["containers"] for e in c.get("env", [])}
        assert "LOOKAROUND_REGISTRY_KEY" not in env


def test_a_redis_cluster_and_the_replicas_to_wait_for_are_values(
    helmrender: Path, tmp_path: Path
) -> None:
    """``redis.cluster`` (auto by default) and ``redis.waitReplicas`` (-1: the worker's own
    default, so no variable) reach the workers as settings."""
    data = one(render(helmrender), "ConfigMap")["data"]
    assert data["LOOKAROUND_REDIS_CLUSTER"] == "auto"
    assert "LOOKAROUND_REDIS_WAIT_REPLICAS" not in data
    values = write_values(tmp_path, {"redis": {"cluster": "true", "waitReplicas": 1}})
    data = one(render(helmrender, values), "ConfigMap")["data"]
    assert data["LOOKAROUND_REDIS_CLUSTER"] == "true"
    assert data["LOOKAROUND_REDIS_WAIT_REPLICAS"] == "1"
    settings = Settings.model_validate(
        {k.removeprefix(ENV_PREFIX).lower(): v for k, v in data.items()}
    )
    assert settings.redis_cluster == "true" and settings.redis_wait_replicas == 1

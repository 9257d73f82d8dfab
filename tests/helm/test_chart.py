"""helm/turngate: lint, render, Kubernetes schema validation, values.schema.json.

All offline: helm-python-sdk renders with Helm's own engine, kubernetes-validate holds the
Kubernetes JSON schemas. Every rendered object is validated in strict mode (an unknown field
fails) for 1.29, the first release with native sidecars on by default, and for the newest
release the validator ships.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fixtures_dir import COUNTS
from tests.helm.chart import (
    CHART,
    FALLBACK,
    NAMESPACE,
    REDIS_OTEL,
    RELEASE,
    VALUE_SETS,
    WILDCARD,
    env_list,
    env_values,
    helm,
    iter_probes,
    kubernetes_validate,
    manifests,
    merged,
    only,
    pod_spec,
    render,
    resolve_env,
    sidecar,
    validate_all,
)

NATIVE_SIDECAR_MIN = "1.29.0"
LATEST = kubernetes_validate.latest_version()
OLDEST = "1.25.0"  # the oldest schema set kubernetes-validate 1.37 ships


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_lint_strict_passes(values: dict[str, Any] | None) -> None:
    for kube_version in (NATIVE_SIDECAR_MIN, LATEST):
        report = helm.lint(str(CHART), values, strict=True, kube_version=f"v{kube_version}")
        problems = [m for m in report["messages"] if m["severity"] >= 2]
        assert report["errors"] == [], report
        assert problems == [], report


def test_lint_reports_a_broken_template(tmp_path: Path) -> None:
    broken = tmp_path / "turngate"
    shutil.copytree(CHART, broken)
    helpers = broken / "templates" / "_helpers.tpl"
    helpers.write_text(helpers.read_text().replace("{{- end }}", "", 1))
    report = helm.lint(str(broken), None, strict=True)
    assert report["errors"], "lint passed a chart whose template does not parse"


@pytest.mark.parametrize("version", [NATIVE_SIDECAR_MIN, LATEST])
@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_every_rendered_object_is_valid_kubernetes(
    values: dict[str, Any] | None, version: str
) -> None:
    docs = manifests(render(values))
    checked = validate_all(docs, version)
    assert f"Deployment/{RELEASE}-example-agent" in checked
    if values is REDIS_OTEL:
        assert f"ConfigMap/{RELEASE}-turngate-policy" in checked
    COUNTS[f"helm objects validated (k8s {version[:-2]})"] += len(checked)


def test_native_sidecar_needs_1_29_and_the_fallback_validates_on_older() -> None:
    native = manifests(render())
    with pytest.raises(kubernetes_validate.ValidationError) as refused:
        validate_all(native, "1.27.0")
    assert "restartPolicy" in refused.value.message
    assert validate_all(manifests(render(FALLBACK)), OLDEST)


def test_default_sidecar_is_a_native_sidecar_on_loopback() -> None:
    spec = pod_spec(manifests(render()))
    container, field = sidecar(spec)
    assert field == "initContainers"
    assert container["restartPolicy"] == "Always"
    # The app container starts only after this probe passes; it asks for the store too.
    assert container["startupProbe"]["exec"]["command"][-1] == "http://127.0.0.1:8787/readyz"
    assert container["readinessProbe"]["exec"]["command"][-1] == "http://127.0.0.1:8787/readyz"
    assert container["livenessProbe"]["exec"]["command"][-1] == "http://127.0.0.1:8787/healthz"
    # Always passed, so the image's CMD (--host 0.0.0.0) never applies in a pod.
    assert container["args"] == ["--host", "127.0.0.1", "--port", "8787"]
    assert "ports" not in container  # nothing exposed on the pod IP
    assert [c["name"] for c in spec["containers"]] == ["agent"]


def test_security_context_is_restrictive() -> None:
    for values in VALUE_SETS.values():
        container, _ = sidecar(pod_spec(manifests(render(values))))
        context = container["securityContext"]
        assert context["runAsNonRoot"] is True
        assert context["runAsUser"] == 10001
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}


def test_platform_assigned_user_ids_leave_run_as_user_out() -> None:
    values = {"securityContext": {"runAsUser": None, "runAsGroup": None}}
    docs = manifests(render(values))
    context = sidecar(pod_spec(docs))[0]["securityContext"]
    assert "runAsUser" not in context
    assert "runAsGroup" not in context
    assert context["runAsNonRoot"] is True
    validate_all(docs, NATIVE_SIDECAR_MIN)


def test_fallback_is_a_plain_container_before_the_app() -> None:
    spec = pod_spec(manifests(render(FALLBACK)))
    container, field = sidecar(spec)
    assert field == "containers"
    assert "restartPolicy" not in container
    assert "initContainers" not in spec
    assert [c["name"] for c in spec["containers"]] == ["turngate", "agent"]
    assert env_values(container)["TURNGATE_MODE"] == "shadow"


def test_sqlite_state_lives_on_an_empty_dir() -> None:
    spec = pod_spec(manifests(render()))
    container, _ = sidecar(spec)
    state = env_values(container)["TURNGATE_STATE"]
    assert state == "sqlite:///var/lib/turngate/turngate.db"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert state.removeprefix("sqlite://").startswith(mounts["turngate-state"] + "/")
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert "emptyDir" in volumes["turngate-state"]
    assert "emptyDir" in volumes["turngate-tmp"]
    assert mounts["turngate-tmp"] == "/tmp"


def test_sqlite_sync_normal_reaches_the_state_url() -> None:
    values = {"state": {"sqlite": {"sync": "normal"}}}
    container, _ = sidecar(pod_spec(manifests(render(values))))
    state = env_values(container)["TURNGATE_STATE"]
    assert state == "sqlite:///var/lib/turngate/turngate.db?sync=normal"


def test_redis_password_is_expanded_from_a_secret_defined_before_the_state_url() -> None:
    container, _ = sidecar(pod_spec(manifests(render(REDIS_OTEL))))
    names = [e["name"] for e in env_list(container)]
    # The kubelet expands $(REDIS_PASSWORD) only if it is defined earlier in the list.
    assert names.index("REDIS_PASSWORD") < names.index("TURNGATE_STATE")
    assert "p4ss" not in str(container)
    env = resolve_env(
        container,
        secrets={
            ("redis", "redis-password"): "p4ss",
            ("turngate", "credential-secret"): "hmac-key",
            ("otel", "headers"): "api-key=k",
        },
        fields={"metadata.name": "agent-0", "metadata.namespace": NAMESPACE},
    )
    assert env["TURNGATE_STATE"] == "redis://:p4ss@redis-master.data.svc:6379/0"
    assert env["TURNGATE_CREDENTIAL_SECRET"] == "hmac-key"
    assert env["OTEL_RESOURCE_ATTRIBUTES"] == (
        f"k8s.pod.name=agent-0,k8s.namespace.name={NAMESPACE},deployment.environment=prod"
    )
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector.observability:4318"
    assert env["OTEL_EXPORTER_OTLP_HEADERS"] == "api-key=k"
    assert env["OTEL_TRACES_SAMPLER"] == "parentbased_always_on"
    # No SQLite file, so no state volume.
    assert "turngate-state" not in {m["name"] for m in container["volumeMounts"]}


def test_redis_username_without_a_password_secret() -> None:
    values = {
        "state": {"backend": "redis", "redis": {"url": "rediss://r:6380/2", "username": "tg"}}
    }
    container, _ = sidecar(pod_spec(manifests(render(values))))
    assert env_values(container)["TURNGATE_STATE"] == "rediss://tg@r:6380/2"
    assert "REDIS_PASSWORD" not in {e["name"] for e in env_list(container)}


def test_policy_configmap_is_mounted_where_turngate_config_points() -> None:
    docs = manifests(render(REDIS_OTEL))
    configmap = only(docs, "ConfigMap")
    spec = pod_spec(docs)
    container, _ = sidecar(spec)
    config_path = env_values(container)["TURNGATE_CONFIG"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "turngate-policy")
    assert mount["readOnly"] is True
    assert config_path.startswith(mount["mountPath"] + "/")
    key = config_path.removeprefix(mount["mountPath"] + "/")
    volume = next(v for v in spec["volumes"] if v["name"] == "turngate-policy")
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    assert yaml.safe_load(configmap["data"][key]) == REDIS_OTEL["policy"]["config"]


def test_a_policy_change_rolls_the_pods() -> None:
    def checksum(policy: dict[str, Any]) -> str:
        docs = manifests(render({"policy": {"config": policy}}))
        annotations = only(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
        return str(annotations["checksum/turngate-policy"])

    assert checksum({"a": 1}) != checksum({"a": 2})
    assert checksum({"a": 1}) == checksum({"a": 1})


def test_existing_configmap_is_used_and_not_rendered() -> None:
    docs = manifests(render({"policy": {"existingConfigMap": "team-policy", "key": "p.yaml"}}))
    assert [d["kind"] for d in docs] == ["Deployment"]
    container, _ = sidecar(pod_spec(docs))
    assert env_values(container)["TURNGATE_CONFIG"] == "/etc/turngate/p.yaml"
    volume = next(v for v in pod_spec(docs)["volumes"] if v["name"] == "turngate-policy")
    assert volume["configMap"]["name"] == "team-policy"


def test_no_policy_means_no_config_flag_and_no_configmap() -> None:
    docs = manifests(render())
    assert [d["kind"] for d in docs] == ["Deployment"]
    container, _ = sidecar(pod_spec(docs))
    assert "TURNGATE_CONFIG" not in env_values(container)


def test_otel_off_sets_no_otel_variables() -> None:
    container, _ = sidecar(pod_spec(manifests(render())))
    assert not [e["name"] for e in env_list(container) if e["name"].startswith("OTEL_")]


def test_wildcard_listener_exposes_the_port_and_probes_over_http() -> None:
    spec = pod_spec(manifests(render(WILDCARD)))
    container, _ = sidecar(spec)
    assert container["ports"] == [{"name": "turngate", "containerPort": 9000, "protocol": "TCP"}]
    for name, probe in iter_probes(container):
        assert probe["httpGet"]["port"] == 9000, name
    agent = next(c for c in spec["containers"] if c["name"] == "agent")
    # The app still dials loopback.
    assert env_values(agent)["OPENAI_BASE_URL"] == "http://127.0.0.1:9000/openai/v1"


def test_app_gets_the_base_urls_of_each_sdk() -> None:
    values = {"listen": {"host": "::1", "port": 8899}}
    spec = pod_spec(manifests(render(values)))
    agent = next(c for c in spec["containers"] if c["name"] == "agent")
    assert env_values(agent) == {
        "OPENAI_BASE_URL": "http://[::1]:8899/openai/v1",
        "ANTHROPIC_BASE_URL": "http://[::1]:8899/anthropic",
        "GOOGLE_GEMINI_BASE_URL": "http://[::1]:8899/gemini",
        "GOOGLE_GENAI_API_VERSION": "v1beta",
    }
    container, _ = sidecar(spec)
    assert container["livenessProbe"]["exec"]["command"][-1] == "http://[::1]:8899/healthz"


def test_notes_tell_the_app_its_base_urls() -> None:
    notes = render({"listen": {"port": 9100}})["turngate/templates/NOTES.txt"]
    for line in (
        "OPENAI_BASE_URL=http://127.0.0.1:9100/openai/v1",
        "ANTHROPIC_BASE_URL=http://127.0.0.1:9100/anthropic",
        "GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:9100/gemini",
    ):
        assert line in notes


def test_example_agent_can_be_disabled() -> None:
    rendered = render({"exampleAgent": {"enabled": False}})
    assert manifests(rendered) == []
    assert "No example agent was rendered" in rendered["turngate/templates/NOTES.txt"]


def test_image_by_digest() -> None:
    digest = "sha256:" + "ab" * 32
    container, _ = sidecar(pod_spec(manifests(render({"image": {"digest": digest}}))))
    assert container["image"] == f"turngate@{digest}"


def test_image_tag_follows_the_chart_app_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["tag"] == chart["appVersion"]


BAD_VALUES = [
    pytest.param({"listen": {"port": "eighty"}}, "/listen/port", id="port-not-integer"),
    pytest.param({"listen": {"port": 70000}}, "/listen/port", id="port-out-of-range"),
    pytest.param({"listen": {"host": "10.0.0.7"}}, "/listen/host", id="host-not-loopback"),
    pytest.param({"mode": "enforcing"}, "/mode", id="unknown-mode"),
    pytest.param({"mdoe": "shadow"}, "'mdoe'", id="typo-at-top-level"),
    pytest.param({"state": {"backend": "redis"}}, "/state/redis/url", id="redis-without-url"),
    pytest.param(
        {"state": {"backend": "redis", "redis": {"url": "redis://:hunter2@r:6379/0"}}},
        "/state/redis/url",
        id="password-in-redis-url",
    ),
    pytest.param({"otel": {"enabled": True}}, "/otel/endpoint", id="otel-without-endpoint"),
    pytest.param(
        {"upstreams": {"openai": "api.openai.com"}}, "/upstreams/openai", id="upstream-no-scheme"
    ),
    pytest.param(
        {"upstreams": {"azure": "res.openai.azure.com"}}, "/upstreams/azure", id="azure-no-scheme"
    ),
    pytest.param(
        {"credentialSecret": {"name": "turngate", "key": ""}},
        "/credentialSecret/key",
        id="secret-without-key",
    ),
    pytest.param({"nativeSidecar": "yes"}, "/nativeSidecar", id="native-not-boolean"),
    pytest.param({"state": {"sqlite": {"sync": "off"}}}, "/state/sqlite/sync", id="unknown-sync"),
]


@pytest.mark.parametrize(("values", "field"), BAD_VALUES)
def test_schema_rejects_bad_values_naming_the_field(values: dict[str, Any], field: str) -> None:
    # Rendering applies values.schema.json exactly as `helm install` does.
    with pytest.raises(helm.HelmValuesError) as refused:
        render(values)
    message = str(refused.value)
    assert field in message, message
    assert "values don't meet the specifications of the schema" in message


def test_schema_accepts_every_value_set_and_helm_globals() -> None:
    with helm.Chart.load(str(CHART)) as loaded:
        for values in VALUE_SETS.values():
            loaded.validate_schema(values)
        # A parent chart's globals reach this chart's values when it is a dependency.
        loaded.validate_schema(merged(REDIS_OTEL, {"global": {"imageRegistry": "r.example"}}))

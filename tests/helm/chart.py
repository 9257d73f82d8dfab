"""Render helm/turngate offline and pick the sidecar out of the result.

helm-python-sdk (Helm's Go SDK through ctypes) lints and renders with no cluster and no
``helm`` binary; kubernetes-validate ships the Kubernetes JSON schemas. Both come from the
test extra; when they are missing the chart tests are skipped with that reason.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

helm = pytest.importorskip(
    "helm_python",
    reason="helm-python-sdk is not installed (test extra: helm-python-sdk>=0.2.2,<0.3)",
)
kubernetes_validate = pytest.importorskip(
    "kubernetes_validate",
    reason="kubernetes-validate is not installed (test extra: kubernetes-validate>=1.37,<2)",
)

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "turngate"
RELEASE = "demo"
NAMESPACE = "agents"

# Values the suite renders beside the defaults. Each must lint, render and validate.
REDIS_OTEL: dict[str, Any] = {
    "state": {
        "backend": "redis",
        "redis": {
            "url": "redis://redis-master.data.svc:6379/0",
            "passwordSecret": {"name": "redis", "key": "redis-password"},
        },
    },
    "credentialSecret": {"name": "turngate", "key": "credential-secret"},
    "otel": {
        "enabled": True,
        "endpoint": "http://otel-collector.observability:4318",
        "resourceAttributes": {"deployment.environment": "prod"},
        "headersSecret": {"name": "otel", "key": "headers"},
    },
    "policy": {"config": {"routes": [{"prefix": "/openai", "mode": "shadow"}]}},
    "extraEnv": [{"name": "OTEL_TRACES_SAMPLER", "value": "parentbased_always_on"}],
}
FALLBACK: dict[str, Any] = {"nativeSidecar": False, "mode": "shadow"}
WILDCARD: dict[str, Any] = {"listen": {"host": "0.0.0.0", "port": 9000}}
VALUE_SETS: dict[str, dict[str, Any] | None] = {
    "defaults": None,
    "redis-otel": REDIS_OTEL,
    "fallback": FALLBACK,
    "wildcard": WILDCARD,
}


def merged(base: Mapping[str, Any] | None, extra: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` merged in, mappings recursively (as Helm merges values)."""
    out: dict[str, Any] = copy.deepcopy(dict(base or {}))
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def render(values: Mapping[str, Any] | None = None, chart: Path = CHART) -> dict[str, str]:
    """Template path -> rendered text, as `helm template RELEASE CHART -n NAMESPACE`."""
    with helm.Chart.load(str(chart)) as loaded:
        rendered: dict[str, str] = loaded.render(
            None if values is None else dict(values), name=RELEASE, namespace=NAMESPACE
        )
    return rendered


def manifests(rendered: Mapping[str, str]) -> list[dict[str, Any]]:
    """Every Kubernetes object in a render (NOTES.txt and empty documents left out)."""
    docs: list[dict[str, Any]] = []
    for path, text in sorted(rendered.items()):
        if not path.endswith((".yaml", ".yml")):
            continue
        docs.extend(doc for doc in yaml.safe_load_all(text) if doc is not None)
    return docs


def only(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {[d['metadata']['name'] for d in found]}"
    return found[0]


def pod_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = only(docs, "Deployment")["spec"]["template"]["spec"]
    return spec


def sidecar(spec: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The turngate container and the list it sits in (initContainers or containers)."""
    for field in ("initContainers", "containers"):
        for container in spec.get(field) or []:
            if container["name"] == "turngate":
                return container, field
    raise AssertionError("no turngate container in the pod spec")


def env_list(container: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list(container.get("env") or [])


def env_values(container: Mapping[str, Any]) -> dict[str, str]:
    """The literal ``value`` of each env var (valueFrom entries left out)."""
    return {e["name"]: e["value"] for e in env_list(container) if "value" in e}


_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, defined: Mapping[str, str]) -> str:
    """The kubelet's ``$(NAME)`` expansion: only NAMEs in ``defined``; ``$$`` is ``$``."""

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "$"
        return defined.get(name, match.group(0))

    return _REFERENCE.sub(substitute, text)


def resolve_env(
    container: Mapping[str, Any],
    *,
    secrets: Mapping[tuple[str, str], str],
    fields: Mapping[str, str],
) -> dict[str, str]:
    """The container's environment as the kubelet builds it, in list order.

    ``secrets`` maps (secret name, key) to a value, ``fields`` a fieldRef path to a value;
    a reference to anything else fails the test, as a missing Secret fails the pod.
    """
    env: dict[str, str] = {}
    for entry in env_list(container):
        if "value" in entry:
            env[entry["name"]] = expand(str(entry["value"]), env)
            continue
        source = entry["valueFrom"]
        if "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            env[entry["name"]] = secrets[(ref["name"], ref["key"])]
        elif "fieldRef" in source:
            env[entry["name"]] = fields[source["fieldRef"]["fieldPath"]]
        else:
            raise AssertionError(f"unexpected env source {source}")
    return env


def validate_all(docs: list[dict[str, Any]], version: str) -> list[str]:
    """Validate each object against Kubernetes ``version`` in strict mode (unknown fields fail).

    Returns "Kind/name" of each; raises kubernetes_validate.ValidationError on the first bad one.
    """
    checked: list[str] = []
    for doc in docs:
        used = kubernetes_validate.validate(doc, version, strict=True)
        # The validator falls back to an older schema set when asked for a version it lacks.
        assert used == ".".join(version.split(".")[:2]), f"validated against {used}, not {version}"
        checked.append(f"{doc['kind']}/{doc['metadata']['name']}")
    return checked


def iter_probes(container: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name in ("startupProbe", "readinessProbe", "livenessProbe"):
        yield name, container[name]

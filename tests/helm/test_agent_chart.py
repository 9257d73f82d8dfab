"""The agent-chart example of docs/operations.md, built and rendered as a real parent chart.

The three YAML blocks of the "Add the sidecar to your agent's chart" section, each headed by
a ``# agent-chart/<path>`` comment, are written to a chart in tmp_path with helm/turngate in
its charts/ folder (what `helm dependency update` does), then linted, rendered and validated.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helm.chart import (
    CHART,
    REPO,
    env_values,
    helm,
    kubernetes_validate,
    manifests,
    pod_spec,
    render,
    sidecar,
    validate_all,
)

DOC = REPO / "docs" / "operations.md"
_BLOCK = re.compile(r"```yaml\n(# agent-chart/(\S+)\n.*?)```", re.DOTALL)


def doc_blocks() -> dict[str, str]:
    """``path inside the agent chart -> text`` for each agent-chart block of the doc."""
    return {m.group(2): m.group(1) for m in _BLOCK.finditer(DOC.read_text())}


def agent_chart(tmp_path: Path, extra_values: dict[str, Any] | None = None) -> Path:
    root = tmp_path / "agent-chart"
    for relative, text in doc_blocks().items():
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    if extra_values:
        values = yaml.safe_load((root / "values.yaml").read_text())
        values["turngate"].update(extra_values)
        (root / "values.yaml").write_text(yaml.safe_dump(values))
    shutil.copytree(CHART, root / "charts" / "turngate")
    return root


def test_the_doc_holds_the_three_files() -> None:
    assert sorted(doc_blocks()) == ["Chart.yaml", "templates/deployment.yaml", "values.yaml"]


@pytest.mark.parametrize("native", [True, False], ids=["native", "fallback"])
def test_agent_chart_from_the_docs_renders_turngate_into_its_pod(
    tmp_path: Path, native: bool
) -> None:
    chart = agent_chart(tmp_path, {"nativeSidecar": native, "policy": {"config": {"x": 1}}})
    report = helm.lint(str(chart), None, strict=True)
    assert report["errors"] == [], report
    docs = manifests(render(chart=chart))
    for version in ("1.29.0", kubernetes_validate.latest_version()):
        validate_all(docs, version)
    # The agent's own Deployment carries the sidecar; the example agent is off.
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "Deployment"] == ["demo-agent"]
    spec = pod_spec(docs)
    container, field = sidecar(spec)
    assert field == ("initContainers" if native else "containers")
    # The agent chart's `turngate:` values reach the sidecar, with the chart's defaults beneath.
    assert container["image"] == "registry.example.com/turngate:0.1.0"
    env = env_values(container)
    assert env["TURNGATE_MODE"] == "shadow"
    assert env["TURNGATE_STATE"] == "sqlite:///var/lib/turngate/turngate.db"
    # The policy ConfigMap the dependency renders is the one the sidecar mounts.
    configmap = next(d for d in docs if d["kind"] == "ConfigMap")
    volume = next(v for v in spec["volumes"] if v["name"] == "turngate-policy")
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    agent = next(c for c in spec["containers"] if c["name"] == "agent")
    assert env_values(agent)["OPENAI_BASE_URL"] == "http://127.0.0.1:8787/openai/v1"
    mounted = {m["name"] for m in container["volumeMounts"]}
    assert mounted <= {v["name"] for v in spec["volumes"]}

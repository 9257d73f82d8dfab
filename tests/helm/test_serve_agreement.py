"""The rendered sidecar agrees with what `turngate serve` actually reads.

The chart's args and env are handed to turngate's own settings code, and then to a real
`turngate serve` subprocess started exactly as the container would start it: the image's
ENTRYPOINT plus the rendered args, the rendered env as the kubelet expands it, every volume
mount root remapped into tmp_path (/var/lib/… is not writable here) and the working
directory standing in for the read-only root filesystem. The rendered probes are then run
as the kubelet would run them, and SIGTERM, as Kubernetes sends it, must stop it cleanly.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helm.chart import (
    CHART,
    NAMESPACE,
    REDIS_OTEL,
    env_values,
    iter_probes,
    manifests,
    merged,
    pod_spec,
    render,
    resolve_env,
    sidecar,
)
from tests.state.redis_server import free_port
from turngate.settings import Settings, add_serve_arguments, settings_from_args

SECRETS = {
    ("redis", "redis-password"): "p4ss",
    ("turngate", "credential-secret"): "hmac-key",
    ("otel", "headers"): "api-key=k",
}
FIELDS = {"metadata.name": "demo-example-agent-0", "metadata.namespace": NAMESPACE}
START_TIMEOUT = 20.0

# Every value differs from turngate's default, so a misspelt variable cannot pass unseen.
NON_DEFAULT: dict[str, Any] = {
    "listen": {"port": 9123},
    "mode": "enforce-no-tools",
    "logLevel": "debug",
    "maxBodyBytes": 1048576,
    "upstreams": {
        "openai": "https://openai.internal.example/proxy",
        "anthropic": "http://anthropic.internal.example",
        "gemini": "https://gemini.internal.example",
        "azure": "https://res.openai.azure.com",
    },
    "policy": {"config": {"routes": []}},
    "state": {"operationTtl": 172800, "replayMaxBytes": 1000000},
}


def serve_settings(container: Mapping[str, Any], env: Mapping[str, str]) -> Settings:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return settings_from_args(parser.parse_args(container["args"]), environ=env)


def test_chart_defaults_are_serve_defaults() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    defaults = Settings()
    assert values["listen"] == {"host": defaults.host, "port": defaults.port}
    # Unset: serve's own default (or the policy file's default mode) decides.
    assert values["mode"] == ""
    container, _ = sidecar(pod_spec(manifests(render({}))))
    assert "TURNGATE_MODE" not in {e["name"] for e in container.get("env", [])}
    assert values["logLevel"] == defaults.log_level
    assert values["maxBodyBytes"] == defaults.max_body_bytes
    # Shorter than serve's 7 days on purpose: the SQLite file's emptyDir has a size limit.
    assert values["state"]["operationTtl"] == defaults.replay_ttl < defaults.operation_ttl
    assert values["state"]["replayMaxBytes"] == defaults.replay_max_bytes
    assert values["upstreams"] == {
        "openai": defaults.upstream_openai,
        "anthropic": defaults.upstream_anthropic,
        "gemini": defaults.upstream_gemini,
        "azure": defaults.upstream_azure,
    }
    assert "TURNGATE_UPSTREAM_AZURE" not in {e["name"] for e in container.get("env", [])}


def test_serve_reads_every_rendered_setting() -> None:
    values = merged(REDIS_OTEL, NON_DEFAULT)
    container, _ = sidecar(pod_spec(manifests(render(values))))
    env = resolve_env(container, secrets=SECRETS, fields=FIELDS)
    settings = serve_settings(container, env)
    assert settings == Settings(
        host="127.0.0.1",
        port=9123,
        config="/etc/turngate/policy.yaml",
        state="redis://:p4ss@redis-master.data.svc:6379/0",
        mode="enforce-no-tools",
        upstream_openai="https://openai.internal.example/proxy",
        upstream_anthropic="http://anthropic.internal.example",
        upstream_gemini="https://gemini.internal.example",
        upstream_azure="https://res.openai.azure.com",
        max_body_bytes=1048576,
        log_level="debug",
        operation_ttl=172800.0,
        replay_max_bytes=1000000,
    )
    # The probes dial the port turngate listens on.
    for name, probe in iter_probes(container):
        assert probe["exec"]["command"][-1].startswith("http://127.0.0.1:9123/"), name


def remap(text: str, roots: Mapping[str, Path]) -> str:
    """``text`` with each mount root (a whole path prefix) replaced by its stand-in directory.

    One pass, longest root first, so a stand-in that itself lies under /tmp is left alone.
    """
    alternatives = "|".join(re.escape(m) for m in sorted(roots, key=len, reverse=True))
    pattern = re.compile(f"({alternatives})(?=/|$)")
    return pattern.sub(lambda match: str(roots[match.group(1)]), text)


def entrypoint() -> list[str]:
    """The image's ENTRYPOINT ["turngate", "serve"], as this interpreter runs the script."""
    return [sys.executable, "-m", "turngate.cli", "serve"]


def run_probe(probe: Mapping[str, Any], env: Mapping[str, str]) -> int:
    """Run a rendered probe like the kubelet: 0 when it passes."""
    if "exec" in probe:
        command = list(probe["exec"]["command"])
        assert command[0] == "python"
        command[0] = sys.executable
        done = subprocess.run(command, env=dict(env), capture_output=True, timeout=10, check=False)
        return done.returncode
    get = probe["httpGet"]
    url = f"http://127.0.0.1:{get['port']}{get['path']}"
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=3):
            return 0
    except (urllib.error.URLError, OSError):
        return 1


class Sidecar:
    """A `turngate serve` process started from a rendered container."""

    def __init__(self, container: Mapping[str, Any], tmp_path: Path):
        self.container = container
        self.roots = {
            m["mountPath"]: tmp_path / "mounts" / m["name"] for m in container["volumeMounts"]
        }
        for directory in self.roots.values():
            directory.mkdir(parents=True)
        self.rootfs = tmp_path / "rootfs"  # the working directory: nothing may land here
        self.rootfs.mkdir()
        rendered = resolve_env(container, secrets=SECRETS, fields=FIELDS)
        self.env = {name: remap(value, self.roots) for name, value in rendered.items()}
        self.args = [remap(arg, self.roots) for arg in container["args"]]
        self.log = tmp_path / "turngate.log"
        self.process: subprocess.Popen[bytes] | None = None

    def process_env(self) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("TURNGATE_", "OTEL_"))}
        # The image sets these; /tmp is a mount in the pod, so it is remapped too.
        base |= {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
        base["TMPDIR"] = str(self.roots["/tmp"])
        return base | self.env

    def start(self) -> None:
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [*entrypoint(), *self.args],
                cwd=self.rootfs,
                env=self.process_env(),
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_started(self, probe: Mapping[str, Any]) -> None:
        """Like the kubelet with a startup probe: retry until it passes, or give up."""
        assert self.process is not None
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(
                    f"turngate serve exited with {self.process.returncode}:\n{self.output()}"
                )
            if run_probe(probe, self.process_env()) == 0:
                return
            time.sleep(0.1)
        pytest.fail(f"the startup probe never passed in {START_TIMEOUT} s:\n{self.output()}")

    def stop(self) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                pytest.fail("turngate serve did not stop within 15 s of SIGTERM")
        return self.process.returncode


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[Sidecar]]:
    sidecars: list[Sidecar] = []
    yield sidecars
    for running in sidecars:
        if running.process is not None and running.process.poll() is None:
            running.process.kill()
            running.process.wait()


SERVE_VALUES = {
    "defaults": {},
    "fallback-custom-state": {
        "nativeSidecar": False,
        "mode": "shadow",
        "logLevel": "debug",
        "state": {"sqlite": {"mountPath": "/data/turngate", "file": "ops.db"}},
    },
}


@pytest.mark.parametrize("values", SERVE_VALUES.values(), ids=SERVE_VALUES.keys())
def test_turngate_serve_starts_from_the_rendered_sidecar_and_passes_its_probes(
    tmp_path: Path, started: list[Sidecar], values: dict[str, Any]
) -> None:
    # A free port instead of 8787, which another test run may hold; args and probes both
    # come from this one value, so their agreement is still what is tested.
    port = free_port()
    rendered = render(merged(values, {"listen": {"port": port}}))
    container, _ = sidecar(pod_spec(manifests(rendered)))
    running = Sidecar(container, tmp_path)
    started.append(running)
    running.start()

    running.wait_started(container["startupProbe"])
    for name, probe in iter_probes(container):
        assert run_probe(probe, running.process_env()) == 0, f"{name} failed"
    # Listening where the app's base URLs point.
    agent = next(c for c in pod_spec(manifests(rendered))["containers"] if c["name"] == "agent")
    base_urls = [v for k, v in env_values(agent).items() if k.endswith("_BASE_URL")]
    assert len(base_urls) == 3
    for url in base_urls:
        assert url.startswith(f"http://127.0.0.1:{port}/"), url

    state_url = env_values(container)["TURNGATE_STATE"]
    database = Path(remap(state_url.removeprefix("sqlite://"), running.roots))
    assert database.is_file(), f"no SQLite file at {database}"
    assert list(running.rootfs.iterdir()) == [], "turngate wrote outside its mounted volumes"

    assert running.stop() == 0, running.output()
    # Not ready any more once stopped: the probes really talk to this process.
    assert run_probe(container["livenessProbe"], running.process_env()) != 0

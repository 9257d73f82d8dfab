"""The policy file on the command line: `turngate serve --config` refuses a bad file at start,
`--mode` replaces the file's default mode, `turngate policy schema|check`, `schema policy`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from tests.state.redis_server import free_port
from turngate.policies.config import policy_schema
from turngate.policies.loading import load_serving_policy
from turngate.proxy.services import DEFAULT_ADAPTERS

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "turngate.yaml"
BAD = """version: 1
defaults:
  mode: enforced
  rolle_forgery: flag
routes:
  - match: {prefix: gemini}
    adapter_versions: {gemini: "1"}
"""


def turngate(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turngate.cli", *args],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNGATE_")}
    return {**env, **extra}


def test_serve_with_a_bad_policy_file_exits_2_and_says_where(tmp_path: Path):
    config = tmp_path / "bad.yaml"
    config.write_text(BAD)
    done = turngate("serve", "--config", str(config), "--state", "memory://", env=clean_env())
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == (
        f"turngate: invalid policy {config} (2 problems):\n"
        f"  {config}:3:9: defaults.mode: Input should be 'shadow', 'enforce-no-tools' or "
        "'enforce' (got 'enforced')\n"
        f"  {config}:4:3: defaults.rolle_forgery: unknown field; did you mean 'role_forgery'?\n"
    )


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("postgres://db", "use sqlite:///PATH, memory:// or redis://HOST"),
        (
            "sqlite:///tmp/state.db?sync=off",
            "the SQLite file takes one option, sync=full or normal",
        ),
    ],
)
def test_serve_with_a_bad_state_url_exits_2_and_says_why(url: str, says: str):
    done = turngate("serve", "--state", url, env=clean_env())
    assert done.returncode == 2
    assert done.stderr == f"turngate: unknown state URL {url!r}: {says}" + (
        " (sqlite:///PATH?sync=normal)\n" if "sync" in says else "\n"
    )


def test_serve_refuses_an_environment_override_and_an_unknown_pin(tmp_path: Path):
    config = tmp_path / "pins.yaml"
    config.write_text("routes:\n  - match: {prefix: gemini}\n    adapter_versions: {gemini: '7'}\n")
    env = clean_env(TURNGATE_CONFIG=str(config), TURNGATE_POLICY__DEFAULTS__MODE="bogus")
    done = turngate("serve", "--state", "memory://", env=env)
    assert done.returncode == 2
    assert "env TURNGATE_POLICY__DEFAULTS__MODE: defaults.mode: Input should be" in done.stderr
    done = turngate("serve", "--state", "memory://", env=clean_env(TURNGATE_CONFIG=str(config)))
    assert done.returncode == 2
    assert done.stderr == (
        f"turngate: invalid policy {config} (1 problem):\n"
        f"  {config}:3:32: routes[0].adapter_versions.gemini: gemini has no adapter version "
        "'7' (registered: 1)\n"
    )


def test_a_missing_policy_file_refuses_to_start(tmp_path: Path):
    missing = tmp_path / "nope.yaml"
    done = turngate("serve", "--config", str(missing), "--state", "memory://", env=clean_env())
    assert done.returncode == 2
    assert f"invalid policy {missing} (1 problem)" in done.stderr
    assert "No such file or directory" in done.stderr


def serve_log_line(*args: str, env: dict[str, str]) -> str:
    """Start `turngate serve`, read its first log line, stop it."""
    command = [sys.executable, "-m", "turngate.cli", "serve", "--port", str(free_port())]
    with subprocess.Popen(
        [*command, "--state", "memory://", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    ) as process:
        try:
            assert process.stdout is not None
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                line = process.stdout.readline()
                if "turngate serving on" in line:
                    return line
                assert line, f"turngate exited: {process.wait()}"
            raise AssertionError("turngate did not log its start")
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(30)


@pytest.mark.parametrize(
    ("args", "env", "mode"),
    [
        ((), {}, "mode enforce-no-tools"),
        (("--mode", "shadow"), {}, "mode shadow"),
        ((), {"TURNGATE_MODE": "enforce"}, "mode enforce"),
        ((), {"TURNGATE_POLICY__DEFAULTS__MODE": "shadow"}, "mode shadow"),
    ],
    ids=["file", "flag", "variable", "policy-variable"],
)
def test_mode_replaces_the_files_default_mode_only_when_given(
    args: tuple[str, ...], env: dict[str, str], mode: str
):
    line = serve_log_line("--config", str(EXAMPLE), *args, env=clean_env(**env))
    assert f"({mode}, 3 policy routes," in line


def test_mode_keeps_each_routes_own_mode():
    loaded = load_serving_policy(EXAMPLE, {}, mode="shadow", registry=DEFAULT_ADAPTERS)
    assert loaded.defaults.mode == "shadow"
    # The example's OpenAI gpt-4.1 route says enforce; its Gemini route says nothing.
    assert loaded.policy_for("openai_chat", "gpt-4.1-mini").mode == "enforce"
    assert loaded.policy_for("gemini", "gemini-2.5-pro").mode == "shadow"


def test_policy_schema_is_printed_by_both_commands():
    schema = policy_schema()
    for args in (("policy", "schema"), ("schema", "policy")):
        done = turngate(*args)
        assert done.returncode == 0, done.stderr
        assert orjson.loads(done.stdout) == schema
    assert schema["$id"] == "https://turngate.dev/schemas/policy.v1.json"
    assert "shadow_records" in schema["properties"]


def test_policy_check_validates_a_file(tmp_path: Path):
    done = turngate("policy", "check", str(EXAMPLE), env=clean_env())
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        f"{EXAMPLE}: valid (default mode enforce-no-tools, 3 routes, 2 model rows)\n"
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    done = turngate("policy", "check", str(bad), env=clean_env())
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith(f"invalid policy {bad} (2 problems):\n")


def test_shadow_report_needs_an_existing_state_file(tmp_path: Path):
    missing = tmp_path / "nope.db"
    done = turngate("shadow", "report", "--state", f"sqlite://{missing}", env=clean_env())
    assert done.returncode == 2
    assert done.stderr == f"turngate: no state file at {missing}\n"
    assert not missing.exists()
    done = turngate("shadow", "report", "--state", "memory://", "--json", env=clean_env())
    assert done.returncode == 0
    assert orjson.loads(done.stdout)["records"] == 0

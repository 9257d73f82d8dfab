"""The Dockerfile, checked statically: no container engine runs on the test machines.

Stages and base images, the virtualenv handed from builder to runtime, no compiler in the
final stage, the non-root user the chart expects, ENTRYPOINT/CMD, the build context, and
the HEALTHCHECK command run for real against a local server.
"""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
import yaml

from turngate.settings import Settings

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
VALUES = REPO / "helm" / "turngate" / "values.yaml"

COMPILERS = re.compile(
    r"\b(gcc|g\+\+|cc|clang|make|build-essential|python3?-dev|libc6?-dev|rustc|cargo)\b"
)


@dataclass
class Instruction:
    keyword: str
    arguments: str

    def exec_form(self) -> list[str]:
        """The JSON array of an exec-form instruction (after any --options)."""
        text = re.sub(r"^(--\S+\s+)*", "", self.arguments)
        if self.keyword == "HEALTHCHECK":
            text = text.removeprefix("CMD").strip()
        value = json.loads(text)
        assert isinstance(value, list), f"{self.keyword} is not in exec form"
        return [str(v) for v in value]


@dataclass
class Stage:
    image: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def one(self, keyword: str) -> Instruction:
        found = self.all(keyword)
        assert len(found) == 1, f"expected one {keyword} in stage {self.name}, found {found}"
        return found[0]


def instructions(text: str) -> Iterator[Instruction]:
    logical = re.sub(
        r"\\\n",
        " ",
        "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")),
    )
    for line in logical.splitlines():
        if line.strip():
            keyword, _, arguments = line.strip().partition(" ")
            yield Instruction(keyword.upper(), " ".join(arguments.split()))


def stages(text: str) -> list[Stage]:
    """Stages with ARG defaults (global ones) substituted into their FROM lines."""
    args: dict[str, str] = {}
    out: list[Stage] = []
    for instruction in instructions(text):
        if instruction.keyword == "FROM":
            image, *rest = instruction.arguments.split()
            image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image)
            name = rest[1] if len(rest) == 2 and rest[0].upper() == "AS" else None
            out.append(Stage(image, name))
        elif not out and instruction.keyword == "ARG":
            key, _, value = instruction.arguments.partition("=")
            args[key] = value
        elif out:
            out[-1].instructions.append(instruction)
    return out


@pytest.fixture(scope="module")
def built() -> list[Stage]:
    return stages(DOCKERFILE.read_text())


def test_two_stages_from_one_python_and_debian(built: list[Stage]) -> None:
    builder, runtime = built
    assert builder.name == "builder"
    assert runtime.image.startswith("python:3.11-slim")
    # Same Python and Debian release: the virtualenv's interpreter and wheels fit both.
    assert builder.image.replace("python:3.11-", "python:3.11-slim-") == runtime.image
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    assert requires == ">=3.11"


def test_runtime_gets_only_the_builders_virtualenv(built: list[Stage]) -> None:
    builder, runtime = built
    venv = re.search(r"python -m venv (\S+)", builder.one("RUN").arguments)
    assert venv is not None
    copies = runtime.all("COPY")
    assert [c.arguments for c in copies] == [f"--from=builder {venv[1]} {venv[1]}"]
    assert f"PATH={venv[1]}/bin:$PATH" in runtime.one("ENV").arguments


def test_no_compiler_in_the_final_stage(built: list[Stage]) -> None:
    runtime = built[-1]
    for run in runtime.all("RUN"):
        assert "apt-get install" not in run.arguments
        assert not COMPILERS.search(run.arguments), run.arguments
    # slim: the Debian image without gcc and headers that the full python image carries.
    assert "-slim" in runtime.image


def test_runs_as_the_non_root_user_the_chart_declares(built: list[Stage]) -> None:
    runtime = built[-1]
    user = runtime.one("USER").arguments
    chart = yaml.safe_load(VALUES.read_text())["securityContext"]
    assert user == f"{chart['runAsUser']}:{chart['runAsGroup']}"
    assert int(user.split(":")[0]) != 0


def test_entrypoint_is_turngate_serve_and_only_cmd_opens_all_interfaces(
    built: list[Stage],
) -> None:
    runtime = built[-1]
    assert runtime.one("ENTRYPOINT").exec_form() == ["turngate", "serve"]
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["turngate"] == "turngate.cli:main"
    # The chart always passes args, which replace CMD: a pod listens on 127.0.0.1.
    assert runtime.one("CMD").exec_form() == ["--host", "0.0.0.0"]


def test_image_state_and_port_match_the_chart(built: list[Stage]) -> None:
    runtime = built[-1]
    env = runtime.one("ENV").arguments
    values = yaml.safe_load(VALUES.read_text())
    sqlite = values["state"]["sqlite"]
    assert f"TURNGATE_STATE=sqlite://{sqlite['mountPath']}/{sqlite['file']}" in env
    assert runtime.one("VOLUME").exec_form() == [sqlite["mountPath"]]
    assert runtime.one("EXPOSE").arguments == str(Settings().port)
    assert f"TURNGATE_PORT={Settings().port}" in env


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; a pattern matches a path or a parent.

    A pattern is anchored at the context root, except that ``**/`` matches at any depth.
    """
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    result = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        bare = pattern.removeprefix("!").rstrip("/")
        if bare.startswith("**/"):
            hit = any(fnmatch.fnmatchcase(part, bare[3:]) for part in parts)
        else:
            hit = any(fnmatch.fnmatchcase(prefix, bare) for prefix in prefixes)
        if hit:
            result = not negated
    return result


def test_build_context_holds_what_copy_needs_and_nothing_else(built: list[Stage]) -> None:
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    sources = [
        source
        for copy in built[0].all("COPY")
        for source in copy.arguments.split()[:-1]
        if not source.startswith("--")
    ]
    assert sources == ["pyproject.toml", "README.md*", "turngate"]
    for needed in ("pyproject.toml", "README.md", "turngate/cli.py", "turngate/graph/model.py"):
        assert not ignored(needed, patterns), needed
    for unwanted in (
        ".venv/bin/python",
        ".git/HEAD",
        "tests/helm/test_chart.py",
        "helm/turngate/values.yaml",
        "turngate/__pycache__/cli.cpython-311.pyc",
        "turngate.db",
    ):
        assert ignored(unwanted, patterns), unwanted


class _Health(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/healthz" else 404)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def healthcheck(built: list[Stage], port: int) -> int:
    command = built[-1].one("HEALTHCHECK").exec_form()
    assert command[0] == "python"
    env = {"TURNGATE_PORT": str(port), "HTTP_PROXY": "http://127.0.0.1:9", "PATH": ""}
    done = subprocess.run(
        [sys.executable, *command[1:]], env=env, capture_output=True, timeout=10, check=False
    )
    return done.returncode


@pytest.mark.parametrize(("status", "healthy"), [(200, True), (503, False)])
def test_healthcheck_gets_healthz_on_turngate_port(
    built: list[Stage], status: int, healthy: bool
) -> None:
    handler = type("Handler", (_Health,), {"status": status})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        # HTTP_PROXY points nowhere: the check must still reach 127.0.0.1 directly.
        assert (healthcheck(built, server.server_address[1]) == 0) is healthy
    finally:
        server.shutdown()
        server.server_close()


def test_healthcheck_fails_when_nothing_listens(built: list[Stage]) -> None:
    with HTTPServer(("127.0.0.1", 0), _Health) as server:
        port = server.server_address[1]
    assert healthcheck(built, port) != 0

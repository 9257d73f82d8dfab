"""A real `turngate serve` subprocess for the conversation, replay and recovery tests: any
``--state`` URL, extra flags and environment; start again after a kill on the same state."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import openai
import orjson

from tests.proxy.stack import OPENAI_KEY

REPO = Path(__file__).resolve().parents[2]
# The same secret in every process: a caller's credential hashes alike in each, so a
# replay may be served by another replica than the one that committed.
SECRET = "test-credential-secret"


class ServeProcess:
    def __init__(
        self, port: int, state: str, upstream: str, log: Path, *flags: str, **env: str
    ) -> None:
        self.port = port
        self.state = state
        self.upstream = upstream
        self.flags = flags
        self.env = env
        self.log = log
        self.url = f"http://127.0.0.1:{port}"
        self.process: subprocess.Popen[bytes] | None = None

    async def start(self) -> ServeProcess:
        command = [
            *(sys.executable, "-m", "turngate.cli", "serve", "--port", str(self.port)),
            *("--state", self.state),
            *("--upstream-openai", self.upstream, "--upstream-anthropic", self.upstream),
            *("--upstream-gemini", self.upstream, "--log-level", "info"),
            *self.flags,
        ]
        env = {**os.environ, "TURNGATE_CREDENTIAL_SECRET": SECRET, **self.env}
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env
            )
        for _ in range(400):
            try:
                async with (
                    aiohttp.ClientSession() as session,
                    session.get(self.url + "/readyz") as resp,
                ):
                    if resp.status == 200:
                        return await self._answered_itself()
            except aiohttp.ClientConnectionError:
                pass
            assert self.process.poll() is None, self.output()
            await asyncio.sleep(0.05)
        raise AssertionError(f"turngate did not become ready:\n{self.output()}")

    async def _answered_itself(self) -> ServeProcess:
        """The ready answer came from this process (its access log has it), not from another
        server on the port: a test must never talk to someone else's."""
        for _ in range(100):
            if "GET /readyz 200" in self.output():
                return self
            assert self.process is not None
            assert self.process.poll() is None, f"port {self.port} taken:\n{self.output()}"
            await asyncio.sleep(0.02)
        raise AssertionError(f"another server answered on port {self.port}:\n{self.output()}")

    def kill(self) -> None:
        """SIGKILL: no drain, no shutdown; whatever was in flight is left as it was."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)
        self.process = None

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    async def get(self, path: str) -> tuple[int, Any]:
        async with aiohttp.ClientSession() as session, session.get(self.url + path) as resp:
            return resp.status, orjson.loads(await resp.read())

    async def conversation(self, key: str) -> dict[str, Any]:
        status, found = await self.get(f"/turngate/v1/conversations/{key}")
        assert status == 200, found
        assert isinstance(found, dict)
        return found


def conversation_client(url: str, conversation: str) -> openai.OpenAI:
    """The official SDK aimed at turngate ``url``, every request in ``conversation``, no
    retries of its own: what a test sees is what turngate answered."""
    return openai.OpenAI(
        api_key=OPENAI_KEY,
        base_url=url + "/openai/v1",
        max_retries=0,
        default_headers={"Turngate-Conversation-Id": conversation},
    )


async def eventually(check: Any, timeout: float = 15.0, every: float = 0.05) -> Any:
    """Await ``check()`` until it returns something truthy."""
    for _ in range(int(timeout / every)):
        value = await check()
        if value:
            return value
        await asyncio.sleep(every)
    raise AssertionError("condition not reached in time")

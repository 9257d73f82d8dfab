"""The stack the proxy tests run: turngate in front of a fake upstream, and test keys."""

from __future__ import annotations

from dataclasses import dataclass, field

from aiohttp import web

from tests.proxy.fake_upstream import FakeUpstream
from turngate.proxy.app import SERVICES
from turngate.state.store import StateStore

# Keys the e2e tests use; none may ever show up in a log record or in stored state.
OPENAI_KEY = "sk-test-OPENAI-7f3a9c1e5b2d4f60"
ANTHROPIC_KEY = "sk-ant-test-ANTHROPIC-19e8d7c6b5a4"
GEMINI_KEY = "AIza-test-GEMINI-0a1b2c3d4e5f6789"
SECRETS = (OPENAI_KEY, ANTHROPIC_KEY, GEMINI_KEY)


@dataclass
class Stack:
    url: str
    upstream: FakeUpstream
    app: web.Application
    upstream_host: str
    # Request bodies exactly as the client sent them to turngate (when recording).
    client_bodies: list[bytes] = field(default_factory=list)

    @property
    def store(self) -> StateStore:
        return self.app[SERVICES].store

    def base(self, prefix: str) -> str:
        return self.url + prefix

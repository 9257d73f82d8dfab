"""No SSRF: whatever a request carries, turngate contacts only the configured upstream of its
prefix. A second fake server stands in for the attacker's host and must receive nothing;
the upstream receives the path the table expects (normalised, still below the prefix's
root) or nothing when turngate refuses the request."""

from __future__ import annotations

import aiohttp
import pytest

from tests.hardening.conftest import HardFactory, HardStack
from tests.hardening.wire import healthy, raw_exchange
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import CHAT_ANSWER

ATTACKER = "{attacker}"


def request_line(target: str, host: str = "turngate", extra: str = "") -> bytes:
    return f"GET {target} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n".encode()


# (request target, Host header, the upstream path expected, or None when nothing is sent)
ROWS = [
    ("/openai/v1/../../x", "turngate", None),
    ("/openai/v1/%2e%2e/%2e%2e/x", "turngate", None),
    ("/openai/v1/%2E%2E%2F%2E%2E%2Fx", "turngate", None),
    ("/openai/v1/./models", "turngate", None),
    ("/openai/v1//{attacker}/x", "turngate", "/v1//{attacker}/x"),
    ("/openai/v1/%2F%2F{attacker}/x", "turngate", "/v1/%2F%2F{attacker}/x"),
    ("/openai/v1/@{attacker}/x", "turngate", "/v1/@{attacker}/x"),
    ("/openai/v1/\\\\{attacker}/x", "turngate", "/v1/\\\\{attacker}/x"),
    ("/openai/v1@{attacker}/x", "turngate", None),
    ("/openai/v1:@{attacker}/x", "turngate", None),
    ("/openai%2Fv1/models", "turngate", None),
    ("%2Fopenai/v1/models", "turngate", None),
    ("http://{attacker}/openai/v1/models", "turngate", None),
    ("//{attacker}/openai/v1/models", "turngate", None),
    ("/openai/v1/models", "{attacker}", "/v1/models"),
    ("/openai/v1/models?url=http://{attacker}/x", "turngate", "/v1/models?url=http://{attacker}/x"),
    (
        "/gemini/v1beta/models?key=k&url=//{attacker}",
        "turngate",
        "/v1beta/models?key=k&url=//{attacker}",
    ),
    ("/anthropic/v1/models#@{attacker}", "turngate", "/v1/models"),
    ("/anthropic/..%2F..%2F{attacker}", "turngate", None),
    ("/gemini/v1beta/models/..%5C..%5Cx:generateContent", "turngate", None),
]


@pytest.mark.parametrize(("target", "host", "expected"), ROWS)
async def test_nothing_in_a_request_reaches_another_host(
    make_hard_stack: HardFactory, target: str, host: str, expected: str | None
) -> None:
    stack = await make_hard_stack()
    assert stack.attacker is not None
    attacker = stack.attacker_host
    fill = {"attacker": attacker}
    result = await raw_exchange(
        stack.port, [request_line(target.format(**fill), host.format(**fill))], wait=5.0
    )
    assert result.status is not None, result.data[:200]
    assert stack.attacker.received == []
    if expected is None:
        assert stack.upstream.received == [], result.data[:300]
        assert 400 <= result.status < 500
    else:
        assert [r.path_qs for r in stack.upstream.received] == [expected.format(**fill)]
        assert stack.upstream.received[0].headers["Host"] == stack.upstream_host
    assert await healthy(stack)


async def post_chat(stack: HardStack, path: str) -> tuple[int, dict[str, str]]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            stack.url + path,
            json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
            allow_redirects=False,
        ) as resp,
    ):
        await resp.read()
        return resp.status, dict(resp.headers)


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize(
    "path", ["/openai/v1/chat/completions", "/openai/v1/models", "/anthropic/v1/messages"]
)
async def test_upstream_redirects_to_another_host_are_not_followed(
    make_hard_stack: HardFactory, status: int, path: str
) -> None:
    stack = await make_hard_stack()
    assert stack.attacker is not None
    location = f"http://{stack.attacker_host}/steal"
    stack.upstream.reply(Reply(status=status, headers={"Location": location}))
    answered, headers = await post_chat(stack, path)
    assert stack.attacker.received == []
    assert len(stack.upstream.received) == 1
    # Handed back to the client as the upstream's answer (parsed routes may refuse it).
    assert answered == status or answered >= 500
    if answered == status:
        assert headers["Location"] == location
    stack.upstream.reply(CHAT_ANSWER)
    assert await healthy(stack)

"""Bad input, routing, header handling and the unchanged relay of unparsed routes."""

from __future__ import annotations

from typing import Any

import aiohttp
import openai
import orjson
import pytest
from websockets.exceptions import InvalidStatus

from tests.graph.chat_builders import body, user
from tests.hardening.wire import raw_exchange
from tests.proxy.conftest import StackFactory
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import CHAT_ANSWER, get, post
from tests.proxy.stack import Stack
from turngate.proxy.body import MAX_JSON_DEPTH

CHAT = "/openai/v1/chat/completions"


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"x": value}
    return value


BAD_BODIES = [
    pytest.param(b"{not json", "invalid_json", id="not-json"),
    pytest.param(b"", "invalid_json", id="empty"),
    pytest.param(b"[1, 2]", "invalid_json", id="array-not-object"),
    pytest.param(b'{"model": "m", "messages": "\xff\xfe"}', "invalid_utf8", id="invalid-utf8"),
    pytest.param(orjson.dumps(nested(MAX_JSON_DEPTH + 1)), "json_too_deep", id="too-deep"),
    pytest.param(b"[" * 5000 + b"]" * 5000, "json_too_deep", id="deeper-than-orjson-allows"),
]


@pytest.mark.parametrize(("raw", "rule"), BAD_BODIES)
async def test_bad_bodies_get_the_apis_own_400_and_the_process_stays_up(
    stack: Stack, raw: bytes, rule: str
):
    status, headers, answer = await post(stack, CHAT, raw)
    assert status == 400
    assert headers["Turngate-Rejection"] == rule
    error = orjson.loads(answer)["error"]
    assert error["code"] == rule
    assert error["message"].startswith(f"turngate [{rule}]: ")
    assert stack.upstream.received == []
    assert (await get(stack, "/healthz"))[0] == 200


async def test_json_exactly_at_the_depth_limit_is_accepted(stack: Stack):
    stack.upstream.reply(CHAT_ANSWER)
    request = body(user("hi"))
    request["metadata"] = nested(MAX_JSON_DEPTH - 1)
    status, _headers, _answer = await post(stack, CHAT, request)
    assert status == 200
    assert len(stack.upstream.received) == 1


async def test_a_body_over_the_limit_is_413_before_anything_is_sent(make_stack: StackFactory):
    stack = await make_stack(max_body_bytes=1000)
    request = body(user("x" * 2000))
    status, headers, answer = await post(stack, CHAT, request)
    assert status == 413
    assert headers["Turngate-Rejection"] == "request_too_large"
    message = orjson.loads(answer)["error"]["message"]
    # Says how much, and which setting raises it.
    assert "1000 bytes" in message
    assert "--max-body-bytes" in message
    assert stack.upstream.received == []


async def test_a_chunked_body_over_the_limit_is_413(make_stack: StackFactory):
    stack = await make_stack(max_body_bytes=1000)

    async def chunks() -> Any:
        for _ in range(10):
            yield b" " * 200
        yield orjson.dumps(body(user("hi")))

    async with (
        aiohttp.ClientSession() as session,
        session.post(
            stack.url + CHAT, data=chunks(), headers={"Content-Type": "application/json"}
        ) as resp,
    ):
        assert resp.status == 413
        assert resp.headers["Turngate-Rejection"] == "request_too_large"
    assert stack.upstream.received == []


async def test_a_chunked_body_over_the_limit_that_arrives_at_once_is_413(
    make_stack: StackFactory,
):
    # No Content-Length to refuse it by, and the whole body is already in the buffer when
    # the handler reads it: the limit is still the body's, not the header's.
    stack = await make_stack(max_body_bytes=1000)
    raw = orjson.dumps(body(user("x" * 2000)))
    head = (
        b"POST /openai/v1/chat/completions HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    port = int(stack.url.rsplit(":", 1)[1])
    result = await raw_exchange(port, [head + b"%x\r\n%s\r\n0\r\n\r\n" % (len(raw), raw)])
    assert result.status == 413, result.data[:300]
    assert b"Turngate-Rejection: request_too_large" in result.data
    assert stack.upstream.received == []


async def test_a_wrong_content_type_is_415(stack: Stack):
    raw = orjson.dumps(body(user("hi")))
    status, headers, _answer = await post(stack, CHAT, raw, {"Content-Type": "text/plain"})
    assert status == 415
    assert headers["Turngate-Rejection"] == "unsupported_media_type"
    assert stack.upstream.received == []


async def test_an_unknown_prefix_is_404_json(stack: Stack):
    for path in ("/v1/chat/completions", "/openai/chat/completions", "/openaix/v1/models"):
        status, error = await get(stack, path)
        assert status == 404
        assert error["error"]["code"] == "no_route"
    assert stack.upstream.received == []


async def test_unknown_operation_is_404(stack: Stack):
    status, error = await get(stack, "/turngate/v1/operations/op_nope")
    assert status == 404
    assert error["error"]["code"] == "operation_not_found"


async def test_health_and_readiness(stack: Stack):
    assert await get(stack, "/healthz") == (200, {"status": "ok"})
    assert await get(stack, "/readyz") == (200, {"status": "ready"})
    await stack.store.close()
    status, answer = await get(stack, "/readyz")
    assert status == 503
    assert answer["status"] == "store unavailable"


async def test_a_store_that_cannot_claim_fails_closed_with_503(stack: Stack):
    await stack.store.close()
    status, headers, answer = await post(stack, CHAT, body(user("hi")))
    assert status == 503
    assert headers["Turngate-Rejection"] == "state_store_unavailable"
    assert orjson.loads(answer)["error"]["code"] == "state_store_unavailable"
    assert stack.upstream.received == []


@pytest.mark.parametrize(
    ("path", "upstream_path"),
    [
        ("/openai/v1/models?limit=2", "/v1/models?limit=2"),
        ("/openai/v1/embeddings", "/v1/embeddings"),
        ("/anthropic/v1/messages/count_tokens", "/v1/messages/count_tokens"),
        ("/gemini/v1beta/models/gemini-2.0-flash:countTokens?key=K", None),
        ("/gemini/v1beta/models?pageSize=5&key=K", None),
        ("/openai/v1/files/file%2Fabc", "/v1/files/file%2Fabc"),
    ],
)
async def test_unparsed_routes_are_relayed_unchanged(
    stack: Stack, path: str, upstream_path: str | None
):
    answer = b'{"object": "list", "data": []}'
    stack.upstream.reply(Reply(body=answer, headers={"x-request-id": "req_1"}))
    raw = b'{"input": "anything, even \xff not JSON"}'
    async with (
        aiohttp.ClientSession() as session,
        session.post(stack.url + path, data=raw, headers={"x-api-key": "k"}) as resp,
    ):
        assert resp.status == 200
        assert await resp.read() == answer
        assert resp.headers["x-request-id"] == "req_1"
        assert "Turngate-Operation-Id" not in resp.headers
    (received,) = stack.upstream.received
    expected = upstream_path or path.removeprefix("/gemini")
    assert received.path_qs == expected
    assert received.body == raw
    assert received.headers["x-api-key"] == "k"


async def test_relayed_get_streams_the_answer(stack: Stack):
    stack.upstream.reply(Reply(body=b"x" * 300_000, content_type="application/octet-stream"))
    async with (
        aiohttp.ClientSession() as session,
        session.get(stack.url + "/openai/v1/files/f/content") as resp,
    ):
        assert resp.status == 200
        assert await resp.read() == b"x" * 300_000
    (received,) = stack.upstream.received
    assert (received.method, received.body) == ("GET", b"")


async def test_upstream_redirects_are_not_followed(stack: Stack):
    stack.upstream.reply(Reply(status=307, headers={"Location": "http://example.com/steal"}))
    status, headers, _answer = await post(stack, CHAT, body(user("hi")))
    assert status == 307
    assert headers["Location"] == "http://example.com/steal"
    assert len(stack.upstream.received) == 1


async def test_hop_by_hop_headers_are_removed_and_auth_headers_pass_untouched(stack: Stack):
    sent = {
        "Authorization": "Bearer sk-abc",
        "x-api-key": "ant-key",
        "x-goog-api-key": "goog-key",
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "tools-2024",
        "OpenAI-Organization": "org-1",
        "OpenAI-Project": "proj-1",
        "Connection": "keep-alive, X-Private",
        "X-Private": "drop me (named by Connection)",
        "Keep-Alive": "timeout=5",
        "Proxy-Authorization": "Basic eA==",
        "TE": "trailers",
        "Turngate-Conversation-Id": "conv-1",
        "Idempotency-Key": "client-key",
        "X-Custom": "kept",
    }
    stack.upstream.reply(CHAT_ANSWER)
    status, _headers, _answer = await post(stack, CHAT, body(user("hi")), sent)
    assert status == 200
    (received,) = stack.upstream.received
    for name in (
        "Authorization",
        "x-api-key",
        "x-goog-api-key",
        "anthropic-version",
        "anthropic-beta",
        "OpenAI-Organization",
        "OpenAI-Project",
        "X-Custom",
    ):
        assert received.headers[name] == sent[name]
    for name in (
        "X-Private",
        "Keep-Alive",
        "Proxy-Authorization",
        "TE",
        "Turngate-Conversation-Id",
    ):
        assert name not in received.headers
    assert received.headers["Idempotency-Key"].startswith("turngate-")
    assert received.headers["Host"] == stack.upstream_host


async def test_the_upstream_url_cannot_be_steered_to_another_host(stack: Stack):
    for path in ("/openai/v1//evil.example/x", "/openai/v1/@evil.example/x"):
        async with aiohttp.ClientSession() as session, session.get(stack.url + path) as resp:
            assert resp.status == 200
    assert [r.path_qs for r in stack.upstream.received] == [
        "/v1//evil.example/x",
        "/v1/@evil.example/x",
    ]


async def test_a_websocket_is_refused_with_a_clear_error_and_nothing_sent(stack: Stack):
    # The Responses WebSocket mode (and Realtime) would carry requests turngate cannot check.
    sdk = openai.AsyncOpenAI(api_key="sk-test", base_url=stack.base("/openai/v1"), max_retries=0)
    with pytest.raises(InvalidStatus) as refused:
        async with sdk.responses.connect() as connection:
            await connection.send({"type": "response.create", "model": "gpt-4o", "input": "hi"})
    response = refused.value.response
    assert response.status_code == 501
    assert b"websocket_not_relayed" in response.body
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as raw:
            await http.ws_connect(stack.base("/anthropic") + "/v1/messages")
    assert raw.value.status == 501
    assert stack.upstream.received == []

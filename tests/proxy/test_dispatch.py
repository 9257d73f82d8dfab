"""The dispatch path over HTTP: what is sent, what is recorded, what the client gets back."""

from __future__ import annotations

import asyncio
import copy
from typing import Any, cast

import aiohttp
import orjson
import pytest
from yarl import URL

from tests.adapters.stream_faults import API_OF_FOLDER
from tests.adapters.test_stream_encoders import sdk_read
from tests.fixtures_dir import COUNTS, FIXTURES_DIR, FIXTURES_PRESENT, fixture_params, load_json
from tests.graph.test_validator_table import TABLE
from tests.proxy.conftest import StackFactory
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import CHAT_ANSWER, JSON, operation, post, states
from tests.proxy.stack import Stack
from turngate.adapters.relay import StreamRelay
from turngate.graph.codec import digest_bytes
from turngate.graph.model import ApiName
from turngate.graph.turn import AssistantTurn
from turngate.proxy.upstream import UpstreamTimeouts

CHAT = "/openai/v1/chat/completions"
TOOL_CALLS = "openai-chat/pai-nonstream-2-tool-calls"


def fixture_bytes(relative: str) -> bytes:
    return (FIXTURES_DIR / relative).read_bytes()


_PREFIX = {
    "api.openai.com": "/openai",
    "api.anthropic.com": "/anthropic",
    "generativelanguage.googleapis.com": "/gemini",
    "aiplatform.googleapis.com": "/gemini",
}


# Recorded requests the provider refused with a 400, which turngate refuses first.
REFUSED_BEFORE_THE_PROVIDER = {
    "openai-responses/pai-error-400-reasoning-item-order.request.json": (
        "responses_reasoning_unbound"
    ),
}


def recorded_exchanges() -> list[Any]:
    """Every recorded request with its recorded answer, the turngate path and the status."""
    if not FIXTURES_PRESENT:
        return fixture_params("*/*.request.json", arity=4)
    rows = [line.split("\t") for line in (FIXTURES_DIR / "MANIFEST.tsv").read_text().splitlines()]
    described = {row[0]: row[4] for row in rows[1:]}
    params = []
    for name, description in described.items():
        if not name.endswith(".request.json"):
            continue
        url = URL(description.removeprefix("POST ").split(";", 1)[0])
        stem = name.removesuffix(".request.json")
        answer = next((stem + e for e in (".json", ".sse") if stem + e in described), None)
        if answer is None:
            continue
        status = 200
        if answer.endswith(".json"):
            status = int(described[answer].split(";", 1)[0].removeprefix("HTTP "))
        path = _PREFIX[url.host or ""] + url.raw_path_qs
        params.append(pytest.param(name, answer, path, status, id=stem))
    return params


@pytest.mark.parametrize(("request_file", "answer", "path", "status_code"), recorded_exchanges())
async def test_recorded_requests_go_up_byte_for_byte_and_the_answer_comes_back(
    stack: Stack, request_file: str, answer: str, path: str, status_code: int
):
    raw = fixture_bytes(request_file)
    stack.upstream.reply(Reply.fixture(answer, status=status_code))
    status, headers, body = await post(stack, path, raw, {"Authorization": "Bearer k"})

    refused_first = REFUSED_BEFORE_THE_PROVIDER.get(request_file)
    if refused_first is not None:
        # The provider answered this one with a 400; turngate refuses it before sending.
        assert (status_code, status, headers["Turngate-Rejection"]) == (400, 400, refused_first)
        assert stack.upstream.received == []
        return
    relay = None
    if answer.endswith(".sse"):
        relay = StreamRelay(cast(ApiName, API_OF_FOLDER[answer.split("/", 1)[0]]))
        # A stream goes through the commit boundary: the client gets exactly what the relay
        # makes of the recorded bytes (text previews as they came, tool calls whole, marks).
        relayed = relay.feed(fixture_bytes(answer))
        tail, outcome = relay.finish()
        relayed += tail
        assert isinstance(outcome, AssistantTurn), outcome
        assert (status, body) == (status_code, relayed)
        # And the official SDK makes of it the same final message as of the recording.
        reading = sdk_read(relay.api, body)
        assert reading.error is None, reading.error
        assert reading == sdk_read(relay.api, fixture_bytes(answer))
    else:
        assert (status, body) == (status_code, fixture_bytes(answer))
    (received,) = stack.upstream.received
    assert received.body == raw
    assert received.path_qs == path.split("/", 2)[2].join(["/", ""])
    assert received.headers["Authorization"] == "Bearer k"
    record = await operation(stack, headers["Turngate-Operation-Id"])
    assert record["manifest"]["requestDigest"] == digest_bytes(raw)
    assert received.headers["Idempotency-Key"] == record["manifest"]["idempotencyKey"]
    assert headers["Turngate-Manifest-Digest"] == record["manifestDigest"]
    assert headers["Turngate-Attempt"] == "1"
    steps = [("PREPARED", None), ("DISPATCHING", "claim"), ("SENT", "send")]
    if relay is not None:
        steps.append(("STREAMING", "stream"))
        if relay.handle is not None:
            # The provider's handle is bound as soon as the relay sees it, before the commit.
            steps.append(("STREAMING", "bind"))
            assert record["handle"] == relay.handle
    if status_code == 200:
        steps.append(("COMMITTED", "commit"))
    else:
        steps.append(("FAILED", "fail"))
    assert [(change["state"], change["transition"]) for change in record["history"]] == steps
    COUNTS["recorded exchanges replayed through the proxy"] += 1


@pytest.mark.parametrize(
    ("request_body", "verdict", "rule"),
    [pytest.param(b, s, r, id=name) for name, b, s, r in TABLE],
)
async def test_every_invalid_sequence_is_refused_and_nothing_is_sent(
    stack: Stack, request_body: dict[str, Any], verdict: str, rule: str
):
    status, headers, body = await post(stack, CHAT, request_body)
    assert status == 400
    assert headers["Turngate-Rejection"] == rule
    error = orjson.loads(body)["error"]
    assert error["code"] == rule
    assert error["message"].startswith(f"turngate [{rule}]: ")
    assert "Turngate-Operation-Id" not in headers
    assert stack.upstream.received == []


async def test_a_non_streaming_answer_is_committed_with_its_handle(stack: Stack):
    stack.upstream.reply(Reply.fixture(TOOL_CALLS + ".json"))
    _status, headers, _body = await post(stack, CHAT, fixture_bytes(TOOL_CALLS + ".request.json"))
    record = await operation(stack, headers["Turngate-Operation-Id"])
    assert record["state"] == "COMMITTED"
    assert record["handle"] == load_json(FIXTURES_DIR / (TOOL_CALLS + ".json"))["id"]  # type: ignore[index]


def _broken_tool_call(change: str) -> dict[str, Any]:
    answer = copy.deepcopy(load_json(FIXTURES_DIR / (TOOL_CALLS + ".json")))
    assert isinstance(answer, dict)
    call = answer["choices"][0]["message"]["tool_calls"][1]
    if change == "truncated arguments":
        call["function"]["arguments"] = '{"path": "test'
    elif change == "arguments not an object":
        call["function"]["arguments"] = '["test.txt"]'
    elif change == "arguments break the schema":
        call["function"]["arguments"] = '{"path": 7}'
    elif change == "extra property under additionalProperties false":
        call["function"]["arguments"] = '{"path": "a", "mode": "w"}'
    elif change == "undeclared tool":
        call["function"]["name"] = "format_disk"
    return answer


@pytest.mark.parametrize(
    "change",
    [
        "truncated arguments",
        "arguments not an object",
        "arguments break the schema",
        "extra property under additionalProperties false",
        "undeclared tool",
    ],
)
async def test_an_answer_with_an_invalid_tool_call_never_reaches_the_client(
    stack: Stack, change: str
):
    stack.upstream.reply(Reply.json(_broken_tool_call(change)))
    status, headers, body = await post(stack, CHAT, fixture_bytes(TOOL_CALLS + ".request.json"))
    assert status == 502
    assert headers["Turngate-Rejection"] == "invalid_tool_call"
    error = orjson.loads(body)["error"]
    assert error["code"] == "invalid_tool_call"
    assert "call_TmlTVWQbzrXCZ4jNsCVNbNqu" in error["message"]
    assert b"tool_calls" not in body
    record = await operation(stack, headers["Turngate-Operation-Id"])
    assert record["state"] == "FAILED"
    assert record["history"][-1]["detail"] == "invalid_tool_call"


async def test_an_upstream_error_is_relayed_unchanged_and_fails_the_operation(stack: Stack):
    stem = "anthropic/pai-error-400-invalid-request"
    stack.upstream.reply(Reply.fixture(stem + ".json", status=529, headers={"x-should-retry": "1"}))
    status, headers, body = await post(stack, CHAT, fixture_bytes(TOOL_CALLS + ".request.json"))
    assert (status, body) == (529, fixture_bytes(stem + ".json"))
    assert headers["x-should-retry"] == "1"
    record = await operation(stack, headers["Turngate-Operation-Id"])
    assert record["state"] == "FAILED"
    assert record["history"][-1]["detail"] == "upstream status 529"


async def test_a_body_cut_mid_answer_fails_the_operation(stack: Stack):
    stack.upstream.reply(Reply.fixture(TOOL_CALLS + ".json", drop_after=100))
    status, headers, body = await post(stack, CHAT, fixture_bytes(TOOL_CALLS + ".request.json"))
    assert status == 502
    assert orjson.loads(body)["error"]["code"] == "upstream_unavailable"
    # Nothing reached the client and the provider runs nothing itself: over, not UNKNOWN.
    record = await operation(stack, headers["Turngate-Operation-Id"])
    assert states(record)[-2:] == ["SENT", "FAILED"]


async def test_a_body_cut_with_a_provider_run_tool_leaves_the_operation_unknown(stack: Stack):
    stem = "anthropic/pai-nonstream-after-4-tool-results"
    stack.upstream.reply(Reply.fixture(stem + ".json", drop_after=100))
    request = orjson.loads(fixture_bytes(stem + ".request.json"))
    request["tools"].append({"type": "web_search_20250305", "name": "web_search"})
    status, headers, _body = await post(stack, "/anthropic/v1/messages", request)
    assert status == 502
    # The provider may have searched the web already: unknown, not sent again.
    assert headers["x-should-retry"] == "false"
    record = await operation(stack, headers["Turngate-Operation-Id"])
    assert states(record)[-2:] == ["SENT", "UNKNOWN"]


async def _read_into(resp: aiohttp.ClientResponse, received: bytearray) -> None:
    async for chunk in resp.content.iter_any():
        received += chunk


async def test_a_stream_cut_midway_breaks_the_client_stream_and_is_over(stack: Stack):
    stem = "openai-chat/pai-after-parallel-tool-results"
    # 400 bytes: the upstream is inside its first frame, so a turn has started upstream.
    stack.upstream.reply(Reply.fixture(stem + ".sse", drop_after=400))
    received = bytearray()
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            stack.url + CHAT, data=fixture_bytes(stem + ".request.json"), headers=JSON
        ) as resp,
    ):
        assert resp.status == 200
        with pytest.raises(aiohttp.ClientPayloadError):
            await _read_into(resp, received)
        operation_id = resp.headers["Turngate-Operation-Id"]
    # The API's own error event, then an aborted connection: never [DONE], no tool call.
    assert received.startswith(b"data: {")
    assert b"[DONE]" not in received
    assert b"tool_calls" not in received
    *_, last = received.rstrip().split(b"\n\n")
    assert orjson.loads(last.removeprefix(b"data: "))["error"]["code"] == "stream_truncated"
    # Bytes came, so turngate does not retry it: one send. Nothing the provider runs and no
    # tool call delivered: the attempt is over (FAILED), never committed, its revision free.
    assert len(stack.upstream.received) == 1
    record = await operation(stack, operation_id)
    assert states(record)[-3:] == ["SENT", "STREAMING", "FAILED"]
    assert record["history"][-1]["detail"] == "stream_truncated"
    assert "COMMITTED" not in states(record)


async def test_an_upstream_that_never_answers_times_out_as_unknown(make_stack: StackFactory):
    stack = await make_stack(timeouts=UpstreamTimeouts(connect=2.0, read=0.3))
    stack.upstream.reply(Reply(hang=True))
    status, headers, body = await post(stack, CHAT, fixture_bytes(TOOL_CALLS + ".request.json"))
    assert status == 504
    assert headers["Turngate-Rejection"] == "upstream_timeout"
    # Which timeout, and the flag that sets it: an operator knows what to raise.
    assert "within the read timeout (--upstream-read-timeout)" in body.decode()
    record = await operation(stack, headers["Turngate-Operation-Id"])
    assert states(record)[-2:] == ["SENT", "UNKNOWN"]


async def test_an_upstream_that_refuses_connections_fails_the_operation(
    make_stack: StackFactory, unused_tcp_port: int
):
    closed = f"http://127.0.0.1:{unused_tcp_port}"
    stack = await make_stack(upstream_openai=closed)
    status, headers, body = await post(stack, CHAT, fixture_bytes(TOOL_CALLS + ".request.json"))
    assert status == 502
    assert orjson.loads(body)["error"]["code"] == "upstream_unavailable"
    record = await operation(stack, headers["Turngate-Operation-Id"])
    # Nothing can have left: the attempt is over, not unknown.
    assert states(record)[-2:] == ["DISPATCHING", "FAILED"]


async def test_a_second_dispatch_for_the_same_conversation_revision_conflicts(stack: Stack):
    stack.upstream.reply(Reply.fixture(TOOL_CALLS + ".json"))
    raw = fixture_bytes(TOOL_CALLS + ".request.json")
    conversation = {"Turngate-Conversation-Id": "conv-42"}
    first_status, first, _ = await post(stack, CHAT, raw, conversation)
    assert first_status == 200
    record = await operation(stack, first["Turngate-Operation-Id"])
    assert record["manifest"]["conversationId"] == "conv-42"
    assert record["manifest"]["conversationRevision"] == 0

    # The same request again is a retry: the committed answer, replayed (issue 6).
    status, headers, body = await post(stack, CHAT, raw, conversation)
    assert (status, headers["Turngate-Replay"]) == (200, "1")
    # Another request for the same revision conflicts with its committed turn.
    other = orjson.dumps({**orjson.loads(raw), "temperature": 0.5})
    status, headers, body = await post(stack, CHAT, other, conversation)
    assert status == 409
    # It stands: no wait ends it, and the SDKs are told not to retry it.
    assert "Retry-After" not in headers
    assert headers["x-should-retry"] == "false"
    assert headers["Turngate-Rejection"] == "dispatch_conflict"
    assert orjson.loads(body)["error"]["code"] == "dispatch_conflict"
    assert len(stack.upstream.received) == 1
    # Without the header each request is its own operation.
    assert (await post(stack, CHAT, raw))[0] == 200


async def test_concurrent_dispatches_of_one_revision_send_exactly_once(stack: Stack):
    stack.upstream.reply(Reply.fixture(TOOL_CALLS + ".json", delay=0.2))
    raw = fixture_bytes(TOOL_CALLS + ".request.json")
    conversation = {"Turngate-Conversation-Id": "conv-race"}
    results = await asyncio.gather(*(post(stack, CHAT, raw, conversation) for _ in range(8)))
    # One is sent; the seven others, the same request, wait for its answer and replay it.
    assert [status for status, _h, _b in results] == [200] * 8
    assert sum(headers.get("Turngate-Replay") == "1" for _s, headers, _b in results) == 7
    assert len({body for _s, _h, body in results}) == 1
    assert len(stack.upstream.received) == 1


def _chat_call(answer: dict[str, Any]) -> dict[str, Any]:
    call: dict[str, Any] = answer["choices"][0]["message"]["tool_calls"][0]["function"]
    return call


def _responses_call(answer: dict[str, Any]) -> dict[str, Any]:
    call: dict[str, Any] = answer["output"][0]
    return call


def _anthropic_call(answer: dict[str, Any]) -> dict[str, Any]:
    call: dict[str, Any] = answer["content"][1]
    return call


def _gemini_call(answer: dict[str, Any]) -> dict[str, Any]:
    call: dict[str, Any] = answer["candidates"][0]["content"]["parts"][0]["functionCall"]
    return call


# (route, recorded exchange with tool calls, the first call, arguments that break its schema)
TOOL_ANSWERS = [
    pytest.param(CHAT, TOOL_CALLS, _chat_call, ("arguments", '{"path": 7}'), id="openai_chat"),
    pytest.param(
        "/openai/v1/responses",
        "openai-responses/pai-nonstream-function-call",
        _responses_call,
        ("arguments", '{"country": 7}'),
        id="openai_responses",
    ),
    pytest.param(
        "/anthropic/v1/messages",
        "anthropic/pai-nonstream-4-parallel-tool-use",
        _anthropic_call,
        ("input", {"name": 7}),
        id="anthropic",
    ),
    pytest.param(
        "/gemini/v1beta/models/gemini-3-flash-preview:generateContent",
        "gemini/pai-nonstream-3-parallel-function-calls",
        _gemini_call,
        ("args", {"unexpected": 1}),
        id="gemini",
    ),
]


@pytest.mark.parametrize("break_by", ["arguments", "tool name"])
@pytest.mark.parametrize(("path", "stem", "first_call", "bad_arguments"), TOOL_ANSWERS)
async def test_every_api_refuses_an_answer_whose_tool_call_is_invalid(
    stack: Stack,
    path: str,
    stem: str,
    first_call: Any,
    bad_arguments: tuple[str, Any],
    break_by: str,
):
    answer = copy.deepcopy(load_json(FIXTURES_DIR / (stem + ".json")))
    assert isinstance(answer, dict)
    call = first_call(answer)
    if break_by == "arguments":
        call[bad_arguments[0]] = bad_arguments[1]
    else:
        call["name"] = "format_disk"
    stack.upstream.reply(Reply.json(answer))
    status, headers, body = await post(stack, path, fixture_bytes(stem + ".request.json"))
    assert status == 502
    assert headers["Turngate-Rejection"] == "invalid_tool_call"
    assert b"invalid_tool_call" in body
    # Nothing of the answer reaches the client, not even its handle.
    handle = answer.get("id") or answer.get("responseId")
    assert isinstance(handle, str)
    assert handle.encode() not in body
    record = await operation(stack, headers["Turngate-Operation-Id"])
    assert record["state"] == "FAILED"
    # The unchanged recorded answer, by contrast, is committed.
    stack.upstream.reply(Reply.fixture(stem + ".json"))
    assert (await post(stack, path, fixture_bytes(stem + ".request.json")))[0] == 200


async def test_shadow_mode_sends_the_original_bytes_of_an_invalid_sequence(
    make_stack: StackFactory, caplog: pytest.LogCaptureFixture
):
    stack = await make_stack(mode="shadow")
    stack.upstream.reply(CHAT_ANSWER)
    _name, request_body, _verdict, rule = TABLE[0]
    raw = orjson.dumps(request_body)
    status, headers, _body = await post(stack, CHAT, raw)
    assert status == 200
    assert stack.upstream.received[0].body == raw
    assert "Turngate-Rejection" not in headers
    assert any(rule in r.getMessage() and "shadow" in r.getMessage() for r in caplog.records)


async def test_enforce_no_tools_enforces_tool_free_requests_and_shadows_the_rest(
    make_stack: StackFactory,
):
    stack = await make_stack(mode="enforce-no-tools")
    stack.upstream.reply(CHAT_ANSWER)
    tool_free = {"model": "gpt-4o", "messages": [{"role": "user", "content": [{"type": "x"}]}]}
    status, headers, _body = await post(stack, CHAT, tool_free)
    assert (status, headers["Turngate-Rejection"]) == (400, "unknown_kind")
    assert stack.upstream.received == []

    _name, with_tools, _verdict, _rule = TABLE[0]
    status, headers, _body = await post(stack, CHAT, with_tools)
    assert status == 200
    assert stack.upstream.received[0].json() == with_tools


async def test_a_bug_before_sending_is_the_apis_own_500_and_nothing_is_sent(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
):
    from turngate.adapters.openai_chat import ADAPTER

    def broken(body: Any, route: Any = None) -> Any:
        raise KeyError("bug")

    monkeypatch.setattr(ADAPTER, "parse_request", broken)
    status, headers, body = await post(stack, CHAT, fixture_bytes(TOOL_CALLS + ".request.json"))
    assert status == 500
    assert headers["Turngate-Rejection"] == "internal_error"
    assert orjson.loads(body)["error"]["code"] == "internal_error"
    assert stack.upstream.received == []

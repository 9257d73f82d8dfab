"""Claude on Vertex AI: the anthropic SDK's ``AnthropicVertex`` through turngate's /gemini.

With ``--upstream-gemini`` set to a Vertex AI host (as for Gemini on Vertex), an application
points ``AnthropicVertex(base_url=…/gemini/v1)`` at turngate. The SDK moves the model into
the path (``…/publishers/anthropic/models/{model}:rawPredict``, ``:streamRawPredict`` for a
stream) and sends an Anthropic Messages body: turngate checks it as one, answers refusals in
Anthropic's envelope, and holds each streamed call until it is whole.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import orjson
import pytest

from tests.adapters.anthropic_builders import assistant, body, tool_result, tool_use, user
from tests.fixtures_dir import FIXTURES_PRESENT
from tests.proxy.conftest import StackFactory
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import claude_answer
from tests.proxy.sdk_support import MODES, call, consume
from tests.proxy.stack import Stack

PROJECT, REGION = "acme-agents", "us-east5"
TOKEN = "ya29.test-ACCESS-TOKEN-4f1e2d3c"
MODEL = "claude-sonnet-4-5"
PATH = f"/v1/projects/{PROJECT}/locations/{REGION}/publishers/anthropic/models/{MODEL}"
VALID = body(
    user("weather in Paris?"), assistant(tool_use("toolu_1")), user(tool_result("toolu_1"))
)
ORPHAN = body(user("hi"), assistant("hello"), user(tool_result("toolu_7")))


@pytest.fixture
async def stack(make_stack: StackFactory) -> Stack:
    return await make_stack(record_bodies=True)


@pytest.fixture(params=MODES)
async def vertex(request: pytest.FixtureRequest, stack: Stack) -> AsyncIterator[Any]:
    cls = anthropic.AnthropicVertex if request.param == "sync" else anthropic.AsyncAnthropicVertex
    client = cls(
        region=REGION,
        project_id=PROJECT,
        access_token=TOKEN,
        base_url=stack.base("/gemini/v1"),
        max_retries=0,
    )
    client.mode = request.param  # type: ignore[attr-defined]
    yield client
    await call(request.param, client.close)


async def test_a_tool_conversation_goes_up_as_the_clients_bytes(vertex: Any, stack: Stack):
    stack.upstream.reply(claude_answer("It is 18C in Paris."))
    raw = await call(vertex.mode, vertex.messages.with_raw_response.create, **VALID)
    assert raw.headers["Turngate-Operation-Id"]
    parsed = raw.parse() if vertex.mode == "sync" else await raw.parse()
    assert parsed.content[0].text == "It is 18C in Paris."
    (sent,) = stack.upstream.received
    assert sent.path_qs == f"{PATH}:rawPredict"
    assert sent.headers["Authorization"] == f"Bearer {TOKEN}"
    assert sent.body == stack.client_bodies[0]
    assert "model" not in orjson.loads(sent.body)


async def test_an_invalid_sequence_is_refused_in_anthropics_envelope(vertex: Any, stack: Stack):
    with pytest.raises(anthropic.BadRequestError, match=r"orphan_result") as raised:
        await call(vertex.mode, vertex.messages.create, **ORPHAN)
    assert raised.value.response.headers["Turngate-Rejection"] == "orphan_result"
    assert stack.upstream.received == []


@pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures ABSENT")
async def test_a_stream_holds_each_call_until_it_is_whole(vertex: Any, stack: Stack):
    # A recorded stream of two weather calls whose arguments came in 21 pieces.
    stack.upstream.reply(Reply.fixture("anthropic/cc-parallel-2-tool-use-with-args.sse"))
    weather = {"name": "weather", "input_schema": {"type": "object"}}
    stream = await call(
        vertex.mode,
        vertex.messages.create,
        model=MODEL,
        max_tokens=1024,
        messages=[user("Weather in Paris and in Rome?")],
        tools=[weather],
        stream=True,
    )
    events = await consume(vertex.mode, stream)
    calls = [
        e for e in events if e.type == "content_block_start" and e.content_block.type == "tool_use"
    ]
    pieces = [
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    assert len(calls) == 2
    # One piece per call, each the call's whole arguments.
    assert len(pieces) == 2
    assert all(isinstance(orjson.loads(piece), dict) for piece in pieces)
    (sent,) = stack.upstream.received
    assert sent.path_qs == f"{PATH}:streamRawPredict"


async def test_token_counting_on_vertex_is_relayed(make_stack: StackFactory):
    stack = await make_stack()
    stack.upstream.reply(Reply.json({"input_tokens": 12}))
    async with anthropic.AsyncAnthropicVertex(
        region=REGION, project_id=PROJECT, access_token=TOKEN, base_url=stack.base("/gemini/v1")
    ) as client:
        counted = await client.messages.count_tokens(model=MODEL, messages=[user("hi")])
    assert counted.input_tokens == 12
    (sent,) = stack.upstream.received
    assert sent.path_qs.endswith("/publishers/anthropic/models/count-tokens:rawPredict")

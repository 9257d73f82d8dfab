"""Azure OpenAI through turngate: the openai SDK's ``AzureOpenAI`` client (deployments API,
``api-key`` header, ``?api-version=``) and ``OpenAI`` aimed at a resource's ``/openai/v1``.

With ``--upstream-azure https://NAME.openai.azure.com`` the application swaps its endpoint
for turngate's ``/azure``; every chat request is checked as on ``/openai/v1``, and the
``api-key`` is a credential like any other: passed through, never logged, and the scope of
replays.
"""

from __future__ import annotations

import copy
import io
import logging
from collections.abc import AsyncIterator
from typing import Any

import openai
import orjson
import pytest

from tests.fixtures_dir import FIXTURES_DIR, FIXTURES_PRESENT
from tests.graph.chat_builders import assistant, body, call, tool, user
from tests.proxy.conftest import StackFactory
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import CHAT_ANSWER, get
from tests.proxy.sdk_support import MODES, consume
from tests.proxy.sdk_support import call as sdk_call
from tests.proxy.stack import Stack

AZURE_KEY = "azure-test-KEY-5c4b3a29181706f5"
OTHER_KEY = "azure-test-KEY-0e1d2c3b4a596877"
API_VERSION = "2024-10-21"
VALID = body(user("weather in Paris?"), assistant(calls=[call("call_1")]), tool("call_1"))
ORPHAN = body(user("hi"), assistant("hello"), tool("call_7"))


def azure_client(stack: Stack, key: str = AZURE_KEY) -> openai.AsyncAzureOpenAI:
    return openai.AsyncAzureOpenAI(
        azure_endpoint=stack.base("/azure"), api_key=key, api_version=API_VERSION, max_retries=0
    )


@pytest.fixture
async def stack(make_stack: StackFactory) -> Stack:
    return await make_stack(azure=True, record_bodies=True)


@pytest.fixture(params=MODES)
async def azure(request: pytest.FixtureRequest, stack: Stack) -> AsyncIterator[Any]:
    cls = openai.AzureOpenAI if request.param == "sync" else openai.AsyncAzureOpenAI
    client = cls(
        azure_endpoint=stack.base("/azure"),
        api_key=AZURE_KEY,
        api_version=API_VERSION,
        max_retries=0,
    )
    client.mode = request.param  # type: ignore[attr-defined]
    yield client
    await sdk_call(request.param, client.close)


async def test_a_deployment_chat_request_goes_up_as_the_clients_bytes(azure: Any, stack: Stack):
    stack.upstream.reply(CHAT_ANSWER)
    raw = await sdk_call(azure.mode, azure.chat.completions.with_raw_response.create, **VALID)
    assert raw.headers["Turngate-Operation-Id"]
    (sent,) = stack.upstream.received
    assert sent.path_qs == f"/openai/deployments/gpt-4o/chat/completions?api-version={API_VERSION}"
    assert sent.headers["api-key"] == AZURE_KEY
    assert sent.body == stack.client_bodies[0]


async def test_an_invalid_deployment_chat_request_is_refused_and_nothing_sent(
    azure: Any, stack: Stack
):
    with pytest.raises(openai.BadRequestError, match=r"turngate \[orphan_result\]"):
        await sdk_call(azure.mode, azure.chat.completions.create, **ORPHAN)
    assert stack.upstream.received == []


async def test_responses_on_azure_are_checked(azure: Any, stack: Stack):
    stray = {"type": "function_call_output", "call_id": "call_9", "output": "18C"}
    with pytest.raises(openai.BadRequestError, match=r"orphan_result"):
        await sdk_call(
            azure.mode,
            azure.responses.create,
            model="gpt-4o",
            input=[{"role": "user", "content": "hi"}, stray],
        )
    assert stack.upstream.received == []


FILTERS = {
    "hate": {"filtered": False, "severity": "safe"},
    "self_harm": {"filtered": False, "severity": "safe"},
}
# Azure opens a stream with the prompt's filter results: no choices, an empty id and model.
PROMPT_FILTERED = {
    "choices": [],
    "created": 0,
    "id": "",
    "model": "",
    "object": "",
    "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": FILTERS}],
}


def as_azure_streams(recorded: str) -> bytes:
    """A recorded OpenAI stream as Azure writes it: the prompt filter event first, and each
    choice's content filter results."""
    events = [b"data: " + orjson.dumps(PROMPT_FILTERED) + b"\n\n"]
    for block in (FIXTURES_DIR / recorded).read_bytes().split(b"\n\n"):
        written = block
        if block.startswith(b"data: {"):
            event = orjson.loads(block.removeprefix(b"data: "))
            for choice in event.get("choices", []):
                choice["content_filter_results"] = FILTERS
            written = b"data: " + orjson.dumps(event)
        if written.strip():
            events.append(written + b"\n\n")
    return b"".join(events)


@pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures ABSENT")
async def test_an_azure_stream_relays_whole_tool_calls(azure: Any, stack: Stack):
    recorded = "openai-chat/pai-long-tool-args"
    request = orjson.loads((FIXTURES_DIR / f"{recorded}.request.json").read_bytes())
    body = as_azure_streams(f"{recorded}.sse")
    stack.upstream.reply(Reply(body=body, content_type="text/event-stream"))
    stream = await sdk_call(azure.mode, azure.chat.completions.create, **request)
    chunks = await consume(azure.mode, stream)
    assert chunks[0].choices == []
    assert chunks[0].model_extra["prompt_filter_results"][0]["prompt_index"] == 0
    pieces = [
        delta
        for chunk in chunks
        for choice in chunk.choices
        for delta in choice.delta.tool_calls or []
        if delta.function and delta.function.arguments
    ]
    # The call's arguments arrive in one piece, complete JSON (held until whole).
    assert len(pieces) == 1
    assert isinstance(orjson.loads(pieces[0].function.arguments), dict)
    (sent,) = stack.upstream.received
    assert sent.path_qs.startswith(f"/openai/deployments/{request['model']}/chat/completions")


async def test_the_v1_api_with_the_openai_client(stack: Stack):
    stack.upstream.reply(CHAT_ANSWER)
    async with openai.AsyncOpenAI(
        base_url=stack.base("/azure/openai/v1"), api_key=AZURE_KEY, max_retries=0
    ) as client:
        await client.chat.completions.create(**VALID)
        with pytest.raises(openai.BadRequestError, match=r"orphan_result"):
            await client.chat.completions.create(**ORPHAN)
    (sent,) = stack.upstream.received
    assert sent.path_qs == "/openai/v1/chat/completions"


async def test_replays_never_cross_azure_keys(stack: Stack):
    """The same Idempotency-Key and body from two api-keys are two operations: the second
    caller is never handed the first one's answer."""
    stack.upstream.reply(CHAT_ANSWER)
    for key in (AZURE_KEY, AZURE_KEY, OTHER_KEY):
        async with azure_client(stack, key) as client:
            await client.chat.completions.create(
                **VALID, extra_headers={"Idempotency-Key": "job-7"}
            )
    # The repeat with the same key is replayed; the other key's request is sent.
    assert [r.headers["api-key"] for r in stack.upstream.received] == [AZURE_KEY, OTHER_KEY]


async def test_the_azure_key_never_reaches_a_log_or_the_state(
    stack: Stack, caplog: pytest.LogCaptureFixture
):
    stack.upstream.reply(CHAT_ANSWER)
    with caplog.at_level(logging.DEBUG):
        async with azure_client(stack) as client:
            raw = await client.chat.completions.with_raw_response.create(**VALID)
            with pytest.raises(openai.BadRequestError):
                await client.chat.completions.create(**ORPHAN)
    assert AZURE_KEY not in caplog.text
    status, record = await get(
        stack, f"/turngate/v1/operations/{raw.headers['Turngate-Operation-Id']}"
    )
    assert status == 200
    assert AZURE_KEY not in orjson.dumps(record).decode()


async def test_without_an_azure_upstream_the_prefix_says_how_to_set_one(make_stack: StackFactory):
    stack = await make_stack()
    async with azure_client(stack) as client:
        with pytest.raises(openai.NotFoundError, match=r"--upstream-azure"):
            await client.chat.completions.create(**VALID)
    assert stack.upstream.received == []


@pytest.mark.skipif(not FIXTURES_PRESENT, reason="recorded fixtures ABSENT")
async def test_a_background_response_retrieved_on_azure_has_its_calls_checked(stack: Stack):
    recorded = orjson.loads(
        (FIXTURES_DIR / "openai-responses/pai-nonstream-function-call.json").read_bytes()
    )
    ask = orjson.loads(
        (FIXTURES_DIR / "openai-responses/pai-nonstream-function-call.request.json").read_bytes()
    )
    bad = copy.deepcopy(recorded)
    bad["output"][0]["arguments"] = '{"country": 7}'  # the schema asks for a string
    queued = {**recorded, "background": True, "status": "queued", "output": []}
    stack.upstream.replies(Reply.json(queued), Reply.json({**bad, "background": True}))
    async with azure_client(stack) as client:
        started = await client.responses.create(
            **{k: v for k, v in ask.items() if k != "stream"}, background=True
        )
        with pytest.raises(openai.APIStatusError) as raised:
            await client.responses.retrieve(started.id)
    assert raised.value.status_code == 502
    assert raised.value.response.headers["Turngate-Rejection"] == "invalid_tool_call"
    assert stack.upstream.received[1].path_qs.startswith(f"/openai/responses/{started.id}?")


async def test_an_azure_batch_file_is_checked_at_upload(stack: Stack):
    line = {"custom_id": "orphan", "method": "POST", "url": "/chat/completions", "body": ORPHAN}
    async with azure_client(stack) as client:
        with pytest.raises(openai.BadRequestError, match=r"line 1 \('orphan'\)"):
            await client.files.create(
                file=("batch.jsonl", io.BytesIO(orjson.dumps(line) + b"\n")), purpose="batch"
            )
    assert stack.upstream.received == []

"""A message batch's results are read through turngate, their tool calls checked.

The anthropic SDK's ``messages.batches.results(id)`` retrieves the batch and reads the
``results_url`` it names: an address on Anthropic's own host, which would take the request
(and the API key) past the sidecar, its egress proxy and network policy. turngate answers
every batch object (created, retrieved, listed, cancelled) with that address below its own
/anthropic prefix, so the results come back through it; and for a batch it created, each
answer's tool calls are checked against its request's tools, as a chat answer's are, a
result whose call breaks them answered as an errored result instead.
"""

from __future__ import annotations

import io
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import orjson
import pytest

from tests.adapters.anthropic_builders import body, tool_use, user
from tests.adapters.gemini_builders import call as gemini_call
from tests.adapters.gemini_builders import text as gemini_text
from tests.adapters.gemini_builders import user as gemini_user
from tests.graph.chat_builders import body as chat_body
from tests.graph.chat_builders import user as chat_user
from tests.proxy.conftest import StackFactory
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import claude_answer, genai_sdk
from tests.proxy.sdk_support import GENAI_AIOHTTP_WARNING, MODES, call
from tests.proxy.stack import ANTHROPIC_KEY, OPENAI_KEY, Stack
from tests.proxy.test_batches import MESSAGE_BATCH
from tests.proxy.test_openai_batch_files import FILE as OPENAI_FILE
from tests.proxy.test_openai_batch_files import jsonl as openai_jsonl
from tests.proxy.test_openai_batch_files import line as openai_line
from turngate.adapters import get_adapter
from turngate.adapters.base import RouteInfo
from turngate.graph.schema_check import OpenToolset, ToolSchemas
from turngate.proxy.batch_results import ResultLines, checked_inline
from turngate.proxy.batch_tools import (
    BatchToolsets,
    learn,
    recalled,
    remember,
    restored,
    stored,
)
from turngate.proxy.tool_calls import SchemaCache
from turngate.proxy.turn_check import call_schemas
from turngate.state.memory import MemoryStore
from turngate.state.sqlite import SQLiteStore

BATCH = "msgbatch_01"
RESULTS_PATH = f"/v1/messages/batches/{BATCH}/results"
RESULT = {
    "custom_id": "one",
    "result": {"type": "succeeded", "message": orjson.loads(claude_answer("18C").body)},
}


def ended(stack: Stack, *, spaced: bool = False) -> bytes:
    """The batch as the provider answers it once it has ended: its results on its own host."""
    batch = {**MESSAGE_BATCH, "id": BATCH, "processing_status": "ended"}
    batch["results_url"] = f"http://{stack.upstream_host}{RESULTS_PATH}"
    option = orjson.OPT_INDENT_2 if spaced else 0
    return orjson.dumps(batch, option=option)


@pytest.fixture
async def stack(make_stack: StackFactory, caplog: pytest.LogCaptureFixture) -> Stack:
    # turngate's access log tells what reached it.
    caplog.set_level(logging.INFO, logger="turngate.access")
    return await make_stack()


def client_in(mode: str, sync: Any, asynchronous: Any, **options: Any) -> Any:
    """The SDK's sync or async client, told which it is (``mode``), with no retries."""
    client = (sync if mode == "sync" else asynchronous)(max_retries=0, **options)
    client.mode = mode
    return client


@pytest.fixture(params=MODES)
async def claude(request: pytest.FixtureRequest, stack: Stack) -> AsyncIterator[Any]:
    base = stack.base("/anthropic")
    options = {"api_key": ANTHROPIC_KEY, "base_url": base}
    client = client_in(request.param, anthropic.Anthropic, anthropic.AsyncAnthropic, **options)
    yield client
    await call(request.param, client.close)


def reached_turngate(caplog: pytest.LogCaptureFixture, path: str) -> bool:
    return any(r.getMessage().startswith(f"GET /anthropic{path} ") for r in caplog.records)


async def read_results(claude: Any, batches: Any) -> list[Any]:
    if claude.mode == "sync":
        return await call("sync", lambda: list(batches.results(BATCH)))
    return [result async for result in await batches.results(BATCH)]


@pytest.mark.parametrize("beta", [False, True], ids=["messages", "beta"])
async def test_a_batchs_results_are_read_through_turngate(
    claude: Any, stack: Stack, caplog: pytest.LogCaptureFixture, beta: bool
):
    stack.upstream.replies(
        Reply(body=ended(stack)),
        Reply(body=orjson.dumps(RESULT) + b"\n", content_type="application/binary"),
    )
    batches = claude.beta.messages.batches if beta else claude.messages.batches
    (result,) = await read_results(claude, batches)
    assert result.custom_id == "one"
    assert result.result.message.content[0].text == "18C"
    assert stack.upstream.received[-1].path_qs.startswith(RESULTS_PATH)
    assert reached_turngate(caplog, RESULTS_PATH)


@pytest.mark.parametrize("spaced", [False, True], ids=["compact", "indented"])
async def test_every_batch_object_names_turngates_address(claude: Any, stack: Stack, spaced: bool):
    page = orjson.loads(ended(stack))
    listed = {"data": [page, page], "has_more": False, "first_id": BATCH, "last_id": BATCH}
    stack.upstream.replies(Reply(body=ended(stack, spaced=spaced)), Reply.json(listed))
    batches = claude.messages.batches
    retrieved = await call(claude.mode, batches.retrieve, BATCH)
    page = await call(claude.mode, batches.list)
    expected = stack.base("/anthropic") + RESULTS_PATH
    assert retrieved.results_url == expected
    assert [batch.results_url for batch in page.data] == [expected, expected]


async def test_an_address_on_another_host_is_left_as_the_provider_wrote_it(
    claude: Any, stack: Stack
):
    elsewhere = "https://results.example.com/v1/messages/batches/msgbatch_01/results"
    batch = {**orjson.loads(ended(stack)), "results_url": elsewhere}
    stack.upstream.reply(Reply.json(batch))
    retrieved = await call(claude.mode, claude.messages.batches.retrieve, BATCH)
    assert retrieved.results_url == elsewhere


# -- the results' tool calls ------------------------------------------------------------------

ASK = body(user("weather in Paris?"))


def answered(custom_id: str, *content: dict[str, Any]) -> dict[str, Any]:
    message = {**orjson.loads(claude_answer("").body), "content": list(content)}
    message["stop_reason"] = "tool_use"
    return {"custom_id": custom_id, "result": {"type": "succeeded", "message": message}}


ERRORED = {
    "custom_id": "three",
    "result": {
        "type": "errored",
        "error": {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}},
    },
}
RESULTS = [
    answered("one", tool_use("toolu_1", input={"city": "Paris"})),
    answered("two", tool_use("toolu_2", input={"city": 7})),
    ERRORED,
]


def results_file() -> bytes:
    return b"".join(orjson.dumps(line) + b"\n" for line in RESULTS)


async def create(claude: Any, stack: Stack) -> None:
    stack.upstream.replies(Reply.json({**MESSAGE_BATCH, "id": BATCH}))
    requests = [{"custom_id": name, "params": ASK} for name in ("one", "two", "three")]
    await call(claude.mode, claude.messages.batches.create, requests=requests)


async def test_a_result_whose_call_breaks_its_tools_schema_is_answered_errored(
    claude: Any, stack: Stack
):
    await create(claude, stack)
    stack.upstream.replies(
        Reply(body=ended(stack)),
        Reply(body=results_file(), content_type="application/binary"),
    )
    one, two, three = await read_results(claude, claude.messages.batches)
    assert one.result.type == "succeeded"
    assert one.result.message.content[0].input == {"city": "Paris"}
    assert two.custom_id == "two"
    assert two.result.type == "errored"
    assert two.result.error.error.type == "api_error"
    assert "turngate [invalid_tool_call]" in two.result.error.error.message
    assert "toolu_2" in two.result.error.error.message
    assert three.result.error.error.message == "busy"


async def test_the_results_of_a_batch_turngate_did_not_create_are_relayed_as_they_are(
    claude: Any, stack: Stack
):
    stack.upstream.replies(
        Reply(body=ended(stack)),
        Reply(body=results_file(), content_type="application/binary"),
    )
    _one, two, _three = await read_results(claude, claude.messages.batches)
    assert two.result.type == "succeeded"


def test_results_cut_at_every_byte_come_out_as_when_whole():
    seq = get_adapter("anthropic").parse_request(ASK)
    tools = call_schemas(seq, SchemaCache())
    expected = dict.fromkeys(("one", "two", "three"), ("anthropic", tools))
    data = results_file()
    whole = ResultLines("anthropic", expected)
    once = whole.feed(data) + whole.finish()
    assert b"invalid_tool_call" in once
    for cut in range(1, len(data)):
        lines = ResultLines("anthropic", expected)
        got = lines.feed(data[:cut]) + lines.feed(data[cut:]) + lines.finish()
        assert got == once, cut
        assert lines.withheld == [("two", "anthropic")]


# -- OpenAI's Batch API: the output file ----------------------------------------------------

INPUT_FILE = {**OPENAI_FILE, "id": "file-in"}
OPENAI_BATCH = {
    "id": "batch_1",
    "object": "batch",
    "endpoint": "/v1/chat/completions",
    "completion_window": "24h",
    "created_at": 0,
    "input_file_id": "file-in",
    "status": "validating",
}
DONE = {**OPENAI_BATCH, "status": "completed", "output_file_id": "file-out"}
ASK_CHAT = chat_body(chat_user("weather in Paris?"))


def chat_answer(custom_id: str, arguments: str) -> dict[str, Any]:
    call = {"id": "call_1", "type": "function"}
    call["function"] = {"name": "get_weather", "arguments": arguments}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    completion = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0}
    completion |= {"model": "gpt-4o", "choices": [{"index": 0, "message": message}]}
    completion["choices"][0]["finish_reason"] = "tool_calls"
    response = {"status_code": 200, "request_id": "req_1", "body": completion}
    return {"id": f"batch_req_{custom_id}", "custom_id": custom_id, "response": response}


OUTPUT = [chat_answer("one", '{"city": "Paris"}'), chat_answer("two", '{"city": 7}')]


@pytest.fixture(params=MODES)
async def chatgpt(request: pytest.FixtureRequest, stack: Stack) -> AsyncIterator[Any]:
    options = {"api_key": OPENAI_KEY, "base_url": stack.base("/openai/v1")}
    client = client_in(request.param, openai.OpenAI, openai.AsyncOpenAI, **options)
    yield client
    await call(request.param, client.close)


async def run_batch(client: Any, stack: Stack, *, create: bool = True) -> list[dict[str, Any]]:
    """Upload the input file and create the batch (when ``create``), retrieve it once it
    is done, and read its output file: each line, as the application reads it."""
    output = b"".join(orjson.dumps(line) + b"\n" for line in OUTPUT)
    replies = [Reply.json(INPUT_FILE), Reply.json(OPENAI_BATCH)] if create else []
    stack.upstream.replies(
        *replies, Reply.json(DONE), Reply(body=output, content_type="text/plain")
    )
    if create:
        data = openai_jsonl(openai_line("one", ASK_CHAT), openai_line("two", ASK_CHAT))
        await call(client.mode, client.files.create, file=("in.jsonl", data), purpose="batch")
        await call(
            client.mode,
            client.batches.create,
            input_file_id="file-in",
            endpoint="/v1/chat/completions",
            completion_window="24h",
        )
    done = await call(client.mode, client.batches.retrieve, "batch_1")
    content = await call(client.mode, client.files.content, done.output_file_id)
    return [orjson.loads(line) for line in content.content.splitlines()]


async def test_an_output_line_whose_call_breaks_its_tools_schema_comes_back_failed(
    chatgpt: Any, stack: Stack
):
    one, two = await run_batch(chatgpt, stack)
    assert one == OUTPUT[0]
    assert (two["custom_id"], two["response"]) == ("two", None)
    assert two["error"]["code"] == "invalid_tool_call"
    assert "call_1" in two["error"]["message"]
    assert stack.upstream.received[-1].path_qs == "/v1/files/file-out/content"


async def test_the_output_of_a_batch_turngate_did_not_see_created_is_relayed_as_it_is(
    chatgpt: Any, stack: Stack
):
    assert await run_batch(chatgpt, stack, create=False) == OUTPUT


async def test_the_output_of_a_batch_whose_file_came_in_parts_is_checked_too(stack: Stack):
    client = openai.AsyncOpenAI(api_key=OPENAI_KEY, base_url=stack.base("/openai/v1"))
    upload = {"id": "upload_1", "object": "upload", "bytes": 1, "created_at": 0}
    upload |= {"expires_at": 1, "filename": "in.jsonl", "purpose": "batch", "status": "pending"}
    part = {"id": "part_1", "object": "upload.part", "created_at": 0, "upload_id": "upload_1"}
    completed = {**upload, "status": "completed", "file": INPUT_FILE}
    stack.upstream.replies(Reply.json(upload), Reply.json(part), Reply.json(completed))
    data = openai_jsonl(openai_line("one", ASK_CHAT), openai_line("two", ASK_CHAT))
    try:
        await client.uploads.upload_file_chunked(
            file=data, filename="in.jsonl", bytes=len(data), mime_type="text/jsonl", purpose="batch"
        )
        client.mode = "async"  # type: ignore[attr-defined]
        _one, two = await run_batch(client, stack, create=False)
    finally:
        await client.close()
    assert two["error"]["code"] == "invalid_tool_call"


def test_a_responses_output_line_is_checked_by_its_own_api():
    tool = {"type": "function", "name": "get_weather", "parameters": ASK_CHAT["tools"][0]}
    tool["parameters"] = ASK_CHAT["tools"][0]["function"]["parameters"]
    request = {"model": "gpt-4o", "input": "weather in Paris?", "tools": [tool]}
    seq = get_adapter("openai_responses").parse_request(request)
    expected = {"r": ("openai_responses", call_schemas(seq, SchemaCache()))}
    item = {"type": "function_call", "id": "fc_1", "call_id": "call_9", "name": "get_weather"}
    item |= {"arguments": '{"city": 7}', "status": "completed"}
    body = {"id": "resp_1", "object": "response", "status": "completed", "output": [item]}
    line = {"id": "batch_req_1", "custom_id": "r", "response": {"status_code": 200, "body": body}}
    lines = ResultLines("openai", expected)
    out = orjson.loads(lines.feed(orjson.dumps(line) + b"\n"))
    assert out["response"] is None
    assert "call_9" in out["error"]["message"]
    assert lines.withheld == [("r", "openai_responses")]


def test_the_tools_kept_are_bounded_by_batches_and_by_requests():
    tools: ToolSchemas = {}
    kept = BatchToolsets(remembered=2, requests=5)
    kept.keep("a", {"1": ("anthropic", tools)})
    kept.keep("b", {"1": ("anthropic", tools)})
    kept.keep("c", {"1": ("anthropic", tools)})
    assert (kept.get("a"), kept.get("b") is not None) == (None, True)
    kept.keep("big", {str(n): ("anthropic", tools) for n in range(5)})
    assert kept.get("b") is None
    assert kept.get("c") is None
    kept.keep("huge", {str(n): ("anthropic", tools) for n in range(9)})
    assert kept.get("big") is None
    assert kept.get("huge") is not None  # the newest, whatever its size


async def test_an_output_file_is_tied_only_to_an_input_file_kept():
    tools: ToolSchemas = {}
    kept, store = BatchToolsets(), MemoryStore()
    await remember(kept, store, "file-in", {"one": ("openai_chat", tools)}, now=0.0)
    await learn(kept, store, {"input_file_id": "file-in", "output_file_id": "file-out"}, now=0.0)
    await learn(kept, store, {"input_file_id": "file-other", "output_file_id": "file-x"}, now=0.0)
    await learn(kept, store, {"input_file_id": "file-in", "output_file_id": None}, now=0.0)
    assert kept.get("file-out") == kept.get("file-in")
    assert kept.get("file-x") is None


# -- Gemini: a batch's inlined responses ------------------------------------------------------

WEATHER = {"name": "weather", "parameters": {"type": "object", "properties": {"city": {}}}}
WEATHER["parameters"]["properties"]["city"] = {"type": "string"}
GEMINI_JOB = {"name": "batches/b-1", "metadata": {"model": "models/gemini-2.5-flash"}}


def gemini_answer(key: str, args: dict[str, Any]) -> dict[str, Any]:
    content = {"role": "model", "parts": [gemini_call("weather", args)]}
    answer = {"candidates": [{"content": content, "finishReason": "STOP", "index": 0}]}
    return {"response": answer, "metadata": {"key": key}}


@pytest.fixture(params=MODES)
async def gemini(request: pytest.FixtureRequest, stack: Stack) -> AsyncIterator[Any]:
    client = genai_sdk(stack)
    client.mode = request.param  # type: ignore[attr-defined]
    client.api = client.batches if request.param == "sync" else client.aio.batches  # type: ignore[attr-defined]
    yield client
    await call(request.param, client.close if request.param == "sync" else client.aio.aclose)


@GENAI_AIOHTTP_WARNING
async def test_an_inlined_response_whose_call_breaks_its_tools_schema_becomes_an_error(
    gemini: Any, stack: Stack
):
    ask = {"contents": [gemini_user(gemini_text("weather in Paris?"))]}
    ask["config"] = {"tools": [{"function_declarations": [WEATHER]}]}
    src = [{**ask, "metadata": {"key": key}} for key in ("one", "two")]
    answers = [gemini_answer("one", {"city": "Paris"}), gemini_answer("two", {"city": 7})]
    done = {**GEMINI_JOB, "metadata": {**GEMINI_JOB["metadata"], "state": "BATCH_STATE_SUCCEEDED"}}
    done["metadata"]["output"] = {"inlinedResponses": {"inlinedResponses": answers}}
    stack.upstream.replies(Reply.json(GEMINI_JOB), Reply.json(done))
    await call(gemini.mode, gemini.api.create, model="gemini-2.5-flash", src=src)
    job = await call(gemini.mode, gemini.api.get, name="batches/b-1")
    one, two = job.dest.inlined_responses
    assert one.response.function_calls[0].args == {"city": "Paris"}
    assert two.response is None
    assert "turngate [invalid_tool_call]" in two.error.message
    assert two.metadata == {"key": "two"}


def test_inlined_responses_without_keys_are_found_by_their_place():
    request = {"contents": [gemini_user(gemini_text("weather?"))]}
    request["tools"] = [{"functionDeclarations": [WEATHER]}]
    seq = get_adapter("gemini").parse_request(request, RouteInfo(model="m", stream=False))
    tools = call_schemas(seq, SchemaCache())
    answers = [gemini_answer("x", {"city": "Paris"}), gemini_answer("x", {"city": 7})]
    for answer in answers:
        del answer["metadata"]
    # The finished operation carries them in ``response`` too.
    batch = {"response": {"inlinedResponses": {"inlinedResponses": answers}}}
    withheld = checked_inline(batch, {"#0": ("gemini", tools), "#1": ("gemini", tools)})
    assert withheld == ["#1"]
    first, second = batch["response"]["inlinedResponses"]["inlinedResponses"]
    assert "response" in first
    assert "response" not in second
    assert second["error"]["code"] == 13


@GENAI_AIOHTTP_WARNING
async def test_a_gemini_responses_file_line_whose_call_breaks_its_tools_becomes_an_error(
    gemini: Any, stack: Stack
):
    ask = {"contents": [gemini_user(gemini_text("weather in Paris?"))]}
    ask["tools"] = [{"functionDeclarations": [WEATHER]}]
    requests = b"".join(orjson.dumps({"key": k, "request": ask}) + b"\n" for k in ("one", "two"))
    address = f"http://{stack.upstream_host}/upload/v1beta/files?upload_id=A"
    started = Reply(body=b"", headers={"X-Goog-Upload-URL": address})
    uploaded = Reply.json(
        {"file": {"name": "files/in-1"}}, headers={"X-Goog-Upload-Status": "final"}
    )
    done = {**GEMINI_JOB, "metadata": {**GEMINI_JOB["metadata"], "state": "BATCH_STATE_SUCCEEDED"}}
    done["metadata"] |= {"inputConfig": {"fileName": "files/in-1"}}
    done["metadata"]["output"] = {"responsesFile": "files/out-1"}
    answers = [gemini_answer("one", {"city": "Paris"}), gemini_answer("two", {"city": 7})]
    lines = b"".join(
        orjson.dumps({"key": a["metadata"]["key"], "response": a["response"]}) + b"\n"
        for a in answers
    )
    stack.upstream.replies(
        started, uploaded, Reply.json(GEMINI_JOB), Reply.json(done), Reply(body=lines)
    )
    files = gemini.files if gemini.mode == "sync" else gemini.aio.files
    config = {"mime_type": "jsonl"}
    await call(gemini.mode, files.upload, file=io.BytesIO(requests), config=config)
    await call(gemini.mode, gemini.api.create, model="gemini-2.5-flash", src="files/in-1")
    job = await call(gemini.mode, gemini.api.get, name="batches/b-1")
    content = await call(gemini.mode, files.download, file=job.dest.file_name)
    one, two = [orjson.loads(line) for line in content.splitlines()]
    assert one["response"] == answers[0]["response"]
    assert "response" not in two
    assert two["key"] == "two"
    assert two["error"]["code"] == 13
    assert "turngate [invalid_tool_call]" in two["error"]["message"]


async def test_a_batchs_tools_are_read_back_from_the_store_after_a_restart(tmp_path: Path):
    # A process keeps them, and stops; the next one, on the same state file, reads them.
    seq = get_adapter("anthropic").parse_request(ASK)
    tools = call_schemas(seq, SchemaCache())
    expected = {f"r{n}": ("anthropic", tools) for n in range(3)}
    first = SQLiteStore(tmp_path / "state.db")
    await first.open()
    await remember(BatchToolsets(), first, "msgbatch_1", expected, now=0.0)
    tied = {"input_file_id": "msgbatch_1", "output_file_id": "file-out"}
    await learn(BatchToolsets(), first, tied, now=0.0)  # a retrieval by another process
    await first.close()
    again = SQLiteStore(tmp_path / "state.db")
    await again.open()
    try:
        assert await recalled(BatchToolsets(), again, "msgbatch_1") == expected
        assert await recalled(BatchToolsets(), again, "file-out") == expected
        assert await recalled(BatchToolsets(), again, "msgbatch_2") is None
    finally:
        await again.close()


async def test_results_read_through_another_turngate_on_the_same_state_are_checked(
    make_stack: StackFactory, tmp_path: Path
):
    # The batch is created through one turngate; its results are read through the next
    # (a restart, a rollout) on the same state file.
    state = f"sqlite://{tmp_path / 'state.db'}"
    before, after = await make_stack(state=state), await make_stack(state=state)
    first = anthropic.AsyncAnthropic(api_key=ANTHROPIC_KEY, base_url=before.base("/anthropic"))
    first.mode = "async"  # type: ignore[attr-defined]
    second = anthropic.AsyncAnthropic(api_key=ANTHROPIC_KEY, base_url=after.base("/anthropic"))
    second.mode = "async"  # type: ignore[attr-defined]
    try:
        await create(first, before)
        after.upstream.replies(
            Reply(body=ended(after)),
            Reply(body=results_file(), content_type="application/binary"),
        )
        _one, two, _three = await read_results(second, second.messages.batches)
    finally:
        await first.close()
        await second.close()
    assert two.result.type == "errored"


def test_an_entry_the_store_holds_for_no_batch_restores_nothing():
    tools = {"get_weather": {"type": "object"}}
    good = stored({"a": ("anthropic", OpenToolset(tools)), "b": ("anthropic", dict(tools))})
    assert isinstance(restored(good)["a"][1], OpenToolset)
    assert len(good["toolsets"]) == 2
    for bad in (
        {},
        {"toolsets": [{"tools": tools}], "requests": {"a": ["anthropic"]}},
        {"toolsets": [{"tools": tools}], "requests": {"a": ["nope", 0]}},
        {"toolsets": [{"tools": tools}], "requests": {"a": ["anthropic", 3]}},
        {"toolsets": ["x"], "requests": {}},
    ):
        assert restored(bad) is None

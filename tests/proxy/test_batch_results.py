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

import logging
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import orjson
import pytest

from tests.adapters.anthropic_builders import body, tool_use, user
from tests.proxy.conftest import StackFactory
from tests.proxy.fake_upstream import Reply
from tests.proxy.helpers import claude_answer
from tests.proxy.sdk_support import MODES, call
from tests.proxy.stack import ANTHROPIC_KEY, Stack
from tests.proxy.test_batches import MESSAGE_BATCH
from turngate.adapters import get_adapter
from turngate.proxy.batch_results import ResultLines
from turngate.proxy.tool_calls import SchemaCache
from turngate.proxy.turn_check import call_schemas

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


@pytest.fixture(params=MODES)
async def claude(request: pytest.FixtureRequest, stack: Stack) -> AsyncIterator[Any]:
    cls = anthropic.Anthropic if request.param == "sync" else anthropic.AsyncAnthropic
    client = cls(api_key=ANTHROPIC_KEY, base_url=stack.base("/anthropic"), max_retries=0)
    client.mode = request.param  # type: ignore[attr-defined]
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
    toolsets = {name: call_schemas(seq, SchemaCache()) for name in ("one", "two", "three")}
    data = results_file()
    whole = ResultLines(toolsets)
    expected = whole.feed(data) + whole.finish()
    assert b"invalid_tool_call" in expected
    for cut in range(1, len(data)):
        lines = ResultLines(toolsets)
        got = lines.feed(data[:cut]) + lines.feed(data[cut:]) + lines.finish()
        assert got == expected, cut
        assert lines.withheld == ["two"]

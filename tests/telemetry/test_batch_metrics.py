"""A refused batch is counted as its refused requests' rejections, under the batch's own
route label; a shadowed one as shadow rejections, and it is sent."""

from __future__ import annotations

from typing import Any

import orjson

from tests.adapters.anthropic_builders import assistant, body, tool_result, user
from tests.proxy.fake_upstream import Reply
from tests.telemetry.helpers import labels, nonzero, points
from tests.telemetry.proxy_stack import TracedStackFactory, traced_stack

BATCHES = "/anthropic/v1/messages/batches"
HEADERS = {"x-api-key": "sk-ant-test"}
ORPHAN = body(user("hi"), assistant("hello"), user(tool_result("toolu_7")))

__all__ = ["traced_stack"]


def batch(*params: dict[str, Any]) -> dict[str, Any]:
    return {"requests": [{"custom_id": f"r{i}", "params": p} for i, p in enumerate(params)]}


async def test_a_refused_batch_counts_each_refused_request(
    traced_stack: TracedStackFactory,
) -> None:
    stack = await traced_stack()
    status, _body = await stack.post(BATCHES, batch(ORPHAN, body(user("hi")), ORPHAN), HEADERS)
    assert status == 400
    assert stack.upstream.received == []
    found = {name: nonzero(series) for name, series in points(stack.capture.reader).items()}
    assert found["turngate.validator.rejections"] == {
        labels(api="anthropic", rule="orphan_result"): 2
    }
    durations = found["turngate.request.duration"]
    assert list(durations) == [labels(route=BATCHES, api="anthropic", status="400")]
    (span,) = [
        s for s in stack.capture.finished() if s.attributes and "turngate.api" in s.attributes
    ]
    assert span.attributes is not None
    assert span.attributes["turngate.api"] == "anthropic"


async def test_a_valid_batch_counts_no_rejection(traced_stack: TracedStackFactory) -> None:
    stack = await traced_stack()
    stack.upstream.reply(Reply.json({"id": "msgbatch_1", "type": "message_batch"}))
    status, answer = await stack.post(BATCHES, batch(body(user("hi"))), HEADERS)
    assert (status, orjson.loads(answer)["id"]) == (200, "msgbatch_1")
    found = {name: nonzero(series) for name, series in points(stack.capture.reader).items()}
    assert "turngate.validator.rejections" not in {k for k, v in found.items() if v}


async def test_a_batch_too_large_to_check_is_counted_unchecked(
    traced_stack: TracedStackFactory,
) -> None:
    stack = await traced_stack(max_body_bytes=2048)
    stack.upstream.reply(Reply.json({"id": "msgbatch_1", "type": "message_batch"}))
    status, _answer = await stack.post(BATCHES, batch(*[ORPHAN] * 8), HEADERS)
    assert status == 200
    assert len(stack.upstream.received) == 1
    found = {name: nonzero(series) for name, series in points(stack.capture.reader).items()}
    assert found["turngate.batch.unchecked"] == {labels(api="anthropic"): 1}
    assert not found.get("turngate.validator.rejections")


async def test_a_gemini_batch_file_too_large_to_keep_is_counted_unchecked(
    traced_stack: TracedStackFactory,
) -> None:
    stack = await traced_stack(max_body_bytes=64)
    stack.upstream.reply(Reply(body=b"", headers={"X-Goog-Upload-Status": "active"}))
    first_line = {
        "key": "k",
        "request": {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
    }
    piece = {"X-Goog-Upload-Command": "upload", "X-Goog-Upload-Offset": "0"}
    status, _answer = await stack.post("/gemini/upload/v1beta/files?upload_id=A", first_line, piece)
    assert status == 200
    found = {name: nonzero(series) for name, series in points(stack.capture.reader).items()}
    assert found["turngate.batch.unchecked"] == {labels(api="gemini"): 1}


async def test_a_batch_result_withheld_for_its_tool_call_is_counted(
    traced_stack: TracedStackFactory,
) -> None:
    stack = await traced_stack()
    stack.upstream.reply(Reply.json({"id": "msgbatch_1", "type": "message_batch"}))
    status, _answer = await stack.post(BATCHES, batch(body(user("weather?"))), HEADERS)
    assert status == 200
    call = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": 7}}
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m"}
    message |= {"content": [call], "stop_reason": "tool_use", "usage": {}}
    result = {"custom_id": "r0", "result": {"type": "succeeded", "message": message}}
    stack.upstream.reply(Reply(body=orjson.dumps(result) + b"\n", content_type="text/plain"))
    status, text = await stack.get(f"{BATCHES}/msgbatch_1/results", HEADERS)
    assert (status, orjson.loads(text)["result"]["type"]) == (200, "errored")
    found = {name: nonzero(series) for name, series in points(stack.capture.reader).items()}
    assert found["turngate.batch.results_withheld"] == {labels(api="anthropic"): 1}

"""A request chained to a reply turngate does not know is sent unjudged, and counted: the
operator sees how often the check that its calls are answered could not run."""

from __future__ import annotations

import orjson

from tests.fixtures_dir import FIXTURES_DIR
from tests.proxy.fake_upstream import Reply
from tests.telemetry.helpers import labels, nonzero, points
from tests.telemetry.proxy_stack import TracedStackFactory, traced_stack

RESPONSES = "/openai/v1/responses"
HEADERS = {"Authorization": "Bearer sk-test"}
CALLS = "openai-responses/pai-nonstream-function-call.json"
AFTER = "openai-responses/pai-nonstream-after-function-output.json"

__all__ = ["traced_stack"]


async def test_a_request_chained_to_an_unknown_reply_is_counted_unjudged(
    traced_stack: TracedStackFactory,
) -> None:
    stack = await traced_stack()
    stack.upstream.replies(Reply.fixture(CALLS), Reply.fixture(AFTER), Reply.fixture(AFTER))
    ask = orjson.loads((FIXTURES_DIR / CALLS.replace(".json", ".request.json")).read_bytes())
    status, body = await stack.post(RESPONSES, ask, HEADERS)
    assert status == 200
    first = orjson.loads(body)
    call_id = orjson.loads((FIXTURES_DIR / CALLS).read_bytes())["output"][0]["call_id"]
    output = {"type": "function_call_output", "call_id": call_id, "output": "Paris"}
    # Chained to the reply turngate committed: judged (and answered).
    known = {"model": "gpt-4o", "previous_response_id": first["id"], "input": [output]}
    assert (await stack.post(RESPONSES, known, HEADERS))[0] == 200
    assert "turngate.chained.unjudged" not in nonzero_metrics(stack)
    # Chained to one it never saw (another replica's, say): sent, and counted.
    unknown = {"model": "gpt-4o", "previous_response_id": "resp_elsewhere", "input": [output]}
    assert (await stack.post(RESPONSES, unknown, HEADERS))[0] == 200
    assert nonzero_metrics(stack)["turngate.chained.unjudged"] == {
        labels(api="openai_responses"): 1
    }
    assert len(stack.upstream.received) == 3
    # The unjudged one's span says so; the judged ones' do not carry the attribute.
    judged = [
        span.attributes.get("turngate.chained.judged")
        for span in stack.capture.finished()
        if span.attributes and "turngate.api" in span.attributes
    ]
    assert judged == [None, None, False]


def nonzero_metrics(stack: object) -> dict[str, dict[object, float]]:
    found = points(stack.capture.reader)  # type: ignore[attr-defined]
    return {name: nonzero(series) for name, series in found.items() if nonzero(series)}

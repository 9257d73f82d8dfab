"""The calls a request chained to a provider-held reply must answer (graph/chained.py)."""

from __future__ import annotations

from turngate.adapters import get_adapter
from turngate.adapters.base import RouteInfo
from turngate.graph.chained import OpenCall, unanswered
from turngate.graph.model import MessageSequence


def chained(items: list[dict[str, object]]) -> MessageSequence:
    body = {"model": "gpt-4o", "previous_response_id": "resp_1", "input": items}
    return get_adapter("openai_responses").parse_request(body, RouteInfo())


CALLS = (OpenCall("call_a", "get_capital"), OpenCall("call_b", "get_weather"))


def output(call_id: str) -> dict[str, object]:
    return {"type": "function_call_output", "call_id": call_id, "output": "ok"}


def test_every_call_of_the_reply_answered_is_no_violation():
    seq = chained([output("call_b"), output("call_a")])
    assert unanswered(seq, "resp_1", CALLS) == []


def test_each_call_left_unanswered_is_named():
    seq = chained([output("call_a"), {"role": "user", "content": "go on"}])
    (violation,) = unanswered(seq, "resp_1", CALLS)
    assert (violation.rule, violation.call_id) == ("missing_result", "call_b")
    assert "get_weather" in violation.message
    assert "resp_1" in violation.message


def test_a_reply_without_calls_asks_nothing():
    seq = chained([{"role": "user", "content": "go on"}])
    assert unanswered(seq, "resp_1", ()) == []

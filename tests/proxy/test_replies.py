"""The reply memory (proxy/replies.py) on its own: what a chained request is judged by."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turngate.adapters import get_adapter
from turngate.adapters.base import RouteInfo
from turngate.errors import SequenceRejected
from turngate.graph.model import MessageSequence, new_text_block, new_tool_call
from turngate.graph.turn import AssistantTurn
from turngate.proxy.replies import Replies


class NoStore:
    """A store that must not be read: the memory answers."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the store was read ({name})")


def chained(items: list[dict[str, Any]]) -> MessageSequence:
    body = {"model": "gpt-4o", "previous_response_id": "resp_1", "input": items}
    return get_adapter("openai_responses").parse_request(body, RouteInfo())


def output(call_id: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": "ok"}


def reply(*blocks: Any) -> AssistantTurn:
    return AssistantTurn(handle="resp_1", model="gpt-4o", blocks=blocks, stop_reason="completed")


CALL = new_tool_call(
    id="b0", order=0, call_id="call_a", name="get_capital", arguments='{"country": "France"}'
)


async def test_a_reply_without_calls_answers_from_memory():
    replies = Replies()
    replies.committed(
        "openai_responses",
        reply(new_text_block(id="b0", role="assistant", order=0, trust="untrusted", text="Hi")),
        "k",
    )
    seq = chained([{"role": "user", "content": "And then?"}])
    replies.refuse_unanswered(seq, "k")
    # Under a conversation id, nothing is looked up in the store either.
    await replies.refuse_unanswered_kept(NoStore(), seq, "op_1", "k", now=0.0)  # type: ignore[arg-type]


async def test_a_call_is_judged_only_for_its_own_caller():
    replies = Replies()
    replies.committed("openai_responses", reply(CALL), "k")
    seq = chained([{"role": "user", "content": "And then?"}])
    with pytest.raises(SequenceRejected) as refused:
        replies.refuse_unanswered(seq, "k")
    assert refused.value.rule == "missing_result"
    replies.refuse_unanswered(seq, "another")


async def test_the_least_recently_used_reply_is_forgotten_first():
    replies = Replies(size=2)
    for handle in ("resp_1", "resp_2", "resp_3"):
        turn = AssistantTurn(handle=handle, model=None, blocks=(CALL,), stop_reason="completed")
        replies.committed("openai_responses", turn, "k")
    # resp_1 went first: a request chained to it is judged without it.
    replies.refuse_unanswered(chained([{"role": "user", "content": "go on"}]), "k")


@settings(max_examples=200, deadline=None)
@given(
    calls=st.integers(min_value=1, max_value=5),
    answered=st.lists(st.integers(min_value=0, max_value=4), max_size=6),
    strays=st.integers(min_value=0, max_value=2),
    same_caller=st.booleans(),
    order=st.randoms(use_true_random=False),
)
def test_a_chained_request_goes_only_when_it_answers_every_call(
    calls: int, answered: list[int], strays: int, same_caller: bool, order: random.Random
) -> None:
    replies = Replies()
    blocks = tuple(
        new_tool_call(id=f"b{k}", order=k, call_id=f"call_{k}", name="f", arguments="{}")
        for k in range(calls)
    )
    replies.committed("openai_responses", reply(*blocks), "k")
    ids = [f"call_{k}" for k in answered if k < calls] + [f"stray_{k}" for k in range(strays)]
    # Outputs in any order, answering some calls (maybe twice: the validator's to refuse),
    # and outputs for calls the stored part holds elsewhere.
    order.shuffle(ids)
    seq = chained([output(call_id) for call_id in dict.fromkeys(ids)])
    missing = {f"call_{k}" for k in range(calls)} - set(ids)
    caller = "k" if same_caller else "another"
    if not same_caller or not missing:
        replies.refuse_unanswered(seq, caller)
        return
    with pytest.raises(SequenceRejected) as refused:
        replies.refuse_unanswered(seq, caller)
    assert {v.call_id for v in refused.value.violations} == missing
    assert {v.rule for v in refused.value.violations} == {"missing_result"}

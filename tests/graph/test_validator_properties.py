"""Generated conversations: valid ones are READY; any single mutation never is."""

from __future__ import annotations

import copy
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.graph.chat_builders import assistant, body, call, system, tool, user
from turngate.adapters.openai_chat import ADAPTER, CAPABILITIES
from turngate.graph.validator import validate

texts = st.text(max_size=30)
json_values = st.one_of(st.integers(-(2**53), 2**53), st.booleans(), st.none(), st.text(max_size=8))
arguments = st.dictionaries(st.text(max_size=6), json_values, max_size=3).map(
    lambda d: orjson.dumps(d).decode()
)
CALL_IDS = ["call_a", "call_b", "call_c", "call_d", "toolu_1", "x"]


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if draw(st.booleans()):
        messages.append(system(draw(texts)))
    messages.append(user(draw(texts)))
    for _turn in range(draw(st.integers(1, 6))):
        k = draw(st.integers(0, 3))
        if k == 0:
            messages.append(assistant(draw(texts)))
            messages.append(user(draw(texts)))
            continue
        ids = draw(st.lists(st.sampled_from(CALL_IDS), min_size=k, max_size=k, unique=True))
        calls = [call(i, arguments=draw(arguments)) for i in ids]
        messages.append(assistant(draw(st.one_of(st.none(), texts)), calls))
        for position in draw(st.permutations(range(k))):
            messages.append(tool(ids[position], draw(texts)))
        if draw(st.booleans()):
            messages.append(user(draw(texts)))
    if draw(st.booleans()):
        messages.append(assistant(draw(texts)))
    return messages


def status(messages: list[dict[str, Any]]) -> str:
    return validate(ADAPTER.parse_request(body(*messages)), CAPABILITIES).status


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(conversations())
def test_generated_valid_conversations_are_ready_and_round_trip(messages: list[dict[str, Any]]):
    request = body(*messages)
    seq = ADAPTER.parse_request(request)
    assert validate(seq, CAPABILITIES).status == "READY"
    assert ADAPTER.render_request(seq) == request


def _tool_positions(messages: list[dict[str, Any]]) -> list[int]:
    return [i for i, m in enumerate(messages) if m["role"] == "tool"]


def _call_positions(messages: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return [
        (i, j) for i, m in enumerate(messages) for j, _c in enumerate(m.get("tool_calls") or [])
    ]


def _window(messages: list[dict[str, Any]], index: int) -> tuple[int, int]:
    """(assistant index, last tool index) of the result window holding messages[index]."""
    start = index
    while messages[start]["role"] == "tool":
        start -= 1
    end = index
    while end + 1 < len(messages) and messages[end + 1]["role"] == "tool":
        end += 1
    return start, end


MUTATIONS = ["drop", "duplicate", "move", "rename_call", "rename_result", "truncate"]


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(conversations(), st.sampled_from(MUTATIONS), st.data())
def test_any_single_mutation_is_never_ready(
    messages: list[dict[str, Any]], mutation: str, data: st.DataObject
):
    results = _tool_positions(messages)
    calls = _call_positions(messages)
    if not results:
        return
    mutated = copy.deepcopy(messages)
    if mutation == "drop":
        del mutated[data.draw(st.sampled_from(results))]
    elif mutation == "duplicate":
        index = data.draw(st.sampled_from(results))
        mutated.insert(index + 1, copy.deepcopy(mutated[index]))
    elif mutation == "move":
        index = data.draw(st.sampled_from(results))
        start, end = _window(mutated, index)
        moved = mutated.pop(index)
        # After the pop the window spans start+1 .. end-1; inserting there keeps it in place.
        outside = [i for i in range(len(mutated) + 1) if not start < i <= end]
        mutated.insert(data.draw(st.sampled_from(outside)), moved)
    elif mutation == "rename_call":
        i, j = data.draw(st.sampled_from(calls))
        mutated[i]["tool_calls"][j]["id"] = "call_renamed"
    elif mutation == "rename_result":
        mutated[data.draw(st.sampled_from(results))]["tool_call_id"] = "call_renamed"
    else:
        i, j = data.draw(st.sampled_from(calls))
        function = mutated[i]["tool_calls"][j]["function"]
        # From one byte: `""` is a call with no arguments, as OpenAI writes one.
        cut = data.draw(st.integers(1, len(function["arguments"]) - 1))
        function["arguments"] = function["arguments"][:cut]
    assert status(mutated) in ("REJECTED", "WAITING"), mutation

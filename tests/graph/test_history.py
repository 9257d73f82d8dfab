"""The turn digest a history is checked by: what a client may change when it sends a turn
back (call ids, text split into parts, argument spelling, reasoning) leaves it equal; what the
turn says (text, tool names, argument values, call order) does not."""

from __future__ import annotations

from typing import Any

import pytest

from tests.graph.chat_builders import assistant, body, call, tool, user
from turngate.adapters import get_adapter
from turngate.graph.history import history_turns

CHAT = get_adapter("openai_chat")


def turn_of(*messages: dict[str, Any]) -> str:
    (turn,) = history_turns(CHAT.parse_request(body(user("q"), *messages, user("next"))))
    return turn.digest


BASE = assistant("Checking.", [call("call_1"), call("call_2", arguments='{"city":"Rome"}')])


@pytest.mark.parametrize(
    "same",
    [
        # Other call ids (Gemini has none; a client may add or rename them).
        assistant("Checking.", [call("x"), call("y", arguments='{"city":"Rome"}')]),
        # Arguments spelled with other whitespace.
        assistant(
            "Checking.",
            [
                call("call_1", arguments='{ "city" : "Paris" }'),
                call("b", arguments='{"city": "Rome"}'),
            ],
        ),
        # The text split into parts.
        {**BASE, "content": [{"type": "text", "text": "Check"}, {"type": "text", "text": "ing."}]},
    ],
    ids=["call-ids", "argument-spacing", "text-parts"],
)
def test_what_a_client_may_change_keeps_the_turn(same: dict[str, Any]) -> None:
    assert turn_of(same) == turn_of(BASE)


@pytest.mark.parametrize(
    "changed",
    [
        assistant("Checking", [call("call_1"), call("call_2", arguments='{"city":"Rome"}')]),
        assistant("Checking.", [call("call_1"), call("call_2", arguments='{"city":"Roma"}')]),
        assistant("Checking.", [call("call_2", arguments='{"city":"Rome"}'), call("call_1")]),
        assistant("Checking.", [call("call_1")]),
        assistant("Checking.", [call("call_1"), call("call_2", "get_time", '{"city":"Rome"}')]),
    ],
    ids=["text", "argument-value", "call-order", "a-call-dropped", "tool-name"],
)
def test_what_the_turn_says_changes_it(changed: dict[str, Any]) -> None:
    assert turn_of(changed) != turn_of(BASE)


def test_a_run_of_assistant_messages_is_one_turn_and_turns_are_numbered() -> None:
    seq = CHAT.parse_request(
        body(
            user("a"),
            assistant(None, [call("c1")]),
            tool("c1"),
            assistant("done"),
            assistant("and more"),
            user("b"),
        )
    )
    turns = history_turns(seq)
    assert [(t.index, t.message_index, t.location) for t in turns] == [
        (0, 1, "messages[1]"),
        (1, 3, "messages[3]"),
    ]
    assert len(turns) == seq.conversation_revision
    # The second turn's two messages read as one text.
    joined = CHAT.parse_request(body(user("a"), assistant("doneand more"), user("b")))
    assert turns[1].digest == history_turns(joined)[0].digest


def test_reasoning_is_not_compared() -> None:
    anthropic = get_adapter("anthropic")
    text = {"type": "text", "text": "Paris."}
    thinking = {"type": "thinking", "thinking": "The capital...", "signature": "sig"}

    def digest_of(content: list[dict[str, Any]]) -> str:
        seq = anthropic.parse_request(
            {
                "model": "claude",
                "max_tokens": 10,
                "messages": [
                    {"role": "user", "content": "Capital?"},
                    {"role": "assistant", "content": content},
                    {"role": "user", "content": "Thanks"},
                ],
            }
        )
        (turn,) = history_turns(seq)
        return turn.digest

    assert digest_of([thinking, text]) == digest_of([text])
    assert digest_of([thinking, text]) != digest_of([thinking, {**text, "text": "Lyon."}])

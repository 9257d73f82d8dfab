"""OpenAI's limit on one string of a request (Chat and Responses, request rule): no text,
tool output or call's arguments longer than 10,485,760 characters. A tool that returns a
whole log or file, replayed into the next turn, gets "Invalid 'input[4].output': string too
long. Expected a string with maximum length 10485760, but got a string with length 15231668
instead." (code ``string_above_max_length``) on that turn and every one after it (codex,
nanobot #694). turngate refuses it before sending, naming the message and the call.

It runs on built blocks only (an extra rule): Chat's outline is never built for a request
holding such a string (``openai_chat.request.outline_messages``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from turngate.graph.model import (
    Message,
    MessageSequence,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from turngate.graph.rules import rule
from turngate.graph.rules.openai_chat import too_long_text
from turngate.graph.validator import Violation, violation

STRING_TOO_LONG = "openai_string_too_long"
MAX_STRING = 10_485_760


class LongString(NamedTuple):
    field: str
    """Where OpenAI names it, as far as turngate can tell: a path ending ``…`` points into
    the item (a content part, a tool output)."""
    what: str
    call_id: str | None
    length: int


def _in_message(message: Message) -> Iterator[LongString]:
    where, whole = message.location, message.shape == "string"
    chat = message.origin == "messages"
    calls = 0
    for block in message.blocks:
        if isinstance(block, TextBlock) and len(block.text) > MAX_STRING:
            field = f"{where}.content" if whole else f"{where}…"
            yield LongString(field, "a text", None, len(block.text))
        elif isinstance(block, ToolCallBlock):
            if len(block.arguments) > MAX_STRING:
                what = f"the arguments of call {block.call_id!r}"
                inner = f".tool_calls[{calls}].function.arguments" if chat else ".arguments"
                yield LongString(f"{where}{inner}", what, block.call_id, len(block.arguments))
            calls += 1
        elif isinstance(block, ToolResultBlock):
            inner = (".content" if chat else ".output") if whole else "…"
            for part in block.content:
                if isinstance(part, TextBlock) and len(part.text) > MAX_STRING:
                    what = f"the result of call {block.call_id!r}"
                    yield LongString(f"{where}{inner}", what, block.call_id, len(part.text))


@rule(STRING_TOO_LONG)
def strings_too_long(seq: MessageSequence) -> list[Violation]:
    return [
        violation(
            STRING_TOO_LONG,
            f"{found.what} in {found.field.rstrip('…')} holds {found.length} characters; "
            f"{too_long_text(found.field, MAX_STRING, found.length)} (cut a tool's output "
            "before it goes back into the conversation, or send it as a file)",
            None,
            call_id=found.call_id,
        )
        for message in seq.messages
        for found in _in_message(message)
    ]

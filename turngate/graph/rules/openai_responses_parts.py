"""OpenAI Responses: each content part's type belongs to the side that wrote it (rule
``responses_part_type``).

What the model wrote goes back as ``output_text`` (or ``refusal``); what the client sends,
a user's text or a tool's output, as ``input_text``. A client that converts its history
with one part type for every message is refused on the first turn after an assistant
message: "Invalid value: 'input_text'. Supported values are: 'output_text' and 'refusal'."
(param ``input[1].content[0]``), and one that returns a tool's output as ``output_text``
(Codex CLI re-serialising an MCP result, litellm) gets "Invalid value: 'output_text'.
Supported values are: 'input_text', 'input_image', 'input_file', …" (param
``input[101].output[1]``).
"""

from __future__ import annotations

from collections.abc import Iterator

from turngate.graph.model import Message, MessageSequence, TextBlock, ToolResultBlock
from turngate.graph.rules import rule
from turngate.graph.validator import Violation, a_role, violation

PART_TYPE = "responses_part_type"
ASSISTANT_PARTS = "Supported values are: 'output_text' and 'refusal'."
_CLIENT = "Supported values are: 'input_text', 'input_image', 'input_file', …"


def _misplaced(message: Message) -> Iterator[tuple[str, str, TextBlock, str | None]]:
    """(param, part type, block, call id) of each text part of the other side's type."""
    if message.origin != "input" or message.shape != "parts":
        return
    wrong = "input_text" if message.role == "assistant" else "output_text"
    for position, block in enumerate(message.blocks):
        if isinstance(block, TextBlock) and block.attrs.get("type") == wrong:
            yield f"{message.location}.content[{position}]", wrong, block, None
        elif isinstance(block, ToolResultBlock):
            for k, part in enumerate(block.content):
                if isinstance(part, TextBlock) and part.attrs.get("type") == "output_text":
                    yield f"{message.location}.output[{k}]", "output_text", part, block.call_id


@rule(PART_TYPE)
def part_types(seq: MessageSequence) -> list[Violation]:
    out: list[Violation] = []
    for message in seq.messages:
        for param, kind, block, call_id in _misplaced(message):
            whose = "a tool's output" if call_id else f"{a_role(message.role)} message"
            fix = "output_text" if kind == "input_text" else "input_text"
            supported = ASSISTANT_PARTS if kind == "input_text" else _CLIENT
            out.append(
                violation(
                    PART_TYPE,
                    f"{param} is {whose}'s text typed '{kind}'; OpenAI: \"Invalid value: "
                    f"'{kind}'. {supported}\" (type it '{fix}')",
                    message,
                    block,
                    call_id=call_id,
                )
            )
    return out

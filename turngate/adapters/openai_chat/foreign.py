"""Rendering a graph parsed from another API as a Chat Completions request.

Only modelled fields are used (a foreign graph's attrs belong to its own API). Results
are placed one ``tool`` message per call right after the assistant message; anything
Chat cannot carry was refused by ``fit_to`` before we get here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from turngate.adapters.openai_chat.request import data_url
from turngate.errors import UnsupportedInTarget
from turngate.graph.capabilities import Capabilities
from turngate.graph.model import (
    AnyBlock,
    AudioBlock,
    FileBlock,
    ImageBlock,
    Message,
    MessageSequence,
    Normalization,
    RefusalBlock,
    TextBlock,
    ToolCallBlock,
    ToolDef,
    ToolResultBlock,
)
from turngate.graph.normalize import fit_to, result_text


def render_foreign(seq: MessageSequence, caps: Capabilities) -> dict[str, Any]:
    fitted = merge_assistant_runs(fit_to(seq, caps))
    body: dict[str, Any] = {"model": seq.model or ""}
    body["messages"] = [_message(m) for m in fitted.messages]
    if fitted.tools:
        body["tools"] = [_tool(t) for t in fitted.tools]
    if seq.max_output_tokens is not None:
        body["max_completion_tokens"] = seq.max_output_tokens
    if seq.stream:
        body["stream"] = True
    return body


def merge_assistant_runs(seq: MessageSequence) -> MessageSequence:
    """One Chat assistant message per turn: APIs with one item per call (Responses) give runs.

    The blocks stay separate (content parts and tool calls), so nothing is joined into text.
    """
    merged: list[Message] = []
    notes = list(seq.normalizations)
    for message in seq.messages:
        previous = merged[-1] if merged else None
        if previous is not None and previous.role == "assistant" == message.role:
            merged[-1] = dataclasses.replace(previous, blocks=previous.blocks + message.blocks)
            notes.extend(
                Normalization(
                    rule="assistant_turn_merged",
                    block_id=block.id,
                    detail=f"block from {message.location} joins the assistant message at "
                    f"{previous.location}; Chat carries one assistant message per turn",
                )
                for block in message.blocks
            )
        else:
            merged.append(message)
    return dataclasses.replace(seq, messages=tuple(merged), normalizations=tuple(notes))


def _message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        result = message.blocks[0]
        assert isinstance(result, ToolResultBlock)
        return {"role": "tool", "tool_call_id": result.call_id, "content": _result(result)}
    out: dict[str, Any] = {"role": message.role}
    content = [b for b in message.blocks if not isinstance(b, ToolCallBlock)]
    calls = [b for b in message.blocks if isinstance(b, ToolCallBlock)]
    if len(content) == 1 and isinstance(content[0], TextBlock):
        out["content"] = content[0].text
    elif content:
        out["content"] = [_part(b, message) for b in content]
    else:
        out["content"] = None if calls else ""
    if calls:
        out["tool_calls"] = [_call(c) for c in calls]
    return out


def _result(result: ToolResultBlock) -> Any:
    if all(isinstance(p, TextBlock) for p in result.content) and len(result.content) > 1:
        return [
            {"type": "text", "text": p.text} for p in result.content if isinstance(p, TextBlock)
        ]
    if result.content and not all(isinstance(p, TextBlock) for p in result.content):
        kinds = ", ".join(sorted({p.kind for p in result.content}))
        raise UnsupportedInTarget(
            f"turngate: tool result '{result.call_id}' (block '{result.id}') carries {kinds}; "
            "Chat tool messages carry text only"
        )
    return result_text(result)


def _part(block: AnyBlock, message: Message) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, RefusalBlock):
        return {"type": "refusal", "refusal": block.text}
    if isinstance(block, ImageBlock):
        url = data_url(block.media_type, block.data) if block.source == "base64" else block.data
        if block.source == "file":
            raise _unsupported(block, message, "an image by provider file id")
        return {"type": "image_url", "image_url": {"url": url}}
    if isinstance(block, AudioBlock) and block.source == "base64":
        audio = {"data": block.data, "format": (block.media_type or "audio/wav").split("/")[-1]}
        return {"type": "input_audio", "input_audio": audio}
    if isinstance(block, FileBlock) and block.source in ("base64", "file"):
        file: dict[str, Any] = (
            {"file_data": data_url(block.media_type, block.data)}
            if block.source == "base64"
            else {"file_id": block.data}
        )
        if block.filename is not None:
            file["filename"] = block.filename
        return {"type": "file", "file": file}
    raise _unsupported(block, message, f"a {block.kind} block of this form")


def _unsupported(block: AnyBlock, message: Message, what: str) -> UnsupportedInTarget:
    return UnsupportedInTarget(
        f"turngate: {what} (block '{block.id}', {message.location}) cannot be sent to "
        "openai_chat; it is refused rather than dropped"
    )


def _call(call: ToolCallBlock) -> dict[str, Any]:
    if call.tool_type == "custom":
        return {
            "id": call.call_id,
            "type": "custom",
            "custom": {"name": call.name, "input": call.arguments},
        }
    return {
        "id": call.call_id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }


def _tool(tool: ToolDef) -> dict[str, Any]:
    if tool.tool_type == "hosted":
        raise UnsupportedInTarget(
            f"turngate: hosted tool '{tool.name}' cannot be offered to openai_chat; "
            "it is refused rather than dropped"
        )
    if tool.tool_type == "custom":
        return {"type": "custom", "custom": {"name": tool.name}}
    function: dict[str, Any] = {"name": tool.name}
    if tool.description is not None:
        function["description"] = tool.description
    if tool.parameters is not None:
        function["parameters"] = tool.parameters
    return {"type": "function", "function": function}

"""Rendering a graph parsed from another API as a Responses request.

Only modelled fields are used (a foreign graph's attrs belong to its own API). Results
become ``function_call_output`` items after their calls, one per call in call order
(``fit_to`` placed them); anything Responses cannot carry was refused there or is refused
here with ``unsupported_in_target``, never dropped.
"""

from __future__ import annotations

from typing import Any

from turngate.adapters.openai_chat.request import data_url
from turngate.adapters.openai_responses.request import custom_call_ids, render_item_block
from turngate.errors import UnsupportedInTarget
from turngate.graph.capabilities import Capabilities
from turngate.graph.model import (
    AnyBlock,
    AudioBlock,
    FileBlock,
    ImageBlock,
    Message,
    MessageSequence,
    RefusalBlock,
    TextBlock,
    ToolCallBlock,
    ToolDef,
    ToolResultBlock,
)
from turngate.graph.normalize import fit_to, result_text

# Where a top-level instruction slot of another API came from (Anthropic ``system``,
# Gemini ``systemInstruction``) rather than its message list.
_LIST_ORIGINS = frozenset({"messages", "input", "contents"})
_AUDIO_FORMATS = {
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/wave": "wav",
    "audio/mp3": "mp3",
    "audio/mpeg": "mp3",
}
_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


def render_foreign(seq: MessageSequence, caps: Capabilities) -> dict[str, Any]:
    fitted = fit_to(seq, caps)
    body: dict[str, Any] = {"model": seq.model or ""}
    messages = list(fitted.messages)
    if messages and _instructions_slot(messages[0]):
        body["instructions"] = _only_text(messages.pop(0))
    renderer = _Renderer(seq.api, custom_call_ids(fitted))
    body["input"] = [item for m in messages for item in renderer.items(m)]
    if fitted.tools:
        body["tools"] = [_tool(t) for t in fitted.tools]
    if seq.max_output_tokens is not None:
        body["max_output_tokens"] = seq.max_output_tokens
    if seq.stream:
        body["stream"] = True
    return body


def _instructions_slot(message: Message) -> bool:
    return (
        message.role in ("system", "developer")
        and message.origin not in _LIST_ORIGINS
        and len(message.blocks) == 1
        and isinstance(message.blocks[0], TextBlock)
    )


def _only_text(message: Message) -> str:
    block = message.blocks[0]
    assert isinstance(block, TextBlock)
    return block.text


class _Renderer:
    def __init__(self, source_api: str, custom_calls: set[str]) -> None:
        self.source_api = source_api
        self.custom_calls = custom_calls

    def items(self, message: Message) -> list[Any]:
        items: list[Any] = []
        run: list[AnyBlock] = []
        for block in message.blocks:
            if isinstance(block, TextBlock | RefusalBlock | ImageBlock | AudioBlock | FileBlock):
                run.append(block)
                continue
            items.extend(self._content(message, run))
            run = []
            if isinstance(block, ToolCallBlock):
                items.append(_call(block))
            elif isinstance(block, ToolResultBlock):
                items.append(self._result(message, block))
            else:
                # Reasoning, hosted-tool and compaction blocks reach here only when they are
                # bound to openai_responses (fit_to refused any other): render them as ours.
                items.append(render_item_block(block, "item", self.custom_calls))
        items.extend(self._content(message, run))
        return items

    def _content(self, message: Message, run: list[AnyBlock]) -> list[Any]:
        if not run:
            return []
        if message.role == "assistant":
            return [self._assistant(message, b) for b in run]
        role = "user" if message.role == "tool" else message.role
        if len(run) == 1 and isinstance(run[0], TextBlock):
            return [{"role": role, "content": run[0].text}]
        return [{"role": role, "content": [self._part(message, b) for b in run]}]

    def _assistant(self, message: Message, block: AnyBlock) -> dict[str, Any]:
        """One item per assistant block, so separate texts stay separate items."""
        if isinstance(block, TextBlock):
            return {"role": "assistant", "content": block.text}
        if isinstance(block, RefusalBlock):
            return {
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "refusal", "refusal": block.text}],
            }
        raise _unsupported(block, message, f"an assistant {block.kind} block")

    def _part(self, message: Message, block: AnyBlock) -> dict[str, Any]:
        if isinstance(block, TextBlock):
            return {"type": "input_text", "text": block.text}
        if isinstance(block, ImageBlock):
            if block.source == "base64":
                return {
                    "type": "input_image",
                    "detail": "auto",
                    "image_url": data_url(block.media_type, block.data),
                }
            if block.source == "url":
                return {"type": "input_image", "detail": "auto", "image_url": block.data}
            if block.source == "file" and self._openai_file(block, message):
                return {"type": "input_image", "detail": "auto", "file_id": block.data}
        if isinstance(block, AudioBlock) and block.source == "base64":
            fmt = _AUDIO_FORMATS.get(block.media_type or "")
            if fmt is not None:
                return {"type": "input_audio", "input_audio": {"data": block.data, "format": fmt}}
        if isinstance(block, FileBlock):
            file: dict[str, Any] | None = None
            if block.source == "base64":
                file = {"file_data": data_url(block.media_type, block.data)}
            elif block.source == "url":
                file = {"file_url": block.data}
            elif block.source == "file" and self._openai_file(block, message):
                file = {"file_id": block.data}
            if file is not None:
                if block.filename is not None:
                    file["filename"] = block.filename
                return {"type": "input_file", **file}
        raise _unsupported(block, message, f"a {block.kind} block of this form")

    def _openai_file(self, block: AnyBlock, message: Message) -> bool:
        """Provider file ids do not cross providers; an OpenAI Chat file id is ours too."""
        if self.source_api == "openai_chat":
            return True
        raise _unsupported(block, message, f"a {block.kind} given by a {self.source_api} file id")

    def _result(self, message: Message, block: ToolResultBlock) -> dict[str, Any]:
        custom = block.call_id in self.custom_calls
        texts = [p for p in block.content if isinstance(p, TextBlock)]
        output: Any
        if len(texts) == len(block.content) and len(texts) != 1 and texts:
            # Separate text parts stay separate parts.
            output = [{"type": "input_text", "text": p.text} for p in texts]
        elif len(texts) == len(block.content):
            output = result_text(block)
        else:
            output = [self._result_part(message, block, p) for p in block.content]
        return {
            "type": "custom_tool_call_output" if custom else "function_call_output",
            "call_id": block.call_id,
            "output": output,
        }

    def _result_part(
        self, message: Message, result: ToolResultBlock, part: AnyBlock
    ) -> dict[str, Any]:
        if isinstance(part, TextBlock | ImageBlock | FileBlock):
            return self._part(message, part)
        raise _unsupported(part, message, f"a {part.kind} in tool result '{result.call_id}'")


def _call(block: ToolCallBlock) -> dict[str, Any]:
    if block.tool_type == "custom":
        return {
            "type": "custom_tool_call",
            "call_id": block.call_id,
            "name": block.name,
            "input": block.arguments,
        }
    return {
        "type": "function_call",
        "call_id": block.call_id,
        "name": block.name,
        "arguments": block.arguments,
    }


def _tool(tool: ToolDef) -> dict[str, Any]:
    if tool.tool_type == "hosted":
        raise UnsupportedInTarget(
            f"turngate: hosted tool '{tool.name}' cannot be offered to openai_responses; "
            "it is refused rather than dropped"
        )
    out: dict[str, Any] = {"type": tool.tool_type, "name": tool.name}
    if tool.description is not None:
        out["description"] = tool.description
    if tool.tool_type == "function":
        out["parameters"] = tool.parameters if tool.parameters is not None else _EMPTY_SCHEMA
        # Chat, Anthropic and Gemini schemas are not written for strict mode, which
        # Responses would otherwise assume.
        out["strict"] = False
    return out


def _unsupported(block: AnyBlock, message: Message, what: str) -> UnsupportedInTarget:
    return UnsupportedInTarget(
        f"turngate: {what} (block '{block.id}', {message.location}) cannot be sent to "
        "openai_responses; it is refused rather than dropped"
    )

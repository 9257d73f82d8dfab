"""OpenAI Responses request bodies <-> MessageSequence.

``input`` is a string (one user message, shape ``input_string``) or a list of items, each
one Message (see ``items.py``). ``instructions`` becomes a system Message with origin
``instructions``. With ``previous_response_id`` or ``conversation`` (or an
``item_reference``) the provider holds part of the history: the sequence is marked
``history="partial"`` and the validator judges only what is visible.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turngate.adapters.base import RouteInfo, merged, remainder, without_hint
from turngate.adapters.openai_chat.request import OrderCounter, data_url
from turngate.adapters.openai_responses.items import (
    API,
    BARE_NOTE,
    CONTROL_ITEMS,
    NAMED_OUTPUT,
    ItemParser,
)
from turngate.errors import BadRequestBody, UnsupportedInTarget
from turngate.graph.model import (
    ITEM_NOTE,
    AnyBlock,
    AudioBlock,
    CompressionBlock,
    FileBlock,
    ImageBlock,
    Message,
    MessageSequence,
    ReasoningBlock,
    RefusalBlock,
    ServerToolBlock,
    TextBlock,
    ToolCallBlock,
    ToolDef,
    ToolResultBlock,
    UnknownBlock,
)

ADAPTER_ID = "openai_responses@1"
INSTRUCTIONS = "instructions"
_TOOL_FIELDS = frozenset({"name", "description", "parameters"})


def parse_request(body: Mapping[str, Any], route: RouteInfo | None = None) -> MessageSequence:
    order = OrderCounter()
    messages: list[Message] = []
    envelope = {k: v for k, v in body.items() if k not in ("input", "tools")}
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        del envelope["instructions"]
        parser = ItemParser(INSTRUCTIONS, order)
        block = TextBlock(text=instructions, **parser.common("instructions.b0", "system"))
        messages.append(
            Message(index=0, role="system", blocks=(block,), origin=INSTRUCTIONS, shape="string")
        )
    parser = ItemParser("input", order)
    input_in = body.get("input")
    if isinstance(input_in, str):
        block = TextBlock(text=input_in, **parser.common("m0.b0", "user"))
        messages.append(
            Message(index=0, role="user", blocks=(block,), origin="input", shape="input_string")
        )
    elif isinstance(input_in, list) and input_in:
        messages.extend(parser.item(i, item) for i, item in enumerate(input_in))
    elif "input" in body and not isinstance(input_in, list):
        raise BadRequestBody(
            "'input' must be a string or a list of input items", rule="invalid_request"
        )
    elif "input" in body:
        envelope["input"] = input_in
    tools_in = body.get("tools")
    tools = tuple(parse_tool(t) for t in tools_in) if isinstance(tools_in, list) else ()
    if "tools" in body and not isinstance(tools_in, list):
        envelope["tools"] = tools_in
    max_tokens = body.get("max_output_tokens")
    model = body.get("model")
    return MessageSequence(
        api=API,
        adapter=ADAPTER_ID,
        model=model if isinstance(model, str) else None,
        messages=tuple(messages),
        tools=tools,
        envelope=envelope,
        max_output_tokens=max_tokens if isinstance(max_tokens, int) else None,
        stream=body.get("stream") is True,
        history="partial" if _history_held_upstream(body, messages) else "complete",
    )


def _history_held_upstream(body: Mapping[str, Any], messages: list[Message]) -> bool:
    previous = body.get("previous_response_id")
    if isinstance(previous, str) and previous:
        return True
    if body.get("conversation") not in (None, ""):
        return True
    return any(
        isinstance(b, CompressionBlock) and b.attrs.get(ITEM_NOTE) == "item_reference"
        for m in messages
        for b in m.blocks
    )


def parse_tool(native: Any) -> ToolDef:
    if not isinstance(native, dict):
        return ToolDef(name=type(native).__name__, tool_type="hosted", attrs={"$native": native})
    kind, name = native.get("type"), native.get("name")
    if kind in ("function", "custom") and isinstance(name, str):
        description, parameters = native.get("description"), native.get("parameters")
        modelled = {"name"}
        if isinstance(description, str):
            modelled.add("description")
        if kind == "function" and parameters is not None:
            modelled.add("parameters")
        return ToolDef(
            name=name,
            tool_type="function" if kind == "function" else "custom",
            description=description if isinstance(description, str) else None,
            parameters=parameters if "parameters" in modelled else None,
            attrs=remainder(native, frozenset(modelled)),
        )
    return ToolDef(name=str(kind), tool_type="hosted", attrs={"$native": native})


# --- rendering (a graph parsed from this API) --------------------------------------------


def render_request(seq: MessageSequence) -> dict[str, Any]:
    body = dict(seq.envelope)
    items: list[Any] = []
    custom_calls = custom_call_ids(seq)
    for message in seq.messages:
        if message.origin == INSTRUCTIONS:
            body["instructions"] = _only_text(message)
        elif message.shape == "input_string":
            body["input"] = _only_text(message)
        else:
            items.extend(render_items(message, custom_calls))
    if items:
        body["input"] = items
    if seq.tools:
        body["tools"] = [_render_tool(t) for t in seq.tools]
    return body


def custom_call_ids(seq: MessageSequence) -> set[str]:
    return {
        b.call_id
        for _m, b in seq.blocks()
        if isinstance(b, ToolCallBlock) and b.tool_type == "custom"
    }


def _only_text(message: Message) -> str:
    first = message.blocks[0] if message.blocks else None
    return first.text if isinstance(first, TextBlock) else ""


_CONTENT = (TextBlock, RefusalBlock, ImageBlock, AudioBlock, FileBlock)


def render_items(message: Message, custom_calls: set[str]) -> list[Any]:
    """The item(s) one Message was parsed from: exactly one for a parsed graph.

    Content blocks in a row make one message item; every other block is an item of its own.
    """
    blocks = message.blocks
    only = blocks[0] if len(blocks) == 1 else None
    if (
        isinstance(only, UnknownBlock)
        and message.shape != "parts"
        and not only.native_type.startswith("content:")
    ):
        return [_unknown(only)]
    items: list[Any] = []
    run: list[AnyBlock] = []
    for block in blocks:
        if isinstance(block, _CONTENT) or (
            isinstance(block, UnknownBlock) and message.shape != "item"
        ):
            run.append(block)
            continue
        if run:
            items.append(_render_message(message, run))
            run = []
        items.append(render_item_block(block, message.shape, custom_calls))
    if run or (not items and message.shape != "item"):
        items.append(_render_message(message, run))
    return items


def _unknown(block: UnknownBlock) -> Any:
    """An unknown item or part as it was sent (non-objects are kept under ``value``)."""
    if block.native_type.startswith(("item:", "part:", "content:")):
        return block.attrs.get("value")
    return without_hint(block.attrs)


def _render_message(message: Message, content: list[AnyBlock]) -> dict[str, Any]:
    out: dict[str, Any] = dict(message.attrs)
    out["role"] = message.role
    if message.shape == "absent":
        return out
    if message.shape == "string" and len(content) == 1 and isinstance(content[0], TextBlock):
        out["content"] = content[0].text
    elif message.shape == "opaque" and len(content) == 1 and isinstance(content[0], UnknownBlock):
        out["content"] = _unknown(content[0])
    else:
        out["content"] = [render_part(b, message.role == "assistant") for b in content]
    return out


def render_part(block: AnyBlock, assistant: bool) -> Any:
    attrs = dict(block.attrs)
    if isinstance(block, TextBlock):
        out = merged({"text": block.text}, attrs)
        out.setdefault("type", "output_text" if assistant else "input_text")
        return out
    if isinstance(block, RefusalBlock):
        return merged({"type": "refusal", "refusal": block.text}, attrs)
    if isinstance(block, ImageBlock):
        if block.source == "file":
            image: dict[str, Any] = {"file_id": block.data}
        elif block.source == "base64":
            image = {"image_url": data_url(block.media_type, block.data)}
        else:
            image = {"image_url": block.data}
        return merged({"type": "input_image", **image}, attrs)
    if isinstance(block, AudioBlock):
        audio: dict[str, Any] = {"data": block.data}
        if block.media_type is not None:
            audio["format"] = block.media_type.removeprefix("audio/")
        return merged({"type": "input_audio", "input_audio": audio}, attrs)
    if isinstance(block, FileBlock):
        bare = attrs.pop(BARE_NOTE, False)
        if block.source == "file":
            file: dict[str, Any] = {"file_id": block.data}
        elif block.source == "url":
            file = {"file_url": block.data}
        elif block.source == "base64" and not bare:
            file = {"file_data": data_url(block.media_type, block.data)}
        else:
            file = {"file_data": block.data}
        if block.filename is not None:
            file["filename"] = block.filename
        return merged({"type": "input_file", **file}, attrs)
    if isinstance(block, UnknownBlock):
        return _unknown(block)
    raise UnsupportedInTarget(
        f"turngate: a {block.kind} block (block '{block.id}') cannot be a Responses content part"
    )


def render_item_block(block: AnyBlock, shape: str, custom_calls: set[str]) -> Any:
    """A block that is a whole item on its own (call, output, reasoning, hosted…)."""
    attrs = dict(block.attrs)
    out: dict[str, Any]
    if isinstance(block, ToolCallBlock):
        custom = block.tool_type == "custom"
        data_key = "input" if custom else "arguments"
        out = merged(
            {"call_id": block.call_id, "name": block.name, data_key: block.arguments}, attrs
        )
        out.setdefault("type", "custom_tool_call" if custom else "function_call")
        return out
    if isinstance(block, ToolResultBlock):
        output: Any
        only = block.content[0] if len(block.content) == 1 else None
        if shape != "parts" and isinstance(only, TextBlock):
            output = only.text
        else:
            output = [render_part(p, assistant=False) for p in block.content]
        modelled: dict[str, Any] = {"call_id": block.call_id, "output": output}
        if block.name is not None:
            modelled["name"] = block.name
        out = merged(modelled, attrs)
        custom = block.call_id in custom_calls
        out.setdefault("type", "custom_tool_call_output" if custom else "function_call_output")
        return out
    if isinstance(block, ReasoningBlock):
        out = merged({} if block.payload is None else {"encrypted_content": block.payload}, attrs)
        out.setdefault("type", "reasoning")
        if "summary" not in out:
            summary = [{"type": "summary_text", "text": block.text}] if block.text else []
            out["summary"] = summary
        return out
    if isinstance(block, ServerToolBlock):
        out = merged({} if block.call_id is None else {"call_id": block.call_id}, attrs)
        out.setdefault("type", block.name)
        return out
    if isinstance(block, CompressionBlock):
        note = attrs.pop(ITEM_NOTE, "compaction")
        if note == "item_reference":
            return merged({"id": block.payload}, attrs)
        if note in CONTROL_ITEMS or note == NAMED_OUTPUT:
            return attrs
        out = merged({"encrypted_content": block.payload}, attrs)
        out.setdefault("type", "compaction")
        return out
    if isinstance(block, UnknownBlock):
        return _unknown(block)
    raise UnsupportedInTarget(
        f"turngate: a {block.kind} block (block '{block.id}') cannot be a Responses input item"
    )


def _render_tool(tool: ToolDef) -> Any:
    if tool.tool_type == "hosted":
        return tool.attrs.get("$native")
    modelled: dict[str, Any] = {"name": tool.name}
    if tool.description is not None:
        modelled["description"] = tool.description
    if tool.parameters is not None:
        modelled["parameters"] = tool.parameters
    out = merged(modelled, tool.attrs)
    out.setdefault("type", tool.tool_type)
    return out

"""OpenAI Chat Completions request bodies <-> MessageSequence."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import partial
from typing import Any, cast

from turngate.adapters.base import (
    MODEL_ROLE_HINT,
    UNTYPED_PART_FIX,
    RouteInfo,
    default_trust,
    merged,
    remainder,
    role_hint,
    with_hint,
    without_hint,
)
from turngate.errors import BadRequestBody
from turngate.graph.codec import arguments_complete, json_type
from turngate.graph.model import (
    AnyBlock,
    ApiName,
    AudioBlock,
    ContentBlock,
    FileBlock,
    ImageBlock,
    MediaSource,
    Message,
    MessageSequence,
    RefusalBlock,
    Role,
    TextBlock,
    ToolCallBlock,
    ToolDef,
    ToolResultBlock,
    UnknownBlock,
    new_message,
    new_outlined_sequence,
    new_text_block,
    new_tool_call,
    new_tool_result,
)
from turngate.graph.outline import OutlineCall, OutlineMessage, SequenceOutline
from turngate.graph.rules.openai_chat import MAX_ARRAY, UNTYPED, name_fits
from turngate.graph.rules.openai_strings import MAX_STRING

API: ApiName = "openai_chat"
ADAPTER_ID = "openai_chat@1"
ROLES: frozenset[str] = frozenset({"system", "developer", "user", "assistant", "tool"})
# The fix for roles other APIs (or older Chat) use, added to their refusal.
ROLE_HINTS = {
    "function": (
        "a role Chat has deprecated: send tool output as a tool message with the call's "
        "tool_call_id"
    ),
    "model": MODEL_ROLE_HINT,
}

_MESSAGE_FIELDS = frozenset({"role", "content", "tool_calls", "tool_call_id"})
_CALL_FIELDS = frozenset({"id", "type", "function", "custom"})
_FUNCTION_FIELDS = frozenset({"name", "arguments"})
_CUSTOM_FIELDS = frozenset({"name", "input"})
_TOOL_FUNCTION_FIELDS = frozenset({"name", "description", "parameters"})
_TYPE_ONLY = frozenset({"type"})
_TEXT_FIELDS = frozenset({"type", "text"})


def parse_request(body: Mapping[str, Any], route: RouteInfo | None = None) -> MessageSequence:
    messages_in = body.get("messages")
    if not isinstance(messages_in, list):
        raise BadRequestBody("'messages' must be a list of messages", rule="invalid_request")
    tools_in = body.get("tools")
    tools = tuple(_parse_tool(t) for t in tools_in) if isinstance(tools_in, list) else ()
    envelope = {k: v for k, v in body.items() if k not in ("messages", "tools")}
    if "tools" in body and not isinstance(tools_in, list):
        envelope["tools"] = tools_in
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    model = body.get("model")
    outline = outline_messages(messages_in)
    if outline is not None:
        return new_outlined_sequence(
            api=API,
            adapter=ADAPTER_ID,
            model=model if isinstance(model, str) else None,
            outline=SequenceOutline(outline, messages_in, partial(parse_messages, messages_in)),
            tools=tools,
            envelope=envelope,
            max_output_tokens=max_tokens if isinstance(max_tokens, int) else None,
            stream=body.get("stream") is True,
        )
    return MessageSequence(
        api=API,
        adapter=ADAPTER_ID,
        model=model if isinstance(model, str) else None,
        messages=parse_messages(messages_in),
        tools=tools,
        envelope=envelope,
        max_output_tokens=max_tokens if isinstance(max_tokens, int) else None,
        stream=body.get("stream") is True,
    )


def parse_messages(messages_in: list[Any]) -> tuple[Message, ...]:
    order = OrderCounter()
    return tuple([parse_message(i, m, order) for i, m in enumerate(messages_in)])


_PLAIN_ROLES = frozenset({"system", "developer", "user", "assistant"})
_PLAIN_CALL_FIELDS = frozenset({"id", "type", "function"})


def outline_messages(messages_in: list[Any]) -> tuple[OutlineMessage, ...] | None:
    """The outline of messages that are all plain (graph/outline.py), else None.

    Each test below keeps a message out of the outline unless ``parse_message`` would build
    exactly a text block in its role, function calls with no extra fields, or a result of one
    text part, with no attrs anywhere; and none is a shape graph/rules/openai_chat.py refuses
    (no messages, a call name outside OpenAI's pattern, more than 128 calls in a message) or
    graph/rules/openai_strings.py does (a string past OpenAI's limit).
    """
    if not messages_in:
        return None
    out: list[OutlineMessage] = []
    append = out.append
    for native in messages_in:
        if type(native) is not dict or not native.keys() <= _MESSAGE_FIELDS:
            return None
        role = native.get("role")
        content = native.get("content")
        if type(role) is not str:
            return None
        if role == "tool":
            call_id = native.get("tool_call_id")
            if (
                type(content) is not str
                or type(call_id) is not str
                or "tool_calls" in native
                or len(content) > MAX_STRING
            ):
                return None
            append((role, content, (), call_id))
            continue
        if role not in _PLAIN_ROLES or "tool_call_id" in native:
            return None
        if "tool_calls" not in native:
            if type(content) is not str or len(content) > MAX_STRING:
                return None
            append((role, content, (), None))
            continue
        calls_in = native["tool_calls"]
        if (
            role != "assistant"
            or type(calls_in) is not list
            or not calls_in
            or len(calls_in) > MAX_ARRAY
        ):
            return None
        if content is not None and (type(content) is not str or len(content) > MAX_STRING):
            return None
        calls = _outline_calls(calls_in)
        if calls is None:
            return None
        append((role, content, calls, None))
    return tuple(out)


def _outline_calls(calls_in: list[Any]) -> tuple[OutlineCall, ...] | None:
    calls: list[OutlineCall] = []
    for call in calls_in:
        if (
            type(call) is not dict
            or not call.keys() <= _PLAIN_CALL_FIELDS
            or call.get("type") != "function"
        ):
            return None
        call_id, function = call.get("id"), call.get("function")
        if type(call_id) is not str or type(function) is not dict:
            return None
        name, arguments = function.get("name"), function.get("arguments")
        if (
            type(name) is not str
            or not name_fits(name)
            or type(arguments) is not str
            or not function.keys() <= _FUNCTION_FIELDS
            or len(arguments) > MAX_STRING
        ):
            return None
        calls.append((call_id, name, arguments, arguments_complete(arguments)))
    return tuple(calls)


class OrderCounter:
    def __init__(self) -> None:
        self.value = 0

    def next(self) -> int:
        self.value += 1
        return self.value - 1


def parse_message(index: int, native: Any, order: OrderCounter) -> Message:
    if not isinstance(native, dict):
        raise BadRequestBody(f"messages[{index}] must be an object", rule="invalid_request")
    role_in = native.get("role")
    prefix = f"m{index}"
    if not isinstance(role_in, str) or role_in not in ROLES:
        block = UnknownBlock(
            id=f"{prefix}.b0",
            role="user",
            order=order.next(),
            trust="untrusted",
            native_type=f"role:{role_in}",
            attrs=with_hint(dict(native), role_hint(ROLE_HINTS, role_in)),
        )
        return Message(index=index, role="user", blocks=(block,), shape="opaque")
    role = cast(Role, role_in)
    trust = default_trust(role)
    # Every step here runs once per message of every request: the common shapes (no
    # extra fields, string content) skip the general helpers.
    attrs = {} if native.keys() <= _MESSAGE_FIELDS else remainder(native, _MESSAGE_FIELDS)
    blocks: list[AnyBlock] = []
    content = native.get("content", _ABSENT)
    shape, parts = (
        ("string", _NO_PARTS) if isinstance(content, str) else _content_shape(content, index)
    )
    if role == "tool":
        call_id = native.get("tool_call_id")
        result_parts: tuple[ContentBlock, ...]
        if shape == "string":
            result_parts = (
                new_text_block(
                    id=f"{prefix}.b0.c0", role="tool", order=order.next(), trust=trust, text=content
                ),
            )
        else:
            result_parts = cast(
                tuple[ContentBlock, ...],
                tuple(
                    [
                        _parse_part(f"{prefix}.b0.c{j}", "tool", p, order, (index, j))
                        for j, p in enumerate(parts)
                    ]
                ),
            )
        blocks.append(
            new_tool_result(
                id=f"{prefix}.b0",
                role="tool",
                order=order.next(),
                trust=trust,
                call_id=call_id if isinstance(call_id, str) else "",
                content=result_parts,
            )
        )
    elif shape == "string":
        blocks.append(
            new_text_block(
                id=f"{prefix}.b0", role=role, order=order.next(), trust=trust, text=content
            )
        )
    else:
        for part in parts:
            place = (index, len(blocks))
            blocks.append(_parse_part(f"{prefix}.b{len(blocks)}", role, part, order, place))
    if role != "tool" and ("tool_calls" in native or "tool_call_id" in native):
        calls = native.get("tool_calls")
        if isinstance(calls, list) and calls:
            for call in calls:
                blocks.append(_parse_call(f"{prefix}.b{len(blocks)}", call, order))
        elif "tool_calls" in native:
            attrs["tool_calls"] = calls
        if "tool_call_id" in native:
            attrs["tool_call_id"] = native["tool_call_id"]
    return new_message(index=index, role=role, blocks=tuple(blocks), shape=shape, attrs=attrs)


class _Absent:
    pass


_ABSENT = _Absent()
_NO_PARTS: list[Any] = []


def _content_shape(content: Any, index: int) -> tuple[str, list[Any]]:
    if isinstance(content, _Absent):
        return "absent", []
    if content is None:
        return "null", []
    if isinstance(content, str):
        return "string", []
    if isinstance(content, list):
        return "parts", content
    # A tool's result passed on as the object it returned: OpenAI takes text only.
    hint = (
        f"content must be a string or a list of parts, not a JSON {json_type(content)}; OpenAI: "
        f"\"Invalid type for 'messages[{index}].content': expected one of a string or array of "
        f"objects, but got {_openai_type(content)} instead.\" (send a tool's result as a "
        "string: json.dumps of it)"
    )
    opaque = {"type": f"content:{type(content).__name__}", "value": content}
    return "opaque", [with_hint(opaque, hint)]


def _openai_type(value: object) -> str:
    """The type of a JSON value as OpenAI's refusals name it ("an object", "an integer")."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    return "a number" if isinstance(value, float) else f"an {json_type(value)}"


def _parse_part(
    block_id: str, role: Role, part: Any, order: OrderCounter, place: tuple[int, int]
) -> AnyBlock:
    trust = default_trust(role)
    common: dict[str, Any] = {"id": block_id, "role": role, "order": order.next(), "trust": trust}
    if not isinstance(part, dict):
        kind_of = json_type(part)
        hint = (
            f'each part must be an object ({{"type": "text", "text": ...}}), not a JSON {kind_of}'
        )
        return UnknownBlock(
            native_type=type(part).__name__, attrs=with_hint({"value": part}, hint), **common
        )
    kind = part.get("type")
    if kind == "text" and isinstance(part.get("text"), str):
        return new_text_block(
            id=block_id,
            role=role,
            order=common["order"],
            trust=trust,
            text=part["text"],
            attrs=remainder(part, _TEXT_FIELDS),
        )
    if kind == "refusal" and isinstance(part.get("refusal"), str):
        return RefusalBlock(
            text=part["refusal"], attrs=remainder(part, frozenset({"type", "refusal"})), **common
        )
    if kind == "image_url" and isinstance(part.get("image_url"), dict):
        image = part["image_url"]
        url = image.get("url")
        if isinstance(url, str):
            attrs = remainder(part, _TYPE_ONLY)
            attrs["image_url"] = remainder(image, frozenset({"url"}))
            media_type, data = split_data_url(url)
            source: MediaSource = "url" if media_type is None else "base64"
            return ImageBlock(
                source=source, data=data, media_type=media_type, attrs=attrs, **common
            )
    if kind == "input_audio" and isinstance(part.get("input_audio"), dict):
        audio = part["input_audio"]
        if isinstance(audio.get("data"), str):
            attrs = remainder(part, _TYPE_ONLY)
            attrs["input_audio"] = remainder(audio, frozenset({"data", "format"}))
            fmt = audio.get("format")
            return AudioBlock(
                source="base64",
                data=audio["data"],
                media_type=f"audio/{fmt}" if isinstance(fmt, str) else None,
                attrs=attrs,
                **common,
            )
    if kind == "file" and isinstance(part.get("file"), dict):
        file = part["file"]
        data = file.get("file_data", file.get("file_id"))
        if isinstance(data, str):
            attrs = remainder(part, _TYPE_ONLY)
            attrs["file"] = remainder(file, frozenset({"file_data", "file_id", "filename"}))
            name = file.get("filename")
            media_type = None
            file_source: MediaSource = "file"
            if "file_data" in file:
                media_type, data = split_data_url(data)
                file_source = "url" if media_type is None else "base64"
            return FileBlock(
                source=file_source,
                data=data,
                media_type=media_type,
                filename=name if isinstance(name, str) else None,
                attrs=attrs,
                **common,
            )
    fix: str | None = None
    message, position = place
    if "type" not in part:
        fix = (
            f"the part has no type; OpenAI: \"Missing required parameter: 'messages[{message}]."
            f"content[{position}].type'.\" {UNTYPED_PART_FIX}"
        )
    elif isinstance(kind, str) and kind in _FOREIGN_PARTS:
        fix = (
            f"OpenAI, of 'messages[{message}].content[{position}].type': \"Invalid value: "
            f"'{kind}'. {_CHAT_PARTS}\" ({_FOREIGN_PARTS[kind]})"
        )
    return UnknownBlock(native_type=str(kind), attrs=with_hint(dict(part), fix), **common)


_CHAT_PARTS = (
    "Supported values are: 'text', 'image_url', 'input_audio', 'refusal', 'audio', and 'file'."
)
_AS_TEXT = "type it 'text'"
_AS_IMAGE = 'send it as {"type": "image_url", "image_url": {"url": ...}}'
_AS_FILE = 'send it as {"type": "file", "file": {"file_data": ...} or {"file_id": ...}}'
_NO_REASONING = "Chat takes no reasoning back in its history: leave it out"
_AS_CALL = "send a call in the assistant message's tool_calls"
_AS_RESULT = 'send a result as a {"role": "tool", "tool_call_id": ...} message'
# Parts of the other APIs, in a history carried over from another provider (or a
# framework's own blocks), and what Chat takes for each.
_FOREIGN_PARTS = {
    "input_text": _AS_TEXT,
    "output_text": _AS_TEXT,
    "image": _AS_IMAGE,
    "input_image": _AS_IMAGE,
    "document": _AS_FILE,
    "input_file": _AS_FILE,
    "thinking": _NO_REASONING,
    "redacted_thinking": _NO_REASONING,
    "reasoning": _NO_REASONING,
    "tool_use": _AS_CALL,
    "function_call": _AS_CALL,
    "functionCall": _AS_CALL,
    "tool_result": _AS_RESULT,
    "function_call_output": _AS_RESULT,
    "functionResponse": _AS_RESULT,
}


def _parse_call(block_id: str, call: Any, order: OrderCounter) -> AnyBlock:
    position = order.next()
    if not isinstance(call, dict):
        return UnknownBlock(
            native_type="tool_call", attrs={"value": call}, **_call_placement(block_id, position)
        )
    call_id = call.get("id")
    call_id = call_id if isinstance(call_id, str) else ""
    kind = call.get("type")
    # A call without its type is still read as the function call it is, so that the one
    # thing wrong with it is named (rule chat_call_type), not the results it leaves orphaned.
    untyped = "absent" if "type" not in call else "null" if kind is None else None
    if untyped is not None:
        kind = "function"
    function = call.get("function")
    if kind == "function" and isinstance(function, dict):
        name, arguments = function.get("name"), function.get("arguments")
        if isinstance(name, str) and isinstance(arguments, str):
            attrs = {} if call.keys() <= _CALL_FIELDS else remainder(call, _CALL_FIELDS)
            if untyped is not None:
                attrs[UNTYPED] = untyped
            if not function.keys() <= _FUNCTION_FIELDS:
                attrs["function"] = remainder(function, _FUNCTION_FIELDS)
            return new_tool_call(
                id=block_id,
                order=position,
                call_id=call_id,
                name=name,
                arguments=arguments,
                attrs=attrs,
            )
    if kind == "custom" and isinstance(call.get("custom"), dict):
        custom = call["custom"]
        name, data = custom.get("name"), custom.get("input")
        if isinstance(name, str) and isinstance(data, str):
            attrs = remainder(call, _CALL_FIELDS)
            extra = remainder(custom, _CUSTOM_FIELDS)
            if extra:
                attrs["custom"] = extra
            return new_tool_call(
                id=block_id,
                order=position,
                call_id=call_id,
                name=name,
                arguments=data,
                attrs=attrs,
                tool_type="custom",
            )
    hint = _malformed_function(function) if kind == "function" else None
    return UnknownBlock(
        native_type=f"tool_call:{kind}",
        attrs=with_hint(dict(call), hint),
        **_call_placement(block_id, position),
    )


def _malformed_function(function: object) -> str:
    """What is wrong with a tool call's ``function``, in the words OpenAI's refusal uses."""
    if not isinstance(function, dict):
        kind = json_type(function)
        return f"function must be an object with name and arguments, not a JSON {kind}"
    name, arguments = function.get("name"), function.get("arguments")
    if not isinstance(name, str):
        return f"function.name must be a string, not a JSON {json_type(name)}"
    if "arguments" not in function:
        return 'function.arguments is missing (a string of JSON: "{}" for none)'
    return (
        f"function.arguments must be a string of JSON, not a JSON {json_type(arguments)}; OpenAI: "
        f'"expected a string, but got {_article(json_type(arguments))} instead" (send '
        "json.dumps of the arguments)"
    )


def _article(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _call_placement(block_id: str, position: int) -> dict[str, Any]:
    return {"id": block_id, "role": "assistant", "order": position, "trust": "untrusted"}


def _parse_tool(native: Any) -> ToolDef:
    if isinstance(native, dict) and native.get("type") == "function":
        function = native.get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            attrs = remainder(native, frozenset({"type", "function"}))
            attrs["function"] = remainder(function, _TOOL_FUNCTION_FIELDS)
            for key in ("description", "parameters"):
                if key in function and function[key] is None:
                    attrs["function"][key] = None
            description = function.get("description")
            return ToolDef(
                name=function["name"],
                description=description if isinstance(description, str) else None,
                parameters=function.get("parameters"),
                attrs=attrs,
            )
    if isinstance(native, dict) and native.get("type") == "custom":
        custom = native.get("custom")
        if isinstance(custom, dict) and isinstance(custom.get("name"), str):
            return ToolDef(name=custom["name"], tool_type="custom", attrs=dict(native))
    name = native.get("type") if isinstance(native, dict) else None
    return ToolDef(name=str(name), tool_type="hosted", attrs={"$native": native})


_DATA_URL = re.compile(r"data:([\w.+-]+/[\w.+-]+);base64,(.*)", re.DOTALL)


def split_data_url(url: str) -> tuple[str | None, str]:
    """``data:<type>;base64,<payload>`` -> (type, payload); anything else -> (None, url)."""
    match = _DATA_URL.fullmatch(url)
    if match is None:
        return None, url
    return match.group(1), match.group(2)


def data_url(media_type: str | None, payload: str) -> str:
    return f"data:{media_type or 'application/octet-stream'};base64,{payload}"


# --- rendering -------------------------------------------------------------------------


def render_request(seq: MessageSequence) -> dict[str, Any]:
    body = dict(seq.envelope)
    outline = seq.outline
    if outline is not None:
        # Plain messages render as exactly what was parsed: the client's own objects.
        body["messages"] = list(outline.native)
    else:
        body["messages"] = [render_message(m) for m in seq.messages]
    if seq.tools:
        body["tools"] = [_render_tool(t) for t in seq.tools]
    return body


def render_message(message: Message) -> dict[str, Any]:
    if message.shape == "opaque" and len(message.blocks) == 1:
        only = message.blocks[0]
        if isinstance(only, UnknownBlock) and only.native_type.startswith("role:"):
            return without_hint(only.attrs)
    out: dict[str, Any] = dict(message.attrs)
    out["role"] = message.role
    content: list[AnyBlock] = []
    calls: list[ToolCallBlock] = []
    for block in message.blocks:
        if isinstance(block, ToolCallBlock):
            calls.append(block)
        elif isinstance(block, ToolResultBlock):
            out["tool_call_id"] = block.call_id
            content.extend(block.content)
        else:
            content.append(block)
    if calls:
        out["tool_calls"] = [_render_call(c) for c in calls]
    rendered_content = _render_content(message.shape, content)
    if message.shape != "absent":
        out["content"] = rendered_content
    return out


def _render_content(shape: str, blocks: list[AnyBlock]) -> Any:
    if shape == "null":
        return None
    if shape == "string":
        first = blocks[0] if blocks else None
        return first.text if isinstance(first, TextBlock) else ""
    if shape == "opaque" and blocks and isinstance(blocks[0], UnknownBlock):
        return blocks[0].attrs.get("value")
    return [_render_part(b) for b in blocks]


def _render_part(block: AnyBlock) -> Any:
    if isinstance(block, TextBlock):
        return merged({"type": "text", "text": block.text}, block.attrs)
    if isinstance(block, RefusalBlock):
        return merged({"type": "refusal", "refusal": block.text}, block.attrs)
    if isinstance(block, ImageBlock):
        url = data_url(block.media_type, block.data) if block.source == "base64" else block.data
        return merged({"type": "image_url", "image_url": {"url": url}}, block.attrs)
    if isinstance(block, AudioBlock):
        audio: dict[str, Any] = {"data": block.data}
        if block.media_type is not None:
            audio["format"] = block.media_type.removeprefix("audio/")
        return merged({"type": "input_audio", "input_audio": audio}, block.attrs)
    if isinstance(block, FileBlock):
        file: dict[str, Any] = (
            {"file_id": block.data}
            if block.source == "file"
            else {"file_data": data_url(block.media_type, block.data)}
            if block.source == "base64"
            else {"file_data": block.data}
        )
        if block.filename is not None:
            file["filename"] = block.filename
        return merged({"type": "file", "file": file}, block.attrs)
    if isinstance(block, UnknownBlock):
        return block.attrs["value"] if "value" in block.attrs else without_hint(block.attrs)
    raise BadRequestBody(f"block kind {block.kind} cannot be a Chat content part")


def _render_call(call: ToolCallBlock) -> dict[str, Any]:
    if call.tool_type == "custom":
        return merged(
            {
                "id": call.call_id,
                "type": "custom",
                "custom": {"name": call.name, "input": call.arguments},
            },
            call.attrs,
        )
    attrs = dict(call.attrs)
    untyped = attrs.pop(UNTYPED, None)
    out = merged(
        {
            "id": call.call_id,
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        },
        attrs,
    )
    if untyped == "absent":
        del out["type"]
    elif untyped == "null":
        out["type"] = None
    return out


def _render_tool(tool: ToolDef) -> Any:
    if tool.tool_type == "hosted":
        return tool.attrs.get("$native")
    if tool.tool_type == "custom":
        return tool.attrs
    function: dict[str, Any] = {"name": tool.name}
    if tool.description is not None:
        function["description"] = tool.description
    if tool.parameters is not None:
        function["parameters"] = tool.parameters
    return merged({"type": "function", "function": function}, tool.attrs)

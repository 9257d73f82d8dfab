"""Anthropic Messages request bodies <-> MessageSequence (graphs of this same API).

Top-level ``system`` becomes a system Message (origin ``system``, index 0); each entry of
``messages`` one Message, except that a ``mid_conv_system`` block (system instructions inside
another message) becomes a system Message of its own at the same index, so its text never
reads as user or assistant text. The rest of that entry follows as a ``continued`` Message,
and rendering joins them back into one entry.

Block ids are ``m{i}.b{j}`` for content block j of entry i (``.c{k}`` for parts nested in a
tool result, a ``mid_conv_system`` block or a ``search_result``), ``system.b{j}`` for
``system``. Unmodelled fields stay in ``attrs`` as a remainder, so
``render_request(parse_request(body)) == body``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from turngate.adapters.anthropic.blocks import (
    ABSENT,
    API,
    Absent,
    BlockParser,
    native_fields,
    render_blocks,
)
from turngate.adapters.base import (
    MODEL_ROLE_HINT,
    RouteInfo,
    default_trust,
    merged,
    remainder,
    role_hint,
    with_hint,
)
from turngate.errors import BadRequestBody
from turngate.graph.model import (
    AnyBlock,
    Message,
    MessageSequence,
    Role,
    TextBlock,
    ToolDef,
    UnknownBlock,
    new_message,
    new_text_block,
)

ADAPTER_ID = "anthropic@1"
SYSTEM = "system"
ROLES = frozenset({"user", "assistant", "system"})
_TOOL_OUTPUT = "send tool output as tool_result blocks (the call's tool_use_id) in a user message"
# The fix for roles other APIs use, added to their refusal.
ROLE_HINTS = {
    "tool": _TOOL_OUTPUT,
    "function": _TOOL_OUTPUT,
    "model": MODEL_ROLE_HINT,
}

# Message shapes beyond the content's own ("string", "parts", "absent", "opaque").
MID_CONV_SYSTEM = "mid_conv_system"
CONTINUED = "continued"

_MESSAGE_FIELDS = frozenset({"role", "content"})
_NESTED_FIELDS = frozenset({"type", "content"})


def parse_request(body: Mapping[str, Any], route: RouteInfo | None = None) -> MessageSequence:
    messages_in = body.get("messages")
    if not isinstance(messages_in, list):
        raise BadRequestBody("'messages' must be a list of messages", rule="invalid_request")
    parser = RequestParser()
    messages: list[Message] = []
    system = body.get("system", ABSENT)
    if isinstance(system, str | list):
        messages.append(parser.system(system))
    for index, native in enumerate(messages_in):
        messages.extend(parser.message(index, native))
    tools_in = body.get("tools")
    tools = tuple(parse_tool(t) for t in tools_in) if isinstance(tools_in, list) else ()
    envelope = {k: v for k, v in body.items() if k not in ("messages", "tools", "system")}
    if "tools" in body and not isinstance(tools_in, list):
        envelope["tools"] = tools_in
    if "system" in body and not isinstance(system, str | list):
        envelope["system"] = system
    max_tokens, model = body.get("max_tokens"), body.get("model")
    return MessageSequence(
        api=API,
        adapter=ADAPTER_ID,
        model=model if isinstance(model, str) else None,
        messages=tuple(messages),
        tools=tools,
        envelope=envelope,
        max_output_tokens=max_tokens if isinstance(max_tokens, int) else None,
        stream=body.get("stream") is True,
        history="partial" if thread_anchor(envelope) is not None else "complete",
        betas=route.betas if route is not None else (),
        api_version=route.api_version if route is not None else None,
    )


def thread_anchor(envelope: Mapping[str, Any]) -> str | None:
    """The reply a Message Threads request continues from (``thread: {"type": "continue",
    "previous_message_id": …}``): the server holds the conversation up to it, with the
    ``system`` and ``tools`` the thread was created with, and the request carries only
    what follows (nothing at all to resume a paused turn)."""
    thread = envelope.get("thread")
    if not isinstance(thread, dict) or thread.get("type") != "continue":
        return None
    anchor = thread.get("previous_message_id")
    return anchor if isinstance(anchor, str) and anchor else None


class RequestParser(BlockParser):
    """Parses ``system`` and the entries of ``messages``."""

    def system(self, system: str | list[Any]) -> Message:
        if isinstance(system, str):
            text = TextBlock(text=system, **self.common("system.b0", "system"))
            return Message(index=0, role="system", blocks=(text,), origin=SYSTEM, shape="string")
        blocks: list[AnyBlock] = []
        for j, part in enumerate(system):
            blocks.extend(self.block(f"system.b{j}", "system", part))
        return Message(index=0, role="system", blocks=tuple(blocks), origin=SYSTEM)

    def message(self, index: int, native: Any) -> list[Message]:
        if not isinstance(native, dict):
            raise BadRequestBody(f"messages[{index}] must be an object", rule="invalid_request")
        prefix = f"m{index}"
        role_in = native.get("role")
        if not isinstance(role_in, str) or role_in not in ROLES:
            unknown = UnknownBlock(
                native_type=f"role:{role_in}",
                attrs=with_hint(dict(native), role_hint(ROLE_HINTS, role_in)),
                **self.common(f"{prefix}.b0", "user"),
            )
            return [Message(index=index, role="user", blocks=(unknown,), shape="opaque")]
        role = cast(Role, role_in)
        attrs = remainder(native, _MESSAGE_FIELDS)
        content = native.get("content", ABSENT)
        if isinstance(content, str):
            text = new_text_block(
                id=f"{prefix}.b0",
                role=role,
                order=next(self._order),
                trust=default_trust(role),
                text=content,
            )
            return [
                new_message(index=index, role=role, blocks=(text,), shape="string", attrs=attrs)
            ]
        if isinstance(content, Absent):
            return [Message(index=index, role=role, blocks=(), shape="absent", attrs=attrs)]
        if not isinstance(content, list):
            unknown = UnknownBlock(
                native_type=f"content:{type(content).__name__}",
                attrs={"$value": content},
                **self.common(f"{prefix}.b0", role),
            )
            return [Message(index=index, role=role, blocks=(unknown,), shape="opaque", attrs=attrs)]
        out: list[Message] = []
        blocks: list[AnyBlock] = []
        shape = "parts"
        for j, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") == MID_CONV_SYSTEM:
                out.append(
                    Message(index=index, role=role, blocks=tuple(blocks), shape=shape, attrs=attrs)
                )
                out.append(self._mid_conv_system(index, f"{prefix}.b{j}", part))
                blocks, shape, attrs = [], CONTINUED, {}
                continue
            blocks.extend(self.block(f"{prefix}.b{j}", role, part))
        if blocks or not out:
            out.append(
                new_message(index=index, role=role, blocks=tuple(blocks), shape=shape, attrs=attrs)
            )
        return out

    def _mid_conv_system(self, index: int, block_id: str, part: dict[str, Any]) -> Message:
        nested = part.get("content")
        attrs = remainder(part, _NESTED_FIELDS)
        blocks: list[AnyBlock] = []
        if isinstance(nested, list):
            for k, item in enumerate(nested):
                blocks.extend(self.block(f"{block_id}.c{k}", "system", item))
        else:
            attrs["content"] = nested
        return Message(
            index=index, role="system", blocks=tuple(blocks), shape=MID_CONV_SYSTEM, attrs=attrs
        )


def parse_tool(native: Any) -> ToolDef:
    if (
        isinstance(native, dict)
        and isinstance(native.get("name"), str)
        and "input_schema" in native
    ):
        description = native.get("description")
        modelled = {"name", "input_schema"}
        if isinstance(description, str):
            modelled.add("description")
        return ToolDef(
            name=native["name"],
            description=description if isinstance(description, str) else None,
            parameters=native["input_schema"],
            attrs=remainder(native, frozenset(modelled)),
        )
    name = native.get("name", native.get("type")) if isinstance(native, dict) else None
    return ToolDef(name=str(name), tool_type="hosted", attrs={"$native": native})


# --- rendering a graph of this API -------------------------------------------------------


def render_request(seq: MessageSequence) -> dict[str, Any]:
    body = dict(seq.envelope)
    system = [m for m in seq.messages if m.origin == SYSTEM]
    if system:
        body["system"] = _render_content(system[0])
    body["messages"] = render_messages([m for m in seq.messages if m.origin != SYSTEM])
    if seq.tools:
        body["tools"] = [_render_tool(t) for t in seq.tools]
    return body


def render_messages(messages: list[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.shape == MID_CONV_SYSTEM and out:
            part: dict[str, Any] = {"type": MID_CONV_SYSTEM}
            if "content" not in message.attrs:
                part["content"] = render_blocks(message.blocks)
            out[-1]["content"].append(merged(part, native_fields(message.attrs)))
        elif message.shape == CONTINUED and out:
            out[-1]["content"].extend(render_blocks(message.blocks))
        else:
            out.append(render_message(message))
    return out


def render_message(message: Message) -> dict[str, Any]:
    if message.shape == "opaque" and len(message.blocks) == 1:
        only = message.blocks[0]
        if isinstance(only, UnknownBlock) and only.native_type.startswith("role:"):
            return dict(only.attrs)
    out: dict[str, Any] = dict(message.attrs)
    out["role"] = message.role
    if message.shape != "absent":
        out["content"] = _render_content(message)
    return out


def _render_content(message: Message) -> Any:
    blocks = message.blocks
    if message.shape == "string" and len(blocks) == 1 and isinstance(blocks[0], TextBlock):
        return blocks[0].text
    if message.shape == "opaque" and len(blocks) == 1 and isinstance(blocks[0], UnknownBlock):
        return blocks[0].attrs.get("$value")
    return render_blocks(blocks)


def _render_tool(tool: ToolDef) -> Any:
    if tool.tool_type == "hosted":
        return tool.attrs.get("$native")
    out: dict[str, Any] = {"name": tool.name, "input_schema": tool.parameters}
    if tool.description is not None:
        out["description"] = tool.description
    return merged(out, tool.attrs)

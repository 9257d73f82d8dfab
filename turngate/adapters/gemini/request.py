"""Gemini generateContent request bodies <-> MessageSequence.

The model and streaming live in the URL (``…/models/{model}:streamGenerateContent``), so
they come from ``RouteInfo`` and are never written into the body. Each entry of
``contents`` is one Message (role ``model`` or ``assistant`` -> assistant, ``system`` and
``developer`` as they are; no role -> user, noted so it is not added back);
``systemInstruction`` is a system Message of its own.

Call ids: Gemini's ``functionCall.id`` is optional and the Gemini API itself never sends
one. A call without an id gets ``gemini:{name}#{n}`` (its rank among same-name calls of
its content, so a response and the history that echoes it agree); a response without an
id takes the id of the call it answers, found by name and position in the content just
before it. Both are noted ``$synthesizedId`` and never rendered.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from turngate.adapters.base import RouteInfo, merged, remainder, role_hint, with_hint
from turngate.adapters.gemini.parts import (
    SYNTHESIZED_ID,
    OrderCounter,
    Spelling,
    native,
    parse_part,
    render_part,
)
from turngate.errors import BadRequestBody
from turngate.graph.codec import json_type
from turngate.graph.model import (
    AnyBlock,
    ApiName,
    Message,
    MessageSequence,
    Role,
    ToolCallBlock,
    ToolDef,
    ToolResultBlock,
    UnknownBlock,
)
from turngate.graph.rules.gemini import NATIVE, OPENAPI_PARAMETERS, PARAMETERS_KEY, TOOL_INDEX

API: ApiName = "gemini"
ADAPTER_ID = "gemini@1"

ROLE_ABSENT = "$roleAbsent"

# ``user`` and ``model`` (the SDK's two), and the roles the API has taken too since 2026
# ("Please use a valid role: SYSTEM, USER, ASSISTANT, DEVELOPER, …, MODEL": sashiko PR #500,
# Gemini-Kchat #5), each written back as the client spelled it (``ROLE_SPELLING``).
_ROLES: dict[str, Role] = {
    "user": "user",
    "model": "assistant",
    "assistant": "assistant",
    "system": "system",
    "developer": "developer",
}
_SPELLED_AS_IS = frozenset({"assistant", "system", "developer"})
# Gemini's words for a role other APIs give tool output, and the fix.
ROLE_HINTS = {
    role: f"Gemini: \"Role '{role}' is not supported. Please use a valid role\" (send "
    "functionResponse parts in a content with role user)"
    for role in ("function", "tool")
}
ROLE_SPELLING = "$role"


class _Absent:
    pass


_ABSENT = _Absent()


def parse_request(body: Mapping[str, Any], route: RouteInfo | None = None) -> MessageSequence:
    contents_in = body.get("contents")
    if not isinstance(contents_in, list):
        raise BadRequestBody("'contents' must be a list of Content objects", rule="invalid_request")
    order = OrderCounter()
    top = Spelling()
    messages: list[Message] = []
    system_key = top.read(body, "systemInstruction")
    if system_key is not None:
        messages.append(_parse_system(body[system_key], top, order))
    contents = [parse_content(i, c, order) for i, c in enumerate(contents_in)]
    messages.extend(pair_responses(contents))
    modelled = {"contents"} | ({system_key} if system_key else set())
    tools_in = body.get("tools")
    tools: tuple[ToolDef, ...] = ()
    if isinstance(tools_in, list):
        modelled.add("tools")
        tools = parse_tools(tools_in)
    route = route or RouteInfo()
    return MessageSequence(
        api=API,
        adapter=ADAPTER_ID,
        model=route.model,
        messages=tuple(messages),
        tools=tools,
        envelope=remainder(body, frozenset(modelled)),
        max_output_tokens=_max_output_tokens(body),
        stream=route.stream is True,
        history="partial" if names_a_cache(body) else "complete",
        endpoint=route.endpoint,
    )


def names_a_cache(body: Mapping[str, Any]) -> bool:
    """``cachedContent``: the provider holds the start of the conversation (and the tools,
    which Gemini then refuses in the request itself)."""
    cache = body.get(Spelling().read(body, "cachedContent") or "")
    return isinstance(cache, str) and cache != ""


def _max_output_tokens(body: Mapping[str, Any]) -> int | None:
    spelling = Spelling()
    config = body.get(spelling.read(body, "generationConfig") or "")
    if not isinstance(config, dict):
        return None
    value = config.get(spelling.read(config, "maxOutputTokens") or "")
    return value if isinstance(value, int) else None


def _parse_system(native_in: Any, top: Spelling, order: OrderCounter) -> Message:
    attrs: dict[str, Any] = top.note()
    if isinstance(native_in, str):
        block = parse_part("systemInstruction.b0", "system", {"text": native_in}, order)
        return Message(
            index=0,
            role="system",
            blocks=(block,),
            origin="systemInstruction",
            shape="string",
            attrs=attrs,
        )
    if not isinstance(native_in, dict):
        raise BadRequestBody("'systemInstruction' must be a Content object", rule="invalid_request")
    attrs.update(remainder(native_in, frozenset({"parts"})))
    parts = native_in.get("parts", _ABSENT)
    shape, blocks = "parts", []
    if isinstance(parts, list):
        blocks = [
            parse_part(f"systemInstruction.b{j}", "system", p, order) for j, p in enumerate(parts)
        ]
    elif isinstance(parts, _Absent):
        shape = "absent"
    else:
        attrs["parts"] = parts
        shape = "absent"
    return Message(
        index=0,
        role="system",
        blocks=tuple(blocks),
        origin="systemInstruction",
        shape=shape,
        attrs=attrs,
    )


def parse_content(index: int, native_in: Any, order: OrderCounter) -> Message:
    if not isinstance(native_in, dict):
        raise BadRequestBody(f"contents[{index}] must be an object", rule="invalid_request")
    role_in = native_in.get("role", _ABSENT)
    attrs = remainder(native_in, frozenset({"role", "parts"}))
    if isinstance(role_in, _Absent):
        role: Role = "user"
        attrs[ROLE_ABSENT] = True
    elif isinstance(role_in, str) and role_in in _ROLES:
        role = _ROLES[role_in]
        if role_in in _SPELLED_AS_IS:
            attrs[ROLE_SPELLING] = role_in
    else:
        return _opaque(index, f"role:{role_in}", native_in, order, role_hint(ROLE_HINTS, role_in))
    parts = native_in.get("parts", _ABSENT)
    if isinstance(parts, _Absent):
        return Message(
            index=index, role=role, blocks=(), origin="contents", shape="absent", attrs=attrs
        )
    if not isinstance(parts, list):
        hint = (
            f'parts must be a list of parts, [{{"text": ...}}], not a JSON {json_type(parts)} '
            f"(Gemini: \"Invalid value at 'contents[{index}].parts'\")"
        )
        return _opaque(index, f"parts:{type(parts).__name__}", native_in, order, hint)
    call_names: dict[str, int] = {}
    blocks = tuple(
        parse_part(f"m{index}.b{j}", role, p, order, call_names) for j, p in enumerate(parts)
    )
    return Message(index=index, role=role, blocks=blocks, origin="contents", attrs=attrs)


def _opaque(
    index: int, kind: str, native_in: dict[str, Any], order: OrderCounter, hint: str | None = None
) -> Message:
    attrs = with_hint({NATIVE: native_in}, hint)
    block = UnknownBlock(
        id=f"m{index}.b0",
        role="user",
        order=order.next(),
        trust="untrusted",
        native_type=kind,
        attrs=attrs,
    )
    return Message(index=index, role="user", blocks=(block,), origin="contents", shape="opaque")


def _unpaired(block: AnyBlock) -> bool:
    return (
        isinstance(block, ToolResultBlock)
        and block.call_id == ""
        and bool(block.attrs.get(SYNTHESIZED_ID))
    )


def pair_responses(contents: list[Message]) -> list[Message]:
    """Give each id-less functionResponse the id of the call it answers.

    The k-th id-less response named N in a content answers the k-th call named N (not
    already answered by id) of the model content right before it. A response with no such
    call gets an id no call has, so the validator reports it as an orphan.
    """
    out: list[Message] = []
    for position, message in enumerate(contents):
        if not any(_unpaired(b) for b in message.blocks):
            out.append(message)
            continue
        previous = contents[position - 1] if position > 0 else None
        calls: list[ToolCallBlock] = []
        if previous is not None and previous.role == "assistant":
            calls = [b for b in previous.blocks if isinstance(b, ToolCallBlock)]
        claimed = {
            b.call_id for b in message.blocks if isinstance(b, ToolResultBlock) and not _unpaired(b)
        }
        open_calls = [c for c in calls if c.call_id not in claimed]
        blocks: list[AnyBlock] = []
        for j, block in enumerate(message.blocks):
            if not (isinstance(block, ToolResultBlock) and _unpaired(block)):
                blocks.append(block)
                continue
            match = next((c for c in open_calls if c.name == block.name), None)
            if match is not None:
                open_calls.remove(match)
                call_id = match.call_id
            else:
                call_id = f"unpaired:{block.name}@{message.location}.parts[{j}]"
            blocks.append(dataclasses.replace(block, call_id=call_id))
        out.append(dataclasses.replace(message, blocks=tuple(blocks)))
    return out


# --- tools -----------------------------------------------------------------------------

_OPENAPI_TYPES = frozenset({"STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT", "NULL"})
# The conversion recurses; a body read by ``turngate check`` may nest 1024 levels.
_MAX_SCHEMA_DEPTH = 128


def json_schema_of(schema: Any, depth: int = 0) -> Any:
    """Gemini's OpenAPI-style ``parameters`` (``"type": "OBJECT"``) as JSON Schema: type
    names lowered, and ``nullable: true`` (OpenAPI 3.0's "or null") written into the type,
    the enum and the alternatives, where JSON Schema says it."""
    if depth > _MAX_SCHEMA_DEPTH:
        raise BadRequestBody(
            f"tool parameters nest deeper than {_MAX_SCHEMA_DEPTH} levels", rule="json_too_deep"
        )
    if isinstance(schema, dict):
        converted = {
            k: v.lower()
            if k == "type" and isinstance(v, str) and v in _OPENAPI_TYPES
            else json_schema_of(v, depth + 1)
            for k, v in schema.items()
        }
        return _or_null(converted) if converted.get("nullable") is True else converted
    if isinstance(schema, list):
        return [json_schema_of(v, depth + 1) for v in schema]
    return schema


def _or_null(schema: dict[str, Any]) -> dict[str, Any]:
    del schema["nullable"]
    kind = schema.get("type")
    if isinstance(kind, str):
        schema["type"] = [kind, "null"]
    enum = schema.get("enum")
    if isinstance(enum, list) and None not in enum:
        schema["enum"] = [*enum, None]
    alternatives = schema.get("anyOf")
    if isinstance(alternatives, list):
        schema["anyOf"] = [*alternatives, {"type": "null"}]
    return schema


def parse_tools(tools_in: list[Any]) -> tuple[ToolDef, ...]:
    out: list[ToolDef] = []
    for index, tool in enumerate(tools_in):
        spelling = Spelling()
        key = spelling.read(tool, "functionDeclarations") if isinstance(tool, dict) else None
        declarations = tool.get(key) if isinstance(tool, dict) and key else None
        if (
            not isinstance(declarations, list)
            or not declarations
            or not all(isinstance(d, dict) and isinstance(d.get("name"), str) for d in declarations)
        ):
            out.append(_hosted(index, tool))
            continue
        assert isinstance(tool, dict)
        assert key is not None
        rest = remainder(tool, frozenset({key}))
        if rest:
            out.append(_hosted(index, rest))
        out.extend(_parse_declaration(index, d, spelling) for d in declarations)
    return tuple(out)


def _hosted(index: int, tool: Any) -> ToolDef:
    name = next(iter(tool), "tool") if isinstance(tool, dict) else type(tool).__name__
    return ToolDef(name=str(name), tool_type="hosted", attrs={TOOL_INDEX: index, NATIVE: tool})


def _parse_declaration(index: int, declaration: dict[str, Any], spelling: Spelling) -> ToolDef:
    modelled = {"name"}
    description = declaration.get("description")
    if isinstance(description, str):
        modelled.add("description")
    attrs: dict[str, Any] = {TOOL_INDEX: index, **spelling.note()}
    parameters: Any = None
    for candidate in ("parametersJsonSchema", "parameters_json_schema", "parameters"):
        if isinstance(declaration.get(candidate), dict):
            modelled.add(candidate)
            attrs[PARAMETERS_KEY] = candidate
            parameters = declaration[candidate]
            if candidate == "parameters":
                converted = json_schema_of(parameters)
                if converted != parameters:
                    attrs[OPENAPI_PARAMETERS] = parameters
                    parameters = converted
            break
    attrs.update(remainder(declaration, frozenset(modelled)))
    return ToolDef(
        name=declaration["name"],
        description=description if isinstance(description, str) else None,
        parameters=parameters,
        attrs=attrs,
    )


def render_tools(tools: tuple[ToolDef, ...]) -> list[Any]:
    groups: dict[int, Any] = {}
    for tool in tools:
        index = tool.attrs.get(TOOL_INDEX, 0)
        if tool.tool_type == "hosted":
            piece = tool.attrs.get(NATIVE)
            current = groups.get(index)
            if isinstance(piece, dict):
                groups[index] = {**piece, **(current if isinstance(current, dict) else {})}
            else:
                groups[index] = piece
            continue
        if tool.tool_type != "function":
            raise BadRequestBody(
                f"tool '{tool.name}' is a {tool.tool_type} tool; Gemini declares only functions",
                rule="unsupported_in_target",
            )
        group = groups.setdefault(index, {})
        key = Spelling.of(tool.attrs).key("functionDeclarations")
        group.setdefault(key, []).append(_render_declaration(tool))
    return [groups[i] for i in groups]


def _render_declaration(tool: ToolDef) -> dict[str, Any]:
    declaration: dict[str, Any] = {"name": tool.name}
    if tool.description is not None:
        declaration["description"] = tool.description
    key = tool.attrs.get(PARAMETERS_KEY, "parametersJsonSchema")
    if OPENAPI_PARAMETERS in tool.attrs:
        declaration[key] = tool.attrs[OPENAPI_PARAMETERS]
    elif tool.parameters is not None:
        declaration[key] = tool.parameters
    return merged(declaration, native(tool.attrs))


# --- rendering -------------------------------------------------------------------------


def render_request(seq: MessageSequence) -> dict[str, Any]:
    """A Gemini graph back to its body (the model and stream stay in the URL)."""
    body = dict(seq.envelope)
    contents: list[Any] = []
    for message in seq.messages:
        if message.origin == "systemInstruction":
            key = Spelling.of(message.attrs).key("systemInstruction")
            body[key] = render_system(message)
        else:
            contents.append(render_content(message))
    body["contents"] = contents
    if seq.tools:
        body["tools"] = render_tools(seq.tools)
    return body


def render_system(message: Message) -> Any:
    if message.shape == "string" and len(message.blocks) == 1:
        return render_part(message.blocks[0])["text"]
    out = native(message.attrs)
    if message.shape != "absent":
        out["parts"] = [render_part(b) for b in message.blocks]
    return out


def render_content(message: Message) -> Any:
    if message.shape == "opaque" and len(message.blocks) == 1:
        return message.blocks[0].attrs.get(NATIVE)
    out = native(message.attrs)
    if not message.attrs.get(ROLE_ABSENT):
        spelled = message.attrs.get(ROLE_SPELLING)
        out["role"] = spelled or ("model" if message.role == "assistant" else "user")
    if message.shape != "absent":
        out["parts"] = [render_part(b) for b in message.blocks]
    return out

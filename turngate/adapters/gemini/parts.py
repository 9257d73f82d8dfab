"""Gemini ``Part`` objects <-> graph blocks, and the thought-signature helpers.

REST bodies are proto3 JSON: the docs write lowerCamelCase, the Python SDK often sends
snake_case (``function_call``, ``thought_signature``, ``inline_data``…). Both are read;
a modelled key written in snake_case is recorded in the block's ``$snake`` note (camel
paths such as ``"inlineData"`` or ``"inlineData.mimeType"``) and rendered back that way.
Unmodelled keys stay in the remainder exactly as they were spelled.

A ``thoughtSignature`` is a modifier of the part it sits on; it stays, byte-exact, in that
block's attrs. SDKs re-encode it (responses carry standard base64, google-genai sends
URL-safe base64 back), so two signatures are the same when their decoded bytes are:
``same_signature``. The text that arrived is the text that is re-sent.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any, Literal, cast

import orjson
from pydantic.alias_generators import to_snake

from turngate.adapters.base import default_trust, merged, remainder, with_hint
from turngate.errors import BadRequestBody
from turngate.graph.codec import json_type
from turngate.graph.model import (
    UNKNOWN_HINT,
    AnyBlock,
    AudioBlock,
    ContentBlock,
    FileBlock,
    ImageBlock,
    MediaSource,
    ReasoningBlock,
    Role,
    ServerToolBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    UnknownBlock,
    new_text_block,
)
from turngate.graph.rules.gemini import NATIVE

# The part's ``data`` oneof (plus the server-side tool pair): exactly one per part.
DATA_FIELDS = (
    "text",
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
    "executableCode",
    "codeExecutionResult",
    "toolCall",
    "toolResponse",
)
_SERVER_TOOL_FIELDS = ("executableCode", "codeExecutionResult", "toolCall", "toolResponse")
# Notes an adapter keeps in attrs; never rendered.
SNAKE = "$snake"
SYNTHESIZED_ID = "$synthesizedId"
ARGS_ABSENT = "$argsAbsent"
# Documented placeholder for function calls Gemini did not produce (other vendors, rebuilt
# history): Gemini 3 then skips signature validation for that step.
DUMMY_SIGNATURE = "skip_thought_signature_validator"


@cache
def snake_of(camel: str) -> str:
    return to_snake(camel)


class Spelling:
    """Which modelled keys of one part were written in snake_case."""

    def __init__(self, snake: Iterable[str] = ()) -> None:
        self.snake: set[str] = set(snake)

    @classmethod
    def of(cls, attrs: Mapping[str, Any]) -> Spelling:
        return cls(attrs.get(SNAKE, ()))

    def read(self, obj: Mapping[str, Any], camel: str, path: str | None = None) -> str | None:
        """The key ``obj`` uses for ``camel`` (camelCase first), recording a snake spelling."""
        if camel in obj:
            return camel
        snake = snake_of(camel)
        if snake in obj:
            self.snake.add(path or camel)
            return snake
        return None

    def key(self, camel: str, path: str | None = None) -> str:
        return snake_of(camel) if (path or camel) in self.snake else camel

    def note(self) -> dict[str, Any]:
        return {SNAKE: sorted(self.snake)} if self.snake else {}


# Each spelling of a data field, camelCase or snake_case, to its camelCase name.
_DATA_KEYS = {**{snake_of(camel): camel for camel in DATA_FIELDS}, **{c: c for c in DATA_FIELDS}}


def native(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Attrs without the adapter's ``$`` notes: what goes back on the wire."""
    return {k: v for k, v in attrs.items() if not k.startswith("$")}


class OrderCounter:
    def __init__(self, start: int = 0) -> None:
        self.value = start

    def next(self) -> int:
        self.value += 1
        return self.value - 1


# --- thought signatures ----------------------------------------------------------------


def signature_bytes(signature: str) -> bytes:
    """The bytes a signature encodes, whether written in standard or URL-safe base64.

    Text that is not base64 at all (e.g. the documented dummy signature) is its own bytes.
    """
    standard = signature.replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(standard + "=" * (-len(standard) % 4), validate=True)
    except (binascii.Error, ValueError):
        return signature.encode()


def same_signature(a: str | None, b: str | None) -> bool:
    """True when two signature texts carry the same bytes (SDKs re-encode base64)."""
    if a is None or b is None:
        return a is b
    return a == b or signature_bytes(a) == signature_bytes(b)


# --- parsing ---------------------------------------------------------------------------


def synthesized_call_id(name: str, occurrence: int) -> str:
    """The id of a call Gemini sent without one: its name and its rank among same-name calls
    of the content. Stable between a response and the history that echoes it back."""
    return f"gemini:{name}#{occurrence}"


def data_fields(part: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(camel name, key as written) for each data field present on ``part``, in
    ``DATA_FIELDS`` order; the camelCase key where a field is written both ways."""
    found: dict[str, str] = {}
    # A part's few keys are looked up, not every spelling of every field (once per part of
    # every request).
    for key in part:
        camel = _DATA_KEYS.get(key)
        if camel is not None and found.get(camel) != camel:
            found[camel] = key
    if len(found) > 1:
        return [(camel, found[camel]) for camel in DATA_FIELDS if camel in found]
    return list(found.items())


def parse_part(
    block_id: str,
    role: Role,
    part: Any,
    order: OrderCounter,
    call_names: dict[str, int] | None = None,
) -> AnyBlock:
    """One part as a block. ``call_names`` counts id-less calls per name in this content."""
    if type(part) is dict and len(part) == 1 and type(part.get("text")) is str:
        # A part of nothing but text, the most common by far: what the reading below gives.
        trust = default_trust(role)
        return new_text_block(
            id=block_id, role=role, order=order.next(), trust=trust, text=part["text"]
        )
    if not isinstance(part, dict):
        hint = f'each part must be an object ({{"text": ...}}), not a JSON {json_type(part)}'
        return _unknown(block_id, role, order, type(part).__name__, part, hint=hint)
    found = data_fields(part)
    if len(found) != 1:
        label = "+".join(camel for camel, _k in found) or ",".join(sorted(part)) or "empty"
        return _unknown(block_id, role, order, f"part:{label}", part)
    camel, key = found[0]
    if "type" in part:
        return _unknown(block_id, role, order, f"part:{camel}+type", part, hint=_TYPED_PART)
    spelling = Spelling()
    spelling.read(part, camel)
    value = part[key]
    if camel == "functionResponse":
        return _parse_response(block_id, part, key, spelling, order)
    common: dict[str, Any] = {
        "id": block_id,
        "role": role,
        "order": order.next(),
        "trust": default_trust(role),
    }
    if camel == "text" and isinstance(value, str):
        if part.get("thought") is True:
            attrs = remainder(part, frozenset({"text", "thought"}))
            return ReasoningBlock(provider="gemini", text=value, attrs=attrs, **common)
        return TextBlock(text=value, attrs=remainder(part, frozenset({"text"})), **common)
    if camel in ("inlineData", "fileData") and isinstance(value, dict):
        media = _parse_media(camel, key, part, spelling, common)
        if media is not None:
            return media
    if camel == "functionCall" and isinstance(value, dict) and isinstance(value.get("name"), str):
        return _parse_call(part, key, spelling, common, call_names)
    if camel in _SERVER_TOOL_FIELDS and isinstance(value, dict):
        return _server_tool(camel, value, part, common)
    return UnknownBlock(native_type=camel, attrs={NATIVE: part}, **common)


# Another API's part, its discriminator kept: Gemini's Part has no field of that name.
_TYPED_PART = (
    'the part holds "type", which Gemini\'s parts do not have; Gemini: "Invalid JSON payload '
    'received. Unknown name "type" at \'contents[…].parts[…]\': Cannot find field." (leave '
    '"type" out: {"text": ...}, {"inlineData": ...})'
)


def _unknown(
    block_id: str, role: Role, order: OrderCounter, kind: str, part: Any, *, hint: str | None = None
) -> AnyBlock:
    return UnknownBlock(
        id=block_id,
        role=role,
        order=order.next(),
        trust=default_trust(role),
        native_type=kind,
        attrs=with_hint({NATIVE: part}, hint),
    )


def _parse_media(
    camel: str, key: str, part: dict[str, Any], spelling: Spelling, common: dict[str, Any]
) -> AnyBlock | None:
    inner = part[key]
    payload_camel = "data" if camel == "inlineData" else "fileUri"
    payload_key = spelling.read(inner, payload_camel, f"{camel}.{payload_camel}")
    mime_key = spelling.read(inner, "mimeType", f"{camel}.mimeType")
    payload = inner.get(payload_key) if payload_key else None
    mime = inner.get(mime_key) if mime_key else None
    if not isinstance(payload, str) or not (mime is None or isinstance(mime, str)):
        return None
    attrs = remainder(part, frozenset({key}))
    modelled = {k for k in (payload_key, mime_key) if k is not None}
    extra = remainder(inner, frozenset(modelled))
    if extra:
        attrs[key] = extra
    attrs.update(spelling.note())
    source: MediaSource = "base64" if camel == "inlineData" else "file"
    fields: dict[str, Any] = {"source": source, "data": payload, "media_type": mime, **common}
    kind = (mime or "").split("/", 1)[0]
    if kind == "image":
        return ImageBlock(attrs=attrs, **fields)
    if kind == "audio":
        return AudioBlock(attrs=attrs, **fields)
    return FileBlock(attrs=attrs, **fields)


def _parse_call(
    part: dict[str, Any],
    key: str,
    spelling: Spelling,
    common: dict[str, Any],
    call_names: dict[str, int] | None,
) -> AnyBlock:
    call = part[key]
    name: str = call["name"]
    attrs = remainder(part, frozenset({key}))
    modelled = {"name", "args"}
    call_id = call.get("id")
    if isinstance(call_id, str) and call_id:
        modelled.add("id")
    else:
        counts = call_names if call_names is not None else {}
        occurrence = counts.get(name, 0)
        counts[name] = occurrence + 1
        call_id = synthesized_call_id(name, occurrence)
        attrs[SYNTHESIZED_ID] = True
    extra = remainder(call, frozenset(modelled))
    if extra:
        attrs[key] = extra
    complete = True
    if "args" in call:
        args = call["args"]
        arguments = _dumps(args)
        complete = isinstance(args, dict)
        if not complete:
            # Often the arguments as OpenAI writes them, a JSON string.
            attrs[UNKNOWN_HINT] = (
                f'its args are a JSON {json_type(args)}, not an object; Gemini: "Invalid value '
                "at '…function_call.args' (type.googleapis.com/google.protobuf.Struct)\" (send "
                "the arguments as an object: json.loads of a string)"
            )
    else:
        arguments = "{}"
        attrs[ARGS_ABSENT] = True
    if call.get("willContinue", call.get("will_continue")) is True:
        complete = False
    attrs.update(spelling.note())
    return ToolCallBlock(
        call_id=call_id,
        name=name,
        arguments=arguments,
        argument_state="complete" if complete else "incomplete",
        attrs=attrs,
        **common,
    )


def _dumps(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError as exc:  # nested deeper than orjson writes (254 levels)
        raise BadRequestBody(
            f"functionCall args cannot be written: {exc}", rule="json_too_deep"
        ) from exc


def _server_tool(
    camel: str, value: dict[str, Any], part: dict[str, Any], common: dict[str, Any]
) -> AnyBlock:
    if camel in ("executableCode", "codeExecutionResult"):
        name = "code_execution"
    else:
        tool_type = value.get("toolType", value.get("tool_type"))
        name = tool_type if isinstance(tool_type, str) else "tool"
    phase: Literal["call", "result"] = (
        "call" if camel in ("executableCode", "toolCall") else "result"
    )
    call_id = value.get("id")
    return ServerToolBlock(
        provider="gemini",
        name=name,
        phase=phase,
        call_id=call_id if isinstance(call_id, str) else None,
        attrs={NATIVE: part},
        **common,
    )


# What Gemini answers for a functionResponse with no name: it pairs responses with calls by
# name (and id), so a converter that keeps only the call's id leaves it empty.
_NAMELESS_RESPONSE = (
    'Gemini: "function_response.name: Name cannot be empty." (give each functionResponse '
    "the name of the call it answers)"
)


def _parse_response(
    block_id: str, part: dict[str, Any], key: str, spelling: Spelling, order: OrderCounter
) -> AnyBlock:
    response = part[key]
    name = response.get("name") if isinstance(response, dict) else None
    if not isinstance(response, dict) or not isinstance(name, str) or not name:
        malformed = "functionResponse (malformed)"
        return _unknown(block_id, "tool", order, malformed, part, hint=_NAMELESS_RESPONSE)
    attrs = remainder(part, frozenset({key}))
    modelled = {"name"}
    call_id = response.get("id")
    if isinstance(call_id, str) and call_id:
        modelled.add("id")
    else:
        # Paired with its call by name and position once the whole body is read.
        call_id = ""
        attrs[SYNTHESIZED_ID] = True
    value = response.get("response")
    if isinstance(value, dict):
        modelled.add("response")
    else:
        value = None
    nested = response.get("parts")
    content: tuple[ContentBlock, ...] = ()
    if isinstance(nested, list) and nested:
        modelled.add("parts")
        content = tuple(_parse_nested(f"{block_id}.c{k}", p, order) for k, p in enumerate(nested))
    extra = remainder(response, frozenset(modelled))
    if extra:
        attrs[key] = extra
    attrs.update(spelling.note())
    error = isinstance(value, dict) and "error" in value and "output" not in value
    return ToolResultBlock(
        id=block_id,
        role="tool",
        order=order.next(),
        trust=default_trust("tool"),
        call_id=call_id,
        status="error" if error else "success",
        name=name,
        content=content,
        value=value,
        attrs=attrs,
    )


def _parse_nested(block_id: str, part: Any, order: OrderCounter) -> ContentBlock:
    """A ``FunctionResponsePart``: inline or file media only."""
    block = parse_part(block_id, "tool", part, order)
    if isinstance(block, ImageBlock | AudioBlock | FileBlock | UnknownBlock):
        return block
    return UnknownBlock(
        id=block.id,
        role="tool",
        order=block.order,
        trust=block.trust,
        native_type=f"functionResponse.parts:{block.kind}",
        attrs={NATIVE: part},
    )


# --- rendering -------------------------------------------------------------------------


def render_part(block: AnyBlock) -> dict[str, Any]:
    """A block as the Gemini part it came from (or would be, for a fitted foreign block)."""
    spelling = Spelling.of(block.attrs)
    attrs = native(block.attrs)
    if isinstance(block, TextBlock):
        return merged({"text": block.text}, attrs)
    if isinstance(block, ReasoningBlock):
        return merged({"text": block.text, "thought": True}, attrs)
    if isinstance(block, ImageBlock | AudioBlock | FileBlock):
        return merged(_render_media(block, spelling), attrs)
    if isinstance(block, ToolCallBlock):
        return merged(_render_call(block, spelling), attrs)
    if isinstance(block, ToolResultBlock):
        return merged(_render_response(block, spelling), attrs)
    if isinstance(block, ServerToolBlock | UnknownBlock):
        part = block.attrs.get(NATIVE)
        if isinstance(part, dict):
            return part
        raise BadRequestBody(
            f"block '{block.id}' ({block.kind}) carries no Gemini part to send",
            rule="unsupported_in_target",
        )
    raise BadRequestBody(
        f"block '{block.id}' ({block.kind}) cannot be a Gemini part", rule="unsupported_in_target"
    )


def _render_media(block: ImageBlock | AudioBlock | FileBlock, spelling: Spelling) -> dict[str, Any]:
    if block.source == "base64":
        camel, payload = "inlineData", "data"
    elif block.source in ("file", "url"):
        camel, payload = "fileData", "fileUri"
    else:
        raise BadRequestBody(
            f"block '{block.id}' holds plain text, not a Gemini media part",
            rule="unsupported_in_target",
        )
    inner: dict[str, Any] = {spelling.key(payload, f"{camel}.{payload}"): block.data}
    if block.media_type is not None:
        inner[spelling.key("mimeType", f"{camel}.mimeType")] = block.media_type
    return {spelling.key(camel): inner}


def _render_call(block: ToolCallBlock, spelling: Spelling) -> dict[str, Any]:
    if block.tool_type != "function":
        raise BadRequestBody(
            f"tool call '{block.call_id}' is a {block.tool_type} call; Gemini has only "
            "function calls",
            rule="unsupported_in_target",
        )
    call: dict[str, Any] = {"name": block.name}
    if not block.attrs.get(ARGS_ABSENT):
        call["args"] = orjson.loads(block.arguments) if block.arguments.strip() else {}
    if not block.attrs.get(SYNTHESIZED_ID):
        call["id"] = block.call_id
    return {spelling.key("functionCall"): call}


def _render_response(block: ToolResultBlock, spelling: Spelling) -> dict[str, Any]:
    if block.name is None:
        raise BadRequestBody(
            f"tool result '{block.call_id}' has no function name, which Gemini requires",
            rule="unsupported_in_target",
        )
    response: dict[str, Any] = {"name": block.name}
    if not block.attrs.get(SYNTHESIZED_ID):
        response["id"] = block.call_id
    if block.value is not None:
        response["response"] = block.value
    if block.content:
        response["parts"] = [render_part(cast(AnyBlock, p)) for p in block.content]
    return {spelling.key("functionResponse"): response}

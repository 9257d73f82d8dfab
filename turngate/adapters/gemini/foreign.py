"""A graph parsed from another API, made into a Gemini graph that renders to a valid body.

Only modelled fields cross over: foreign attrs and the foreign envelope are dropped (the
model and streaming go in the URL; ``max_output_tokens`` becomes
``generationConfig.maxOutputTokens``). Every change beyond a plain re-spelling is recorded
as a ``Normalization`` on the returned graph:

* ``fit_to`` refuses what Gemini cannot carry, puts all responses of a turn in one user
  content in call order, and fits call ids;
* leading system/developer messages become ``systemInstruction``; one later in the
  conversation is refused (Gemini has no place for it);
* adjacent contents of one role are merged into one content (parts stay separate);
* results become ``response`` objects (``normalize.result_value``) named after their call,
  with media parts under ``functionResponse.parts``;
* the first function call of each model content carries the documented dummy
  ``thoughtSignature`` so Gemini 3 accepts calls it did not produce.
"""

from __future__ import annotations

import base64
import dataclasses
import mimetypes
from typing import Any

from turngate.adapters.gemini.parts import DUMMY_SIGNATURE
from turngate.adapters.gemini.request import ADAPTER_ID, API
from turngate.errors import BadRequestBody, UnsupportedInTarget
from turngate.graph.capabilities import Capabilities
from turngate.graph.model import (
    AnyBlock,
    AudioBlock,
    ContentBlock,
    FileBlock,
    ImageBlock,
    Message,
    MessageSequence,
    Normalization,
    ReasoningBlock,
    Role,
    ServerToolBlock,
    ToolCallBlock,
    ToolDef,
    ToolResultBlock,
)
from turngate.graph.normalize import fit_to, result_value
from turngate.graph.rules.gemini import PARAMETERS_KEY, TOOL_INDEX
from turngate.graph.validator import arguments_complete

_INSTRUCTION_ROLES = ("system", "developer")
# Leading bytes of common image formats, as base64 text.
_IMAGE_MAGIC = {
    "iVBORw0KGgo": "image/png",
    "/9j/": "image/jpeg",
    "_9j_": "image/jpeg",
    "R0lGOD": "image/gif",
    "UklGR": "image/webp",
}


def to_gemini_graph(seq: MessageSequence, caps: Capabilities) -> MessageSequence:
    fitted = fit_to(seq, caps)
    notes = list(fitted.normalizations)
    call_names = {b.call_id: b.name for _m, b in fitted.blocks() if isinstance(b, ToolCallBlock)}
    system: list[AnyBlock] = []
    contents: list[Message] = []
    for message in fitted.messages:
        blocks = [_fit_block(b, call_names, notes) for b in message.blocks]
        if message.role in _INSTRUCTION_ROLES:
            if contents:
                raise UnsupportedInTarget(
                    f"turngate: a {message.role} message after the conversation started "
                    f"({message.location}) cannot be sent to gemini, whose instructions are "
                    "only the top-level systemInstruction; it is refused rather than moved"
                )
            system.extend(blocks)
            continue
        role: Role = "assistant" if message.role == "assistant" else "user"
        if not blocks:
            notes.append(
                Normalization(
                    rule="empty_message_omitted",
                    block_id=message.location,
                    detail=f"{message.location} has no content; Gemini refuses empty contents",
                )
            )
            continue
        if contents and contents[-1].role == role:
            notes.append(
                Normalization(
                    rule="contents_merged",
                    block_id=blocks[0].id,
                    detail=f"{message.location} joins the {role} content before it as more "
                    "parts (Gemini alternates user and model turns)",
                )
            )
            last = contents[-1]
            contents[-1] = dataclasses.replace(last, blocks=last.blocks + tuple(blocks))
            continue
        contents.append(
            Message(index=len(contents), role=role, blocks=tuple(blocks), origin="contents")
        )
    contents = [_sign_first_call(m, notes) for m in contents]
    messages: list[Message] = []
    if system:
        messages.append(
            Message(index=0, role="system", blocks=tuple(system), origin="systemInstruction")
        )
    messages.extend(contents)
    envelope: dict[str, Any] = {}
    if fitted.max_output_tokens is not None:
        envelope["generationConfig"] = {"maxOutputTokens": fitted.max_output_tokens}
    return MessageSequence(
        api=API,
        adapter=ADAPTER_ID,
        model=fitted.model,
        messages=tuple(messages),
        tools=tuple(_fit_tool(t) for t in fitted.tools),
        envelope=envelope,
        max_output_tokens=fitted.max_output_tokens,
        stream=fitted.stream,
        history=fitted.history,
        normalizations=tuple(notes),
    )


def _fit_block(block: AnyBlock, call_names: dict[str, str], notes: list[Normalization]) -> AnyBlock:
    if isinstance(block, ReasoningBlock | ServerToolBlock):
        # fit_to let these through only when Gemini made them: their attrs are Gemini's own.
        return block
    if isinstance(block, ToolResultBlock):
        return _fit_result(block, call_names, notes)
    if isinstance(block, ImageBlock | AudioBlock | FileBlock):
        return _fit_media(block, notes)
    if isinstance(block, ToolCallBlock):
        if block.tool_type != "function":
            raise UnsupportedInTarget(
                f"turngate: a {block.tool_type} tool call '{block.call_id}' (block "
                f"'{block.id}') cannot be sent to gemini, which has only function calls"
            )
        if not arguments_complete(block.arguments):
            raise BadRequestBody(
                f"turngate: tool call '{block.call_id}' (block '{block.id}') has arguments "
                "that are not one complete JSON object; gemini takes args as an object",
                rule="incomplete_arguments",
            )
    return dataclasses.replace(block, attrs={})


def _fit_result(
    block: ToolResultBlock, call_names: dict[str, str], notes: list[Normalization]
) -> ToolResultBlock:
    name = call_names.get(block.call_id, block.name)
    if name is None:
        raise UnsupportedInTarget(
            f"turngate: tool result '{block.call_id}' (block '{block.id}') answers no call "
            "in the conversation, and gemini needs the function's name"
        )
    media: list[ContentBlock] = []
    texts: list[ContentBlock] = []
    for part in block.content:
        if isinstance(part, ImageBlock | AudioBlock | FileBlock):
            fitted = _fit_media(part, notes)
            assert isinstance(fitted, ImageBlock | AudioBlock | FileBlock)
            media.append(fitted)
        else:
            texts.append(part)
    value = result_value(dataclasses.replace(block, content=tuple(texts)))
    if media and texts:
        notes.append(
            Normalization(
                rule="result_media_split",
                block_id=block.id,
                detail=f"tool result '{block.call_id}': its text became the response "
                "object and its media went to functionResponse.parts",
            )
        )
    return dataclasses.replace(block, name=name, content=tuple(media), value=value, attrs={})


def _fit_media(block: ImageBlock | AudioBlock | FileBlock, notes: list[Normalization]) -> AnyBlock:
    data, media_type, source = block.data, block.media_type, block.source
    if source == "text":
        data = base64.b64encode(block.data.encode()).decode()
        media_type, source = media_type or "text/plain", "base64"
        notes.append(
            Normalization(
                rule="text_file_encoded",
                block_id=block.id,
                detail="a plain-text file is sent as base64 inlineData (Gemini has no text "
                "file part)",
            )
        )
    elif source == "base64" and data.startswith("data:") and ";base64," in data:
        header, data = data.split(",", 1)
        media_type = media_type or header[len("data:") : -len(";base64")]
        notes.append(
            Normalization(
                rule="data_url_split",
                block_id=block.id,
                detail="a data: URL is sent as its base64 payload and media type",
            )
        )
    if isinstance(block, AudioBlock) and media_type and "/" not in media_type:
        media_type = f"audio/{media_type}"
    if media_type is None and source == "base64" and isinstance(block, ImageBlock):
        media_type = next((t for m, t in _IMAGE_MAGIC.items() if data.startswith(m)), None)
    if media_type is None and source in ("url", "file"):
        media_type = mimetypes.guess_type(data)[0]
    if media_type is None and source == "base64":
        raise UnsupportedInTarget(
            f"turngate: inline {block.kind} block '{block.id}' has no media type, which "
            "gemini's inlineData requires"
        )
    return dataclasses.replace(block, data=data, media_type=media_type, source=source, attrs={})


def _sign_first_call(message: Message, notes: list[Normalization]) -> Message:
    if message.role != "assistant":
        return message
    blocks = list(message.blocks)
    for position, block in enumerate(blocks):
        if isinstance(block, ToolCallBlock):
            blocks[position] = dataclasses.replace(
                block, attrs={**block.attrs, "thoughtSignature": DUMMY_SIGNATURE}
            )
            notes.append(
                Normalization(
                    rule="thought_signature_placeholder",
                    block_id=block.id,
                    detail=f"tool call '{block.call_id}' was not made by Gemini; it carries "
                    f"the documented dummy signature '{DUMMY_SIGNATURE}'",
                )
            )
            return dataclasses.replace(message, blocks=tuple(blocks))
    return message


def _fit_tool(tool: ToolDef) -> ToolDef:
    if tool.tool_type != "function":
        raise UnsupportedInTarget(
            f"turngate: the {tool.tool_type} tool '{tool.name}' cannot be declared to gemini, "
            "which takes only function declarations here; it is refused rather than dropped"
        )
    attrs = {TOOL_INDEX: 0, PARAMETERS_KEY: "parametersJsonSchema"}
    return ToolDef(
        name=tool.name, description=tool.description, parameters=tool.parameters, attrs=attrs
    )

"""One OpenAI Responses item (an ``input`` entry or an ``output`` entry) -> one Message.

Each item becomes one Message, ``index`` = its position. Message items (easy form, typed
form, assistant output form) keep everything but ``role`` and ``content`` in the
message's attrs (``id``, ``status``, ``phase``…); every other item is one block whose
attrs keep the item minus its modelled fields (so ``type``, ``id``, ``status`` survive).
An item type this adapter does not know becomes an ``UnknownBlock``, which the validator
refuses: it is never dropped and never read as text.
"""

from __future__ import annotations

from typing import Any, Literal, cast

from turngate.adapters.base import MODEL_ROLE_HINT, default_trust, remainder, role_hint, with_hint
from turngate.adapters.openai_chat.request import OrderCounter, split_data_url
from turngate.graph.codec import json_type
from turngate.graph.model import (
    ITEM_NOTE,
    AnyBlock,
    ApiName,
    AudioBlock,
    CompressionBlock,
    ContentBlock,
    FileBlock,
    ImageBlock,
    MediaSource,
    Message,
    ReasoningBlock,
    RefusalBlock,
    Role,
    ServerToolBlock,
    ToolResultBlock,
    UnknownBlock,
    new_message,
    new_text_block,
    new_tool_call,
    new_tool_result,
)
from turngate.graph.rules.openai_responses_parts import ASSISTANT_PARTS

API: ApiName = "openai_responses"
MESSAGE_ROLES: frozenset[str] = frozenset({"user", "assistant", "system", "developer"})
_TOOL_OUTPUT = "send tool output as a function_call_output item with the call's call_id"
# The fix for roles other APIs use, added to their refusal.
ROLE_HINTS = {
    "tool": _TOOL_OUTPUT,
    "function": _TOOL_OUTPUT,
    "model": MODEL_ROLE_HINT,
}
_TEXT_FIELDS = frozenset({"text"})

# Provider-run (hosted) tool items, kept opaque as ServerToolBlocks. The model emits the
# calls; the ``*_output`` items and approval responses are the client's answers, except
# those the provider writes itself (``SERVER_ANSWERS``).
HOSTED_CALLS: frozenset[str] = frozenset(
    {
        "program",
        "web_search_call",
        "file_search_call",
        "computer_call",
        "code_interpreter_call",
        "image_generation_call",
        "local_shell_call",
        "shell_call",
        "apply_patch_call",
        "mcp_list_tools",
        "mcp_approval_request",
        "mcp_call",
        "tool_search_call",
    }
)
HOSTED_ANSWERS: frozenset[str] = frozenset(
    {
        "computer_call_output",
        "local_shell_call_output",
        "shell_call_output",
        "apply_patch_call_output",
        "mcp_approval_response",
        "tool_search_output",
        "program_output",
        "additional_tools",
    }
)
# Written by the provider in its answer, so they belong to the assistant's turn: what a
# program it ran returned, and the tools a tool search loaded. A ``tool_search_output`` is
# the client's only when it ran the search itself (``execution: client``).
SERVER_ANSWERS: frozenset[str] = frozenset({"program_output", "additional_tools"})
CALL_ITEMS: dict[str, Literal["function", "custom"]] = {
    "function_call": "function",
    "custom_tool_call": "custom",
}

# Items that steer the provider and carry no content: compact the history now, and change
# the reasoning or text settings from here on. Both are the client's (user-side: compression
# blocks never sit in system messages, the scope_crossing rule).
CONTROL_ITEMS: frozenset[str] = frozenset({"compaction_trigger", "configuration_update"})
# A tool's output that answers no call: no ``call_id``, named by its tool instead (Codex's
# app injects a delegated thread's ``create_thread`` output so, openai/codex #42088). OpenAI
# takes it and refuses only an output with neither ("A function call output without a
# call_id requires a name."). Kept as it came, as a control item is.
NAMED_OUTPUT = "$named_output"
_NO_CALL_ID = "A function call output without a call_id requires a name."
# Adapter note on a FileBlock whose ``file_data`` was bare base64, not a data URL.
BARE_NOTE = "$bare"

_ABSENT = object()


class ItemParser:
    """Parses items into Messages, numbering block ``order`` across the whole sequence."""

    def __init__(self, origin: str, order: OrderCounter | None = None) -> None:
        self.origin = origin
        self.order = order or OrderCounter()

    def common(self, block_id: str, role: Role) -> dict[str, Any]:
        return {
            "id": block_id,
            "role": role,
            "order": self.order.next(),
            "trust": default_trust(role),
        }

    def item(self, index: int, item: Any) -> Message:
        prefix = f"m{index}"
        if not isinstance(item, dict):
            return self._opaque(index, f"item:{type(item).__name__}", {"value": item})
        kind = item.get("type")
        if kind == "message" or (kind is None and "role" in item):
            return self._message(index, item)
        if kind == "item_reference" or (kind is None and "id" in item):
            return self._reference(index, item)
        if not isinstance(kind, str):
            block = self._unknown(prefix, "user", str(kind), item)
        elif kind in CALL_ITEMS:
            block = self._call(prefix, item)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            block = self._output(prefix, item)
        elif kind == "reasoning":
            block = self._reasoning(prefix, item)
        elif kind == "compaction":
            block = self._compaction(prefix, item)
        elif kind in CONTROL_ITEMS:
            block = self._control(prefix, kind, item)
        elif kind in HOSTED_CALLS or kind in HOSTED_ANSWERS:
            block = self._hosted(prefix, kind, item)
        else:
            block = self._unknown(prefix, "user", str(kind), item)
        role = block.role
        shape = "item"
        if isinstance(block, ToolResultBlock):
            output = item.get("output")
            shape = "string" if isinstance(output, str) else "parts"
        return new_message(index=index, role=role, blocks=(block,), origin=self.origin, shape=shape)

    # --- message items ---------------------------------------------------------------

    def _message(self, index: int, item: dict[str, Any]) -> Message:
        role_in = item.get("role")
        if not isinstance(role_in, str) or role_in not in MESSAGE_ROLES:
            hint = role_hint(ROLE_HINTS, role_in)
            return self._opaque(index, f"role:{role_in}", dict(item), hint)
        role = cast(Role, role_in)
        prefix = f"m{index}"
        attrs = remainder(item, frozenset({"role", "content"}))
        content = item.get("content", _ABSENT)
        blocks: list[AnyBlock] = []
        if content is _ABSENT:
            shape = "absent"
        elif isinstance(content, str):
            shape = "string"
            blocks.append(
                new_text_block(
                    id=f"{prefix}.b0",
                    role=role,
                    order=self.order.next(),
                    trust=default_trust(role),
                    text=content,
                )
            )
        elif isinstance(content, list):
            shape = "parts"
            for j, part in enumerate(content):
                blocks.append(self.part(f"{prefix}.b{j}", role, part))
        else:
            shape = "opaque"
            native = f"content:{type(content).__name__}"
            blocks.append(self._unknown(prefix, role, native, {"value": content}))
        return new_message(
            index=index,
            role=role,
            blocks=tuple(blocks),
            origin=self.origin,
            shape=shape,
            attrs=attrs,
        )

    def part(self, block_id: str, role: Role, part: Any) -> AnyBlock:
        """One content part: input_text / output_text / refusal / input_image / input_file /
        input_audio. Anything else is an UnknownBlock."""
        common = self.common(block_id, role)
        if not isinstance(part, dict):
            native = f"part:{type(part).__name__}"
            return UnknownBlock(native_type=native, attrs={"value": part}, **common)
        kind = part.get("type")
        text = part.get("text")
        if kind in ("input_text", "output_text") and isinstance(text, str):
            return new_text_block(
                id=block_id,
                role=role,
                order=common["order"],
                trust=common["trust"],
                text=text,
                attrs=remainder(part, _TEXT_FIELDS),
            )
        refusal = part.get("refusal")
        if kind == "refusal" and isinstance(refusal, str):
            return RefusalBlock(
                text=refusal, attrs=remainder(part, frozenset({"refusal"})), **common
            )
        if kind == "input_image":
            image = _image(part, common)
            if image is not None:
                return image
        if kind == "input_file":
            file = _file(part, common)
            if file is not None:
                return file
        if kind == "input_audio" and isinstance(part.get("input_audio"), dict):
            audio = part["input_audio"]
            fmt = audio.get("format")
            if isinstance(audio.get("data"), str):
                attrs = remainder(part, frozenset({"input_audio"}))
                nested = remainder(audio, frozenset({"data", "format"}))
                if nested:
                    attrs["input_audio"] = nested
                return AudioBlock(
                    source="base64",
                    data=audio["data"],
                    media_type=f"audio/{fmt}" if isinstance(fmt, str) else None,
                    attrs=attrs,
                    **common,
                )
        return UnknownBlock(
            native_type=str(kind), attrs=with_hint(dict(part), _part_hint(role, part)), **common
        )

    # --- tool calls and their outputs --------------------------------------------------

    def _call(self, prefix: str, item: dict[str, Any]) -> AnyBlock:
        kind = item["type"]
        tool_type = CALL_ITEMS[kind]
        data_key = "arguments" if tool_type == "function" else "input"
        name, data, call_id = item.get("name"), item.get(data_key), item.get("call_id")
        if not (isinstance(name, str) and isinstance(data, str)):
            wrong = ("name", name) if not isinstance(name, str) else (data_key, data)
            hint = f"{wrong[0]} must be a string, not a JSON {json_type(wrong[1])}"
            return self._unknown(prefix, "assistant", f"{kind} (malformed)", item, hint)
        modelled = {"name", data_key} | ({"call_id"} if isinstance(call_id, str) else set())
        # Complete when a custom tool's, or one JSON object (new_tool_call checks).
        return new_tool_call(
            id=f"{prefix}.b0",
            order=self.order.next(),
            call_id=call_id if isinstance(call_id, str) else "",
            name=name,
            arguments=data,
            attrs=remainder(item, frozenset(modelled)),
            tool_type=tool_type,
        )

    def _output(self, prefix: str, item: dict[str, Any]) -> AnyBlock:
        call_id, output, name = item.get("call_id"), item.get("output"), item.get("name")
        if call_id is None and isinstance(name, str) and name and isinstance(output, str | list):
            attrs = dict(item)
            attrs[ITEM_NOTE] = NAMED_OUTPUT
            common = self.common(f"{prefix}.b0", "tool")
            return CompressionBlock(provider=API, payload="", scope="tool", attrs=attrs, **common)
        if not isinstance(call_id, str) or not isinstance(output, str | list):
            if not isinstance(output, str | list):
                kind = json_type(output)
                hint = f"output must be a string or a list of input parts, not a JSON {kind}"
            elif call_id is None:
                hint = f"OpenAI: \"{_NO_CALL_ID}\" (give it its call's call_id, or its tool's name)"
            else:
                hint = f"call_id must be its call's id, not a JSON {json_type(call_id)}"
            return self._unknown(prefix, "tool", f"{item['type']} (malformed)", item, hint)
        block_id = f"{prefix}.b0"
        parts: list[AnyBlock]
        if isinstance(output, str):
            parts = [
                new_text_block(
                    id=f"{block_id}.c0",
                    role="tool",
                    order=self.order.next(),
                    trust=default_trust("tool"),
                    text=output,
                )
            ]
        else:
            parts = [self.part(f"{block_id}.c{k}", "tool", p) for k, p in enumerate(output)]
        modelled = {"call_id", "output"} | ({"name"} if isinstance(name, str) else set())
        return new_tool_result(
            id=block_id,
            role="tool",
            order=self.order.next(),
            trust=default_trust("tool"),
            call_id=call_id,
            content=cast(tuple[ContentBlock, ...], tuple(parts)),
            attrs=remainder(item, frozenset(modelled)),
            name=name if isinstance(name, str) else None,
        )

    # --- reasoning, hosted tools, compaction, references ---------------------------------

    def _reasoning(self, prefix: str, item: dict[str, Any]) -> AnyBlock:
        summary = item.get("summary")
        texts = []
        if isinstance(summary, list):
            texts = [
                p["text"]
                for p in summary
                if isinstance(p, dict) and p.get("type") == "summary_text"
                if isinstance(p.get("text"), str)
            ]
        payload = item.get("encrypted_content")
        modelled = {"encrypted_content"} if isinstance(payload, str) else set()
        # The summary parts stay in attrs as sent; ``text`` is what a reader sees.
        return ReasoningBlock(
            provider=API,
            text="\n\n".join(texts),
            payload=payload if isinstance(payload, str) else None,
            attrs=remainder(item, frozenset(modelled)),
            **self.common(f"{prefix}.b0", "assistant"),
        )

    def _hosted(self, prefix: str, kind: str, item: dict[str, Any]) -> AnyBlock:
        answer = (
            kind in HOSTED_ANSWERS
            and kind not in SERVER_ANSWERS
            and not (kind == "tool_search_output" and item.get("execution") != "client")
        )
        call_id = item.get("call_id")
        modelled = frozenset({"call_id"}) if isinstance(call_id, str) else frozenset()
        return ServerToolBlock(
            provider=API,
            name=kind,
            phase="result" if kind in HOSTED_ANSWERS else "call",
            call_id=call_id if isinstance(call_id, str) else None,
            attrs=remainder(item, modelled),
            **self.common(f"{prefix}.b0", "tool" if answer else "assistant"),
        )

    def _compaction(self, prefix: str, item: dict[str, Any]) -> AnyBlock:
        payload = item.get("encrypted_content")
        if not isinstance(payload, str):
            return self._unknown(prefix, "assistant", "compaction (malformed)", item)
        return CompressionBlock(
            provider=API,
            payload=payload,
            scope="assistant",
            attrs=remainder(item, frozenset({"encrypted_content"})),
            **self.common(f"{prefix}.b0", "assistant"),
        )

    def _control(self, prefix: str, kind: str, item: dict[str, Any]) -> AnyBlock:
        """A client's instruction to the provider about the conversation, not part of it,
        kept as it came (a CompressionBlock with no payload, noted with its item type)."""
        attrs = dict(item)
        attrs[ITEM_NOTE] = kind
        return CompressionBlock(
            provider=API,
            payload="",
            scope="user",
            attrs=attrs,
            **self.common(f"{prefix}.b0", "user"),
        )

    def _reference(self, index: int, item: dict[str, Any]) -> Message:
        """``item_reference``: an item the provider stores. Its content is not visible here,
        so the sequence's history is partial; most references name an earlier output item."""
        ref = item.get("id")
        prefix = f"m{index}"
        if not isinstance(ref, str):
            block: AnyBlock = self._unknown(prefix, "assistant", "item_reference (malformed)", item)
        else:
            attrs = remainder(item, frozenset({"id"}))
            attrs[ITEM_NOTE] = "item_reference"
            block = CompressionBlock(
                provider=API,
                payload=ref,
                scope="assistant",
                attrs=attrs,
                **self.common(f"{prefix}.b0", "assistant"),
            )
        return Message(
            index=index, role=block.role, blocks=(block,), origin=self.origin, shape="item"
        )

    # --- anything else -----------------------------------------------------------------

    def _unknown(
        self,
        prefix: str,
        role: Role,
        native_type: str,
        attrs: dict[str, Any],
        hint: str | None = None,
    ) -> AnyBlock:
        return UnknownBlock(
            native_type=native_type,
            attrs=with_hint(dict(attrs), hint),
            **self.common(f"{prefix}.b0", role),
        )

    def _opaque(
        self, index: int, native_type: str, attrs: dict[str, Any], hint: str | None = None
    ) -> Message:
        block = self._unknown(f"m{index}", "user", native_type, attrs, hint)
        return Message(
            index=index, role="user", blocks=(block,), origin=self.origin, shape="opaque"
        )


def _image(part: dict[str, Any], common: dict[str, Any]) -> ImageBlock | None:
    url, file_id = part.get("image_url"), part.get("file_id")
    if isinstance(url, str):
        media_type, data = split_data_url(url)
        return ImageBlock(
            source="url" if media_type is None else "base64",
            data=data,
            media_type=media_type,
            attrs=remainder(part, frozenset({"image_url"})),
            **common,
        )
    if isinstance(file_id, str):
        return ImageBlock(
            source="file", data=file_id, attrs=remainder(part, frozenset({"file_id"})), **common
        )
    return None


def _file(part: dict[str, Any], common: dict[str, Any]) -> FileBlock | None:
    filename = part.get("filename")
    named = {"filename"} if isinstance(filename, str) else set()
    for key in ("file_id", "file_url", "file_data"):
        value = part.get(key)
        if not isinstance(value, str):
            continue
        attrs = remainder(part, frozenset({key, *named}))
        media_type = None
        source: MediaSource = "file" if key == "file_id" else "url"
        if key == "file_data":
            source = "base64"
            media_type, value = split_data_url(value)
            if media_type is None:
                attrs[BARE_NOTE] = True
        return FileBlock(
            source=source,
            data=value,
            media_type=media_type,
            filename=filename if isinstance(filename, str) else None,
            attrs=attrs,
            **common,
        )
    return None


# Content part types of the other APIs, and the Responses type each stands for.
_FOREIGN_PARTS = {"text": "input_text", "image_url": "input_image", "image": "input_image"}
# OpenAI's list grows (input_audio, encrypted_content were added): its head is quoted.
_SUPPORTED_PARTS = "Supported values are: 'input_text', 'input_image', …"
_NO_THINKING = "another model's thinking has no place in the input: leave it out"
_AS_CALL = "send a call as a function_call item"
_AS_RESULT = "send a result as a function_call_output item"
# Blocks of the other APIs that are items, not parts, in Responses, and where each goes.
_NOT_PARTS = {
    "thinking": _NO_THINKING,
    "redacted_thinking": _NO_THINKING,
    "tool_use": _AS_CALL,
    "functionCall": _AS_CALL,
    "tool_result": _AS_RESULT,
    "functionResponse": _AS_RESULT,
}


def _part_hint(role: Role, part: dict[str, Any]) -> str | None:
    """The fix for a part of no type Responses knows: Chat's, Anthropic's or Gemini's
    spelling of one (a history converted for the other API), or none at all."""
    kind = part.get("type")
    if "type" not in part:
        return 'the part has no type (give each part its type: {"type": "input_text", ...})'
    if not isinstance(kind, str):
        return None
    if kind in _NOT_PARTS:
        fix = _NOT_PARTS[kind]
    elif kind in _FOREIGN_PARTS:
        typed = "output_text" if role == "assistant" and kind == "text" else _FOREIGN_PARTS[kind]
        fix = f"type it '{typed}'"
    else:
        return None
    supported = ASSISTANT_PARTS if role == "assistant" else _SUPPORTED_PARTS
    return f"OpenAI: \"Invalid value: '{kind}'. {supported}\" ({fix})"

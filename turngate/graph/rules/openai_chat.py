"""Shapes of a Chat message that OpenAI refuses, each quoted from its 400 (provider-rules.md
§1.1-1.3 and the trackers named in docs/field-failures.md):

- ``chat_empty_array``: ``messages: []`` or ``tool_calls: []`` ("empty array. Expected an
  array with minimum length 1"); an empty ``content`` list passes, as OpenAI takes it;
- ``chat_array_too_long``: an assistant message with more than 128 tool calls, or (rule
  ``chat_tools_too_many``, a request rule) more than 128 tools ("array too long. Expected an
  array with maximum length 128");
- ``chat_content_required``: ``content`` null or absent, but on an assistant message carrying
  its calls, audio or refusal ("expected a string, got null");
- ``chat_empty_call_name``: a tool call whose name is empty ("empty string. Expected a string
  with minimum length 1");
- ``chat_call_type``: a tool call without its ``type`` ("Missing required parameter:
  'messages[1].tool_calls[0].type'.") or with a null one ("Invalid type for
  'messages[1].tool_calls[0].type': expected one of 'function', 'allowed_tools', or
  'custom', but got null instead."): an agent that rebuilds the assistant turn from its own
  records, or from a provider's answer that left the field out, and replays it (public
  agents backfill the field for this refusal);
- ``chat_image_outside_user``: an image in a system, developer, assistant or tool message
  ("Image URLs are only allowed for messages with role 'user'");
- ``chat_name_pattern``: a message's ``name`` or a function call's name with characters
  other than ``a-z A-Z 0-9 _ -`` ("string does not match pattern"); a declared function's
  name too, and one over 64 characters (rule ``chat_tool_name_pattern``, a request rule: it
  runs on outlined requests).

None of these shapes is ever outlined (``openai_chat.request.outline_messages`` leaves such a
request to the full parse), so a request whose messages are all plain cannot break them:
``Capabilities.outline_clears_extra_rules``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator

from turngate.graph.model import (
    ImageBlock,
    Message,
    MessageSequence,
    ToolCallBlock,
    ToolResultBlock,
)
from turngate.graph.rules import rule
from turngate.graph.validator import Violation, violation

EMPTY_ARRAY = "chat_empty_array"
ARRAY_TOO_LONG = "chat_array_too_long"
# The most tools a request declares, and tool calls a message holds, that OpenAI takes.
MAX_ARRAY = 128
CONTENT_REQUIRED = "chat_content_required"
EMPTY_CALL_NAME = "chat_empty_call_name"
CALL_TYPE = "chat_call_type"
# A tool call's attribute saying its ``type`` was "absent" or "null" as sent (the adapter
# reads such a call as a function call, and renders the field back as it was).
UNTYPED = "$untyped"
IMAGE_OUTSIDE_USER = "chat_image_outside_user"
NAME_PATTERN = "chat_name_pattern"
_NAME_BODY = "[a-zA-Z0-9_-]+"
NAME_CHARACTERS = f"^{_NAME_BODY}$"
_NAME = re.compile(_NAME_BODY).fullmatch
# The longest name OpenAI takes for a declared function: Chat's, as its API reference gives
# it; the Responses API takes 128 (openai/codex #46188).
MAX_FUNCTION_NAME = 64


# Memoized: agents call a few tools many times, and the outline asks once per call.
@functools.lru_cache(maxsize=4096)
def name_fits(name: str) -> bool:
    """Whether OpenAI takes ``name`` as a message's or a function's name."""
    return _NAME(name) is not None


_MIN_ONE = "empty array. Expected an array with minimum length 1, but got an empty array instead."
# What stands in for an assistant message's content.
_CONTENT_STANDINS = ("function_call", "audio", "refusal")


@rule(EMPTY_ARRAY)
def empty_arrays(seq: MessageSequence) -> list[Violation]:
    if not seq.messages:
        return [
            violation(
                EMPTY_ARRAY,
                f"the request has no messages; OpenAI: \"Invalid 'messages': {_MIN_ONE}\"",
                None,
            )
        ]
    return [
        violation(
            EMPTY_ARRAY,
            f'{message.role} message has an empty tool_calls list; OpenAI: "Invalid '
            f"'{message.location}.tool_calls': {_MIN_ONE}\" (leave tool_calls out)",
            message,
        )
        for message in seq.messages
        if message.attrs.get("tool_calls") == []
    ]


def _too_long(param: str, length: int) -> str:
    return (
        f"OpenAI: \"Invalid '{param}': array too long. Expected an array with maximum length "
        f'{MAX_ARRAY}, but got an array with length {length} instead."'
    )


@rule(ARRAY_TOO_LONG)
def calls_too_many(seq: MessageSequence) -> list[Violation]:
    out: list[Violation] = []
    for message in seq.messages:
        if message.role != "assistant" or len(message.blocks) <= MAX_ARRAY:
            continue
        calls = sum(isinstance(block, ToolCallBlock) for block in message.blocks)
        if calls > MAX_ARRAY:
            text = _too_long(f"{message.location}.tool_calls", calls)
            out.append(
                violation(
                    ARRAY_TOO_LONG,
                    f"assistant message holds {calls} tool calls; {text} (split the turn "
                    "into messages of at most 128 calls, each followed by its results)",
                    message,
                )
            )
    return out


@rule("chat_tools_too_many")
def tools_too_many(seq: MessageSequence) -> list[Violation]:
    if len(seq.tools) <= MAX_ARRAY:
        return []
    return [
        violation(
            ARRAY_TOO_LONG,
            f"the request declares {len(seq.tools)} tools; {_too_long('tools', len(seq.tools))} "
            "(many MCP servers at once: declare the ones this turn needs)",
            None,
        )
    ]


def _content_missing(message: Message) -> bool:
    if message.shape not in ("null", "absent"):
        return False
    if message.role != "assistant":
        return True
    has_calls = any(isinstance(b, ToolCallBlock) for b in message.blocks)
    return not has_calls and not any(message.attrs.get(k) for k in _CONTENT_STANDINS)


@rule(CONTENT_REQUIRED)
def content_required(seq: MessageSequence) -> list[Violation]:
    return [
        violation(
            CONTENT_REQUIRED,
            f"{message.role} message has no content ({message.shape}); only an assistant "
            "message with tool_calls may leave it out; OpenAI: \"Invalid value for 'content': "
            'expected a string, got null." (send "" or drop the message)',
            message,
        )
        for message in seq.messages
        if _content_missing(message)
    ]


def _calls(seq: MessageSequence) -> Iterator[tuple[Message, str, ToolCallBlock]]:
    """Each tool call with its message and its place, as OpenAI names it in an error
    (``messages[1].tool_calls[0].function``)."""
    for message in seq.messages:
        calls = (b for b in message.blocks if isinstance(b, ToolCallBlock))
        for position, call in enumerate(calls):
            yield message, f"{message.location}.tool_calls[{position}].{call.tool_type}", call


@rule(EMPTY_CALL_NAME)
def empty_call_names(seq: MessageSequence) -> list[Violation]:
    return [
        violation(
            EMPTY_CALL_NAME,
            f"tool call '{call.call_id}' has an empty name; OpenAI: \"Invalid "
            f"'{place}.name': empty string. "
            'Expected a string with minimum length 1, but got an empty string instead."',
            message,
            call,
        )
        for message, place, call in _calls(seq)
        if not call.name
    ]


@rule(CALL_TYPE)
def call_types(seq: MessageSequence) -> list[Violation]:
    out: list[Violation] = []
    for message, place, call in _calls(seq):
        untyped = call.attrs.get(UNTYPED)
        if untyped is None:
            continue
        field = place.rsplit(".", 1)[0] + ".type"
        text = (
            f"Missing required parameter: '{field}'."
            if untyped == "absent"
            else f"Invalid type for '{field}': expected one of 'function', 'allowed_tools', or "
            "'custom', but got null instead."
        )
        out.append(
            violation(
                CALL_TYPE,
                f'tool call \'{call.call_id}\' has no type; OpenAI: "{text}" (send "type": '
                '"function" with each call)',
                message,
                call,
                param=field,
            )
        )
    return out


def _first_image(message: Message) -> ImageBlock | None:
    for block in message.blocks:
        if isinstance(block, ImageBlock):
            return block
        if isinstance(block, ToolResultBlock):
            image = next((p for p in block.content if isinstance(p, ImageBlock)), None)
            if image is not None:
                return image
    return None


@rule(IMAGE_OUTSIDE_USER)
def images_outside_user(seq: MessageSequence) -> list[Violation]:
    out: list[Violation] = []
    for message in seq.messages:
        if message.role == "user":
            continue
        image = _first_image(message)
        if image is None:
            continue
        where = "a tool result" if message.role == "tool" else f"a {message.role} message"
        out.append(
            violation(
                IMAGE_OUTSIDE_USER,
                f'{where} holds an image; OpenAI: "Image URLs are only allowed for messages '
                f"with role 'user', but this message with role '{message.role}' contains an "
                'image URL." (send the image in a user message after the results)',
                message,
                image,
            )
        )
    return out


def function_name_problem(name: str, param: str, longest: int = MAX_FUNCTION_NAME) -> str | None:
    """OpenAI's words for why it refuses ``name`` as a declared function's (at ``param``;
    ``longest``: the API's limit), with what to do; None when it takes it."""
    if not name_fits(name):
        return f"{pattern_text(param)} (an MCP server's 'server.tool': replace the dot)"
    if len(name) > longest:
        return (
            f"{too_long_text(param, longest, len(name))} "
            "(a client's 'mcp__server__tool' names: shorten the server's)"
        )
    return None


def pattern_text(param: str) -> str:
    """OpenAI's words for a name at ``param`` outside ``NAME_CHARACTERS``."""
    return (
        f"OpenAI: \"Invalid '{param}': string does not match pattern. Expected a string that "
        f"matches the pattern '{NAME_CHARACTERS}'.\""
    )


def too_long_text(param: str, longest: int, length: int) -> str:
    """OpenAI's words for a string at ``param`` of ``length`` characters, over ``longest``."""
    return (
        f"OpenAI: \"Invalid '{param}': string too long. Expected a string with maximum length "
        f'{longest}, but got a string with length {length} instead."'
    )


@rule(NAME_PATTERN)
def names_outside_pattern(seq: MessageSequence) -> list[Violation]:
    out = [
        violation(
            NAME_PATTERN,
            f"{message.role} message is named {name!r}; "
            f"{pattern_text(f'{message.location}.name')} (an agent's name: no spaces)",
            message,
        )
        for message in seq.messages
        if isinstance(name := message.attrs.get("name"), str) and not name_fits(name)
    ]
    out.extend(
        violation(
            NAME_PATTERN,
            f"tool call '{call.call_id}' calls {call.name!r}; {pattern_text(f'{place}.name')}",
            message,
            call,
        )
        for message, place, call in _calls(seq)
        if call.tool_type == "function" and call.name and not name_fits(call.name)
    )
    return out


@rule("chat_tool_name_pattern")
def tool_names_outside_pattern(seq: MessageSequence) -> list[Violation]:
    return declared_names_refused(seq, NAME_PATTERN, ("function",), "tools[{}].function.name")


def declared_names_refused(
    seq: MessageSequence,
    code: str,
    kinds: tuple[str, ...],
    param: str,
    longest: int = MAX_FUNCTION_NAME,
) -> list[Violation]:
    """A violation ``code`` for each tool of ``kinds`` declared under a name OpenAI refuses
    (``param``: where the API reads a tool's name, its position in ``{}``)."""
    return [
        violation(
            code,
            f"tool {tool.name!r} is declared under a name OpenAI refuses; {problem}",
            None,
        )
        for position, tool in enumerate(seq.tools)
        if tool.tool_type in kinds
        and (problem := function_name_problem(tool.name, param.format(position), longest))
    ]

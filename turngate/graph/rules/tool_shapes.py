"""A tool declared in another API's shape (request rules, codes ``openai_tool_shape``,
``anthropic_tool_shape`` and ``gemini_tool_shape``).

Chat Completions nests a function under ``function`` (``{"type": "function", "function":
{"name": …, "parameters": …}}``); Responses declares it flat (``{"type": "function", "name":
…, "parameters": …}``). A tool list built for one and sent to the other is refused on every
call: Chat "Missing required parameter: 'tools[0].function'.", Responses "Missing required
parameter: 'tools[0].name'." A client moved between the two APIs, or a library that builds
tools for one and posts them to the other, meets it (dspy #9943, any-llm PR #1310, geode PR
#612). Responses refuses a ``tool_choice`` nested the Chat way too: "Unknown parameter:
'tool_choice.function'." (sub2api PR #1634).

Anthropic takes a client tool as ``{"name": …, "input_schema": …}`` and a ``tool_choice`` of
type auto, any, tool or none; OpenAI's ``type: function`` in either place is refused: "tools.0:
Input tag 'function' found using 'type' does not match any of the expected tags" (an OpenAI
client pointed at the Messages endpoint, a guardrail that wrote the tools back in OpenAI's
form: 40 refusals in eight hours at one gateway). A ``tool_choice`` sent as OpenAI's string
(``"auto"``, ``"required"``) is refused too: "tool_choice: Input should be a valid dictionary
or object to extract fields from".

Gemini takes functions as ``{"functionDeclarations": [{"name": …, "parameters": …}]}``; an
OpenAI tool in its ``tools`` is refused: "Invalid JSON payload received. Unknown name
\"type\" at 'tools[0]': Cannot find field." (an agent framework that wraps MCP tools the
OpenAI way for every provider).

Every such tool parses as a hosted tool; the rules name the entry by its index, with the
provider's param.
"""

from __future__ import annotations

from typing import Any

from turngate.graph.model import MessageSequence, ToolDef
from turngate.graph.rules import rule
from turngate.graph.validator import Violation, violation

OPENAI_TOOL_SHAPE = "openai_tool_shape"
ANTHROPIC_TOOL_SHAPE = "anthropic_tool_shape"
GEMINI_TOOL_SHAPE = "gemini_tool_shape"
# OpenAI's tool_choice strings, written Anthropic's way.
_ANTHROPIC_CHOICE = {
    "auto": '{"type": "auto"}',
    "required": '{"type": "any"}',
    "none": '{"type": "none"}',
}
_ANY_CHOICE = '{"type": "auto"}, {"type": "any"}, {"type": "none"} or {"type": "tool", "name": …}'


@rule("chat_tool_shape")
def chat_tool_shape(seq: MessageSequence) -> list[Violation]:
    fix = 'nest it: {"type": "function", "function": {"name": …, "parameters": …}}'
    return [
        _refused(index, "function", "Responses' flat shape" if "name" in native else "", fix)
        for index, _tool, native in _function_tools(seq)
        if "function" not in native
    ]


@rule("responses_tool_shape")
def responses_tool_shape(seq: MessageSequence) -> list[Violation]:
    fix = 'flatten it: {"type": "function", "name": …, "parameters": …}'
    out = [
        _refused(index, "name", "Chat Completions' nested shape", fix)
        for index, _tool, native in _function_tools(seq)
        if "name" not in native and isinstance(native.get("function"), dict)
    ]
    choice = seq.envelope.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "function" and "function" in choice:
        out.append(
            violation(
                OPENAI_TOOL_SHAPE,
                "tool_choice names its function in Chat Completions' nested shape; OpenAI: "
                '"Unknown parameter: \'tool_choice.function\'." (flatten it: {"type": '
                '"function", "name": …})',
                None,
                param="tool_choice.function",
            )
        )
    return out


@rule(ANTHROPIC_TOOL_SHAPE)
def anthropic_tool_shape(seq: MessageSequence) -> list[Violation]:
    fix = '(declare it as {"name": …, "description": …, "input_schema": {"type": "object", …}})'
    out = [
        violation(
            ANTHROPIC_TOOL_SHAPE,
            f'tools.{index} declares an OpenAI function; Anthropic: "tools.{index}: Input tag '
            f"'function' found using 'type' does not match any of the expected tags\" {fix}",
            None,
        )
        for index, _tool, _native in _function_tools(seq)
    ]
    choice = seq.envelope.get("tool_choice")
    if isinstance(choice, str):
        out.append(
            violation(
                ANTHROPIC_TOOL_SHAPE,
                f"tool_choice is OpenAI's string {choice[:40]!r}; Anthropic: \"tool_choice: Input "
                'should be a valid dictionary or object to extract fields from" (send '
                f"{_ANTHROPIC_CHOICE.get(choice, _ANY_CHOICE)})",
                None,
            )
        )
    if isinstance(choice, dict) and choice.get("type") == "function":
        out.append(
            violation(
                ANTHROPIC_TOOL_SHAPE,
                'tool_choice is written the OpenAI way; Anthropic: "tool_choice: Input tag '
                "'function' found using 'type' does not match any of the expected tags\" "
                '(force a tool with {"type": "tool", "name": …})',
                None,
            )
        )
    return out


@rule(GEMINI_TOOL_SHAPE)
def gemini_tool_shape(seq: MessageSequence) -> list[Violation]:
    # Gemini's adapter notes each hosted tool's ``tools[]`` entry; one entry may give several.
    entries = {tool.attrs.get("$tool"): None for _index, tool, _native in _function_tools(seq)}
    return [
        violation(
            GEMINI_TOOL_SHAPE,
            f"tools[{entry}] declares an OpenAI function; Gemini: Invalid JSON payload received. "
            f"Unknown name \"type\" at 'tools[{entry}]': Cannot find field. (declare it as "
            '{"functionDeclarations": [{"name": …, "parameters": …}]})',
            None,
        )
        for entry in entries
    ]


def _function_tools(seq: MessageSequence) -> list[tuple[int, ToolDef, dict[str, Any]]]:
    """Each ``type: function`` entry the adapter could not read as a function: its index, the
    tool and the entry as sent."""
    return [
        (index, tool, native)
        for index, tool in enumerate(seq.tools)
        if tool.tool_type == "hosted"
        and isinstance(native := tool.attrs.get("$native"), dict)
        and native.get("type") == "function"
    ]


def _refused(index: int, missing: str, shape: str, fix: str) -> Violation:
    param = f"tools[{index}].{missing}"
    what = f"declares a function in {shape}" if shape else "has type function but no function"
    return violation(
        OPENAI_TOOL_SHAPE,
        f"tools[{index}] {what}; OpenAI: \"Missing required parameter: '{param}'.\" ({fix})",
        None,
        param=param,
    )

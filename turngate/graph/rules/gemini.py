"""Gemini's own ordering rules for ``contents`` (provider-rules.md §4.2), that it holds at
least one content and none without parts, that a function response's value is an object,
and what it takes as declared functions (request rules): their names
(``gemini_tool_name_pattern``) and their uniqueness (``gemini_function_names_unique``),
at most 512 in one ``tools[]`` entry (``gemini_function_count``) and their OpenAPI schemas
(``gemini_tool_schemas``).

Each mirrors a 400 INVALID_ARGUMENT that Gemini returns, quoted in the message so a user
who has met the provider's text recognises it. Only conversation entries count as turns
(``systemInstruction`` is not one); a function-call turn is a model content with
``functionCall`` parts, a function-response turn a user content with ``functionResponse``
parts. With a ``cachedContent`` (``history: partial``) the cache's contents come first: the
first content of the request may follow a call turn or a user turn that only the cache shows.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, NamedTuple

from turngate.graph.codec import json_type
from turngate.graph.model import (
    AnyBlock,
    Message,
    MessageSequence,
    ToolCallBlock,
    ToolDef,
    ToolResultBlock,
)
from turngate.graph.rules import rule
from turngate.graph.schema_faults import judge_toolset
from turngate.graph.validator import Violation, violation

_CALL_TURN_TEXT = (
    "Please ensure that function call turn comes immediately after a user turn or after a "
    "function response turn."
)
_RESPONSE_TURN_TEXT = (
    "Please ensure that function response turn comes immediately after a function call turn."
)
_COUNT_TEXT = (
    "Please ensure that the number of function response parts is equal to the number of "
    "function call parts of the function call turn."
)


_EMPTY_PARTS_TEXT = "contents.parts must not be empty."
_NO_CONTENTS_TEXT = "GenerateContentRequest.contents: contents is not specified"
_SIGNATURE_TEXT = "Function call is missing a thought_signature in functionCall parts."
# The adapter's note holding a part's native fields when its block was built from them; the
# spellings of a part's signature (the gemini adapter reads them through ``thought_signature``).
NATIVE = "$native"
SIGNATURE_KEYS = ("thoughtSignature", "thought_signature")
# Where the adapter notes the ``tools[]`` entry a declaration came from, the key its
# parameters were under, and the OpenAPI-style original when ``parameters`` had to be turned
# into JSON Schema.
TOOL_INDEX = "$tool"
PARAMETERS_KEY = "$parametersKey"
OPENAPI_PARAMETERS = "$openapiParameters"
NAME_PATTERN = "gemini_name_pattern"
# What every Gemini backend takes as a function's name (the google-genai SDK's
# ``FunctionDeclaration.name``; the Gemini API's own message says 64 characters, Vertex AI's
# takes 128: the longer limit is checked, the shorter left to the provider).
_FUNCTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,127}").fullmatch
_NAME_TEXT = (
    "Invalid function name. Must start with a letter or an underscore. Must be alphameric "
    "(a-z, A-Z, 0-9), underscores (_), dots (.), colons (:), or dashes (-), with a maximum "
    "length of 64."
)
# The most function declarations one ``tools[]`` entry may hold.
MAX_DECLARATIONS = 512
# The model family, from the route's model ("gemini-3-flash-preview", "models/gemini-3-pro").
_FAMILY = re.compile(r"(?:^|/)gemini-(\d+)")


def _contents(seq: MessageSequence) -> list[Message]:
    return [m for m in seq.messages if m.role not in ("system", "developer")]


def _calls(message: Message) -> list[ToolCallBlock]:
    if message.role != "assistant":
        return []
    return [b for b in message.blocks if isinstance(b, ToolCallBlock)]


def _responses(message: Message) -> list[ToolResultBlock]:
    if message.role == "assistant":
        return []
    return [b for b in message.blocks if isinstance(b, ToolResultBlock)]


@rule("gemini_call_turn_position")
def call_turn_position(seq: MessageSequence) -> list[Violation]:
    out: list[Violation] = []
    contents = _contents(seq)
    for position, message in enumerate(contents):
        calls = _calls(message)
        if not calls:
            continue
        previous = contents[position - 1] if position > 0 else None
        if previous is not None and previous.role in ("user", "tool"):
            continue
        if previous is None and seq.history == "partial":
            continue
        after = (
            "the start of contents" if previous is None else f"a model turn ({previous.location})"
        )
        out.append(
            violation(
                "gemini_call_turn_position",
                f"function call turn with '{calls[0].call_id}' ({calls[0].name}) comes right "
                f'after {after}; Gemini: "{_CALL_TURN_TEXT}"',
                message,
                calls[0],
            )
        )
    return out


@rule("gemini_response_turn_position")
def response_turn_position(seq: MessageSequence) -> list[Violation]:
    out: list[Violation] = []
    contents = _contents(seq)
    for position, message in enumerate(contents):
        responses = _responses(message)
        if not responses:
            continue
        previous = contents[position - 1] if position > 0 else None
        if previous is not None and _calls(previous):
            continue
        if previous is None and seq.history == "partial":
            continue
        out.append(
            violation(
                "gemini_response_turn_position",
                f"function response '{responses[0].call_id}' sits in a turn that does not "
                f'come right after a function call turn; Gemini: "{_RESPONSE_TURN_TEXT}"',
                message,
                responses[0],
            )
        )
    return out


@rule("gemini_response_count")
def response_count(seq: MessageSequence) -> list[Violation]:
    """The content after a function-call turn answers every call part, no more, no fewer."""
    out: list[Violation] = []
    contents = _contents(seq)
    for position, message in enumerate(contents[:-1]):
        calls = _calls(message)
        if not calls:
            continue
        following = contents[position + 1]
        responses = _responses(following)
        if len(responses) == len(calls):
            continue
        answered = {r.call_id for r in responses}
        unanswered = [c for c in calls if c.call_id not in answered]
        called = {c.call_id for c in calls}
        extra = [r for r in responses if r.call_id not in called]
        block = unanswered[0] if unanswered else (extra or responses)[-1]
        out.append(
            violation(
                "gemini_response_count",
                f"{following.location} has {len(responses)} function response part(s) for the "
                f"{len(calls)} function call part(s) of {message.location} (first at issue: "
                f"'{block.call_id}'); Gemini: \"{_COUNT_TEXT}\"",
                following,
                block,
            )
        )
    return out


@rule("gemini_empty_contents")
def empty_contents(seq: MessageSequence) -> list[Violation]:
    """An empty ``contents`` list: Gemini refuses it as it refuses a missing one (the
    adapter's ``invalid_request``), whatever ``systemInstruction`` holds. With a
    ``cachedContent`` (``history: partial``) it is left to Gemini."""
    if seq.history == "partial" or any(m.location.startswith("contents") for m in seq.messages):
        return []
    return [
        violation(
            "gemini_empty_contents",
            f'the request has no contents; Gemini: "{_NO_CONTENTS_TEXT}" (send at least one '
            "user content)",
            None,
        )
    ]


@rule("gemini_response_object")
def response_objects(seq: MessageSequence) -> list[Violation]:
    """A ``functionResponse.response`` that is not a JSON object (a string, a list, a
    number): Gemini reads it as a ``google.protobuf.Struct`` and refuses anything else."""
    out: list[Violation] = []
    for message, block in seq.blocks():
        if not isinstance(block, ToolResultBlock):
            continue
        value = _native_response(block)
        if value is None:
            continue
        out.append(
            violation(
                "gemini_response_object",
                f"function response '{block.name}' holds a JSON {json_type(value)} where "
                'Gemini takes an object; Gemini: "Invalid value at '
                "'…function_response.response' (type.googleapis.com/google.protobuf.Struct)\" "
                '(wrap the output in an object, e.g. {"result": ...})',
                message,
                block,
                call_id=block.call_id or None,
            )
        )
    return out


def _native_response(block: ToolResultBlock) -> object:
    """A response value the adapter did not model (it models an object), as sent."""
    for key in ("functionResponse", "function_response"):
        unmodelled = block.attrs.get(key)
        if isinstance(unmodelled, dict) and unmodelled.get("response") is not None:
            return unmodelled["response"]
    return None


@rule("gemini_empty_parts")
def empty_parts(seq: MessageSequence) -> list[Violation]:
    """A content with no parts (an empty list, or none at all): Gemini refuses the request,
    wherever the content sits. ``systemInstruction`` is not a content."""
    return [
        violation(
            "gemini_empty_parts",
            f"{'model' if message.role == 'assistant' else message.role} content has no parts; "
            "Gemini: "
            f'"GenerateContentRequest.{message.location}.parts: {_EMPTY_PARTS_TEXT}" '
            "(drop the content, or give it its text)",
            message,
        )
        for message in _contents(seq)
        if not message.blocks
    ]


def _signs_calls(model: str | None) -> bool:
    """Gemini 3 and later validate thought signatures; 2.5 and older do not."""
    family = _FAMILY.search(model or "")
    return family is not None and int(family.group(1)) >= 3


def thought_signature(block: AnyBlock) -> str | None:
    """The ``thoughtSignature`` text on the part ``block`` came from, as it arrived."""
    attrs = block.attrs.get(NATIVE, block.attrs)
    for key in SIGNATURE_KEYS:
        value = attrs.get(key)
        if isinstance(value, str):
            return value
    return None


@rule("gemini_thought_signature")
def thought_signatures(seq: MessageSequence) -> list[Violation]:
    """Gemini 3: in the current turn (after the last user content that is not a function
    response), each step's first function call carries the ``thoughtSignature`` it came with
    (provider-rules.md §4.2; the documented ``skip_thought_signature_validator`` counts)."""
    if not _signs_calls(seq.model):
        return []
    contents = _contents(seq)
    start = 0
    for position, message in enumerate(contents):
        if message.role == "user" and not _responses(message):
            start = position + 1
    out: list[Violation] = []
    for message in contents[start:]:
        calls = _calls(message)
        if calls and not thought_signature(calls[0]):
            first = calls[0]
            out.append(
                violation(
                    "gemini_thought_signature",
                    f"function call '{first.call_id}' ({first.name}), the first of "
                    f"{message.location} in the current turn, has no thoughtSignature; "
                    f'{seq.model} refuses it: "{_SIGNATURE_TEXT}" Send each part back with the '
                    "signature it came with",
                    message,
                    first,
                )
            )
    return out


def _declarations(seq: MessageSequence) -> dict[int, list[ToolDef]]:
    """Each ``tools[]`` entry's functions, in declaration order."""
    declared: dict[int, list[ToolDef]] = {}
    for tool in seq.tools:
        if tool.tool_type == "function":
            declared.setdefault(tool.attrs.get(TOOL_INDEX, 0), []).append(tool)
    return declared


@rule("gemini_tool_schemas")
def openapi_schema_faults(seq: MessageSequence) -> list[Violation]:
    """What Gemini refuses in a function declared with ``parameters`` (its OpenAPI schema):
    an array with no ``items`` ("…parameters.properties[tags].items: missing field."), as
    OpenAI does (openai_schemas.py); a ``required`` name with no property of that name
    beside it ("…parameters.required[0]: property is not defined"), as the GitHub MCP
    server's array items declare (moltis #747, #849); an enum of other than strings, or on a
    schema not of type STRING ("…properties[truncateMode].enum: only allowed for STRING
    type": claude-code-router #475, azure-devops-mcp #145). The response schema
    (``generationConfig.responseSchema``) is judged the same way. ``parametersJsonSchema``
    and ``responseJsonSchema`` are left to Gemini."""
    judged = openapi_schemas(seq)
    faults = judge_toolset([(s.schema, False) for s in judged])
    out: list[Violation] = []
    for kind, code, worded in _SCHEMA_FAULTS:
        for fault in getattr(faults, kind):
            found = judged[fault.position]
            field = f"{found.where}{gemini_path(fault.path)}"
            out.append(violation(code, worded(found.who, field, fault.words), None))
    return out


class OpenApiSchema(NamedTuple):
    """A schema the request gives in Gemini's OpenAPI form."""

    who: str
    where: str
    """Gemini's field path to it."""
    schema: object
    """As JSON Schema (the adapter's reading); None: given as JSON Schema, left to Gemini."""
    native: object
    """As the request wrote it."""


def openapi_schemas(seq: MessageSequence) -> list[OpenApiSchema]:
    """Each function's ``parameters`` and the response schema, in the order Gemini reads them."""
    judged: list[OpenApiSchema] = []
    for entry, tools in _declarations(seq).items():
        for position, tool in enumerate(tools):
            openapi = tool.attrs.get(PARAMETERS_KEY) == "parameters"
            judged.append(
                OpenApiSchema(
                    f"function {tool.name!r}",
                    f"tools[{entry}].function_declarations[{position}].parameters",
                    tool.parameters if openapi else None,
                    tool.attrs.get(OPENAPI_PARAMETERS, tool.parameters) if openapi else None,
                )
            )
    response_schema = _response_schema(seq)
    if response_schema is not None:
        where = "generation_config.response_schema"
        judged.append(OpenApiSchema("the response schema", where, response_schema, response_schema))
    return judged


def _response_schema(seq: MessageSequence) -> object:
    """The OpenAPI ``responseSchema`` of the request's generation config, if any
    (``responseJsonSchema`` is Gemini's to judge)."""
    return either(generation_config(seq), "responseSchema", "response_schema")


def generation_config(seq: MessageSequence) -> dict[str, Any]:
    """The request's ``generationConfig``; {} when it sets none."""
    config = either(seq.envelope, "generationConfig", "generation_config")
    return config if isinstance(config, dict) else {}


def either(value: dict[str, Any], camel: str, snake: str) -> Any:
    """A field in either spelling Gemini reads (google-genai writes some in snake_case)."""
    found = value.get(camel)
    return found if found is not None else value.get(snake)


def _bare_array_text(who: str, field: str, _words: str) -> str:
    return (
        f"{who} declares an array with no items schema; Gemini: "
        f'"GenerateContentRequest.{field}.items: missing field." (give the array an items '
        "schema)"
    )


def _enum_text(who: str, field: str, words: str) -> str:
    if words.startswith("(TYPE_STRING)"):
        quoted, fix = f"Invalid value at '{field}' {words}", "write each value as a string"
    else:
        quoted, fix = f"GenerateContentRequest.{field}: {words}", 'add "type": "STRING"'
    return (
        f"{who} declares an enum Gemini takes only as strings on a string schema; Gemini: "
        f'"{quoted}" ({fix}, or give the schema as JSON Schema: parametersJsonSchema, '
        "responseJsonSchema)"
    )


def _required_text(who: str, field: str, words: str) -> str:
    return (
        f"{who} requires {words!r}, which it does not define there; "
        f'Gemini: "GenerateContentRequest.{field}: property is not defined" (declare the '
        "property beside required, or drop the name from it)"
    )


# The faults of graph/schema_faults.py Gemini refuses, each with its code and its words.
_SCHEMA_FAULTS: tuple[tuple[str, str, Callable[[str, str, str], str]], ...] = (
    ("bare_arrays", "gemini_array_items", _bare_array_text),
    ("non_string_enums", "gemini_enum_not_string", _enum_text),
    ("undefined_required", "gemini_required_undefined", _required_text),
)


def gemini_path(path: tuple[str, ...]) -> str:
    """``('properties', 'tags', 'anyOf', '1')`` as Gemini writes it:
    ``.properties[tags].any_of[1]``."""
    out, keys = "", iter(path)
    for key in keys:
        if key in ("properties", "anyOf", "$defs"):
            name = "any_of" if key == "anyOf" else key
            out += f".{name}[{next(keys, '')}]"
        else:
            out += f".{key}"
    return out


@rule("gemini_tool_name_pattern")
def tool_names_outside_pattern(seq: MessageSequence) -> list[Violation]:
    return [
        violation(
            NAME_PATTERN,
            f"function {tool.name!r} is declared under a name Gemini refuses; Gemini: "
            f'"tools[{entry}].function_declarations[{position}].name: {_NAME_TEXT}" (an MCP '
            "tool's name with a space, a slash or a leading digit: rename it)",
            None,
        )
        for entry, tools in _declarations(seq).items()
        for position, tool in enumerate(tools)
        if _FUNCTION_NAME(tool.name) is None
    ]


@rule("gemini_function_names_unique")
def duplicate_functions(seq: MessageSequence) -> list[Violation]:
    """Two declarations under one name, in one ``tools[]`` entry or two: Gemini refuses the
    request ("Duplicate function declaration found: list_actions"), where OpenAI takes it
    (an MCP toolset and the same function registered by hand, a frontend tool bound twice)."""
    first: dict[str, str] = {}
    out: list[Violation] = []
    for entry, tools in _declarations(seq).items():
        for position, tool in enumerate(tools):
            place = f"tools[{entry}].function_declarations[{position}]"
            earlier = first.setdefault(tool.name, place)
            if earlier == place:
                continue
            out.append(
                violation(
                    "gemini_function_names_unique",
                    f"function {tool.name!r} is declared twice ({earlier} and {place}); "
                    f'Gemini: "Duplicate function declaration found: {tool.name}" (declare '
                    "each function once)",
                    None,
                )
            )
    return out


@rule("gemini_function_count")
def too_many_functions(seq: MessageSequence) -> list[Violation]:
    return [
        violation(
            "gemini_function_count",
            f'tools[{entry}] declares {len(tools)} functions; Gemini: "tools[{entry}].'
            f"function_declarations: At most {MAX_DECLARATIONS} function declarations can be "
            'specified." (many MCP servers at once: declare the ones this turn needs)',
            None,
        )
        for entry, tools in _declarations(seq).items()
        if len(tools) > MAX_DECLARATIONS
    ]

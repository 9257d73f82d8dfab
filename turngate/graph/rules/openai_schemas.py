"""OpenAI's checks of the JSON schemas a request declares (Chat and Responses, request rules).

Every array schema in a function's parameters says what it holds. OpenAI refuses the request
otherwise, on every turn: "Invalid schema for function 'book_reservation': In
context=('properties', 'flights'), array schema missing items." (code
``invalid_function_parameters``). MCP servers that declare a parameter as ``{"type":
"array"}`` alone put it in each request of an agent that loads them (ogx #3004, mcphost #35,
gbrain PR #1028, hermes-agent PR #24208).

A schema marked ``strict: true`` (a function's, or the response format's) must close every
object: ``additionalProperties: false`` and every property listed in ``required`` (OpenAI's
structured-outputs guide: "If you send strict: true and your schema does not meet the
requirements above, the request will be rejected"). Schemas written for loose mode and
switched to strict hit it: "In context=(), 'required' is required to be supplied and to be an
array including every key in properties. Missing 'note'." (codex output schemas, agents-python
#4114, openai4j PR #74). Only an explicit ``true`` is judged: Responses treats an omitted
``strict`` as "strict when the schema allows", and falls back otherwise.

A function's parameters and a response format are objects at the root, strict or not: an
array root, or a union (``anyOf`` / ``oneOf``) with no ``type`` beside it, as a zod union
converts, gets "Invalid schema for function 'bash': schema must be a JSON Schema of 'type:
"object"', got 'type: "None"'." (code ``invalid_function_parameters``).

All are found in one walk of each toolset, judged once per toolset (graph/schema_faults.py).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from turngate.graph.model import MessageSequence
from turngate.graph.rules import rule
from turngate.graph.schema_faults import NO_FAULTS, SchemaFault, ToolsetFaults, judge_toolset
from turngate.graph.validator import Violation, violation

ARRAY_ITEMS = "openai_array_items"
STRICT_SCHEMA = "openai_strict_schema"
SCHEMA_ROOT = "openai_schema_root"


class ResponseFormat(NamedTuple):
    """A response format's JSON schema, where the request puts it."""

    name: object
    schema: object
    strict: bool
    field: str


def _refused(
    seq: MessageSequence,
    param: str,
    schemas: list[tuple[object, bool]],
    response_format: ResponseFormat | None,
) -> list[Violation]:
    """``schemas``: each declared tool's parameters (None but for a function), and whether
    the tool is marked strict."""
    faults = judge_toolset(schemas)
    if faults is NO_FAULTS and response_format is None:
        return []
    out: list[Violation] = []
    for code, found in _by_code(faults, arrays=True):
        for fault in found:
            name = seq.tools[fault.position].name
            out.append(_refusal(code, f"function '{name}'", param.format(fault.position), fault))
    if response_format is not None:
        subject = f"response_format '{response_format.name!s}'"
        judged = judge_toolset([(response_format.schema, response_format.strict)])
        for code, found in _by_code(judged, arrays=response_format.strict):
            out.extend(_refusal(code, subject, response_format.field, fault) for fault in found)
    return out


def _by_code(
    faults: ToolsetFaults, *, arrays: bool
) -> tuple[tuple[str, tuple[SchemaFault, ...]], ...]:
    """The faults OpenAI refuses, under their codes, in the order it finds them."""
    return (
        (SCHEMA_ROOT, faults.other_roots),
        (ARRAY_ITEMS, faults.bare_arrays if arrays else ()),
        (STRICT_SCHEMA, faults.open_objects),
    )


# Each refusal's words: what the field does, the fix, and whether OpenAI names a context.
_WORDING = {
    ARRAY_ITEMS: (
        "declares an array with no items schema",
        "give the array an items schema; {} takes anything",
        True,
    ),
    SCHEMA_ROOT: (
        "is not an object schema",
        "a function's parameters and a response format are objects at the root: wrap an "
        "array or a union in an object's property",
        False,
    ),
    STRICT_SCHEMA: (
        "is marked strict but leaves an object open",
        "in strict mode every object sets additionalProperties: false and lists each property "
        'in required; make an optional one nullable, e.g. "type": ["string", "null"], or drop '
        "strict",
        True,
    ),
}


def _refusal(code: str, subject: str, field: str, fault: SchemaFault) -> Violation:
    what, fix, in_context = _WORDING[code]
    context = f"In context={fault.path!r}, " if in_context else ""
    return violation(
        code,
        f'{field} {what}; OpenAI: "Invalid schema for {subject}: {context}{fault.words}" ({fix})',
        None,
    )


def _strict(holder: object) -> bool:
    return isinstance(holder, dict) and holder.get("strict") is True


def _json_schema(wanted: object) -> dict[str, Any] | None:
    if isinstance(wanted, dict) and wanted.get("type") == "json_schema":
        return wanted
    return None


@rule("chat_tool_schemas")
def chat_tool_schemas(seq: MessageSequence) -> list[Violation]:
    schemas = [
        (tool.parameters, _strict(tool.attrs.get("function")))
        if tool.tool_type == "function"
        else (None, False)
        for tool in seq.tools
    ]
    wanted = _json_schema(seq.envelope.get("response_format"))
    spec = wanted.get("json_schema") if wanted is not None else None
    response_format = None
    if isinstance(spec, dict):
        name, schema = spec.get("name"), spec.get("schema")
        response_format = ResponseFormat(name, schema, _strict(spec), "response_format")
    return _refused(seq, "tools[{}].function.parameters", schemas, response_format)


@rule("responses_tool_schemas")
def responses_tool_schemas(seq: MessageSequence) -> list[Violation]:
    schemas = [
        (tool.parameters, _strict(tool.attrs)) if tool.tool_type == "function" else (None, False)
        for tool in seq.tools
    ]
    text = seq.envelope.get("text")
    wanted = _json_schema(text.get("format") if isinstance(text, dict) else None)
    response_format = None
    if wanted is not None:
        name, schema = wanted.get("name"), wanted.get("schema")
        response_format = ResponseFormat(name, schema, _strict(wanted), "text.format.schema")
    return _refused(seq, "tools[{}].parameters", schemas, response_format)

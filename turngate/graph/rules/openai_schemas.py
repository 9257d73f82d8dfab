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
from turngate.graph.schema_faults import NO_FAULTS, SchemaFault, judge_toolset
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
    for fault in faults.other_roots:
        name = seq.tools[fault.position].name
        out.append(_not_object(f"function '{name}'", param.format(fault.position), fault))
    for fault in faults.bare_arrays:
        name = seq.tools[fault.position].name
        out.append(_bare(f"function '{name}'", param.format(fault.position), fault))
    for fault in faults.open_objects:
        name = seq.tools[fault.position].name
        out.append(_open(f"function '{name}'", param.format(fault.position), fault))
    if response_format is not None:
        subject = f"response_format '{response_format.name!s}'"
        judged = judge_toolset([(response_format.schema, response_format.strict)])
        field = response_format.field
        out.extend(_not_object(subject, field, fault) for fault in judged.other_roots)
        if response_format.strict:
            out.extend(_bare(subject, field, fault) for fault in judged.bare_arrays)
        out.extend(_open(subject, field, fault) for fault in judged.open_objects)
    return out


def _bare(subject: str, field: str, fault: SchemaFault) -> Violation:
    return violation(
        ARRAY_ITEMS,
        f'{field} declares an array with no items schema; OpenAI: "Invalid schema for '
        f'{subject}: In context={fault.path!r}, {fault.words}" (give the array an items '
        "schema; {} takes anything)",
        None,
    )


def _not_object(subject: str, field: str, fault: SchemaFault) -> Violation:
    return violation(
        SCHEMA_ROOT,
        f'{field} is not an object schema; OpenAI: "Invalid schema for {subject}: '
        f"{fault.words}\" (a function's parameters and a response format are objects at the "
        "root: wrap an array or a union in an object's property)",
        None,
    )


def _open(subject: str, field: str, fault: SchemaFault) -> Violation:
    return violation(
        STRICT_SCHEMA,
        f'{field} is marked strict but leaves an object open; OpenAI: "Invalid schema for '
        f'{subject}: In context={fault.path!r}, {fault.words}" (in strict mode every object '
        "sets additionalProperties: false and lists each property in required; make an "
        'optional one nullable, e.g. "type": ["string", "null"], or drop strict)',
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

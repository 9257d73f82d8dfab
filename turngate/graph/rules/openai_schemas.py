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

An agent sends the same tools on every turn, so each toolset is judged once: by its JSON
text, in a bounded memo. Gemini refuses the same arrays in a function's ``parameters``; its
rule (rules/gemini.py) judges them here too (``first_bare_arrays``).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from typing import Any, NamedTuple

import orjson

from turngate.graph.model import MessageSequence
from turngate.graph.rules import rule
from turngate.graph.validator import Violation, violation

ARRAY_ITEMS = "openai_array_items"
STRICT_SCHEMA = "openai_strict_schema"
# Where a schema holds schemas: under names, in lists, or as one.
_NAMED = ("properties", "$defs", "definitions", "patternProperties")
_LISTED = ("anyOf", "oneOf", "allOf", "prefixItems")
_SINGLE = ("items", "additionalProperties", "not", "if", "then", "else", "contains")

Path = tuple[str, ...]


def subschemas(node: object, path: Path = ()) -> Iterator[tuple[dict[str, Any], Path]]:
    """Each schema under ``node`` (itself first) with its path as OpenAI writes it."""
    if not isinstance(node, dict):
        return
    yield node, path
    for key in _NAMED:
        named = node.get(key)
        if isinstance(named, dict):
            for name, sub in named.items():
                yield from subschemas(sub, (*path, key, str(name)))
    for key in _LISTED:
        listed = node.get(key)
        if isinstance(listed, list):
            for position, sub in enumerate(listed):
                yield from subschemas(sub, (*path, key, str(position)))
    for key in _SINGLE:
        yield from subschemas(node.get(key), (*path, key))


def bare_arrays(node: object, path: Path = ()) -> Iterator[Path]:
    """The paths of the array schemas under ``node`` with no items."""
    for schema, where in subschemas(node, path):
        if schema.get("type") == "array" and "items" not in schema and "prefixItems" not in schema:
            yield where


def _open_object(schema: dict[str, Any]) -> str | None:
    """OpenAI's words for what strict mode refuses in this one schema, if anything."""
    kind = schema.get("type")
    if kind != "object" and not (isinstance(kind, list) and "object" in kind):
        return None
    if schema.get("additionalProperties") is not False:
        return "'additionalProperties' is required to be supplied and to be false."
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return None
    required = schema.get("required")
    listed = required if isinstance(required, list) else []
    missing = [name for name in properties if name not in listed]
    if missing:
        return (
            "'required' is required to be supplied and to be an array including every key in "
            f"properties. Missing {missing[0]!r}."
        )
    extra = [name for name in listed if name not in properties]
    if extra:
        return (
            "'required' is required to be supplied and to be an array including every key in "
            f"properties. Extra required key {extra[0]!r} supplied."
        )
    return None


class SchemaFault(NamedTuple):
    position: int
    path: Path
    words: str


class ToolsetFaults(NamedTuple):
    bare_arrays: tuple[tuple[int, Path], ...]
    open_objects: tuple[SchemaFault, ...]


def _strict_fault(schema: object) -> tuple[Path, str] | None:
    for node, path in subschemas(schema):
        words = _open_object(node)
        if words is not None:
            return path, words
    return None


@lru_cache(maxsize=256)
def _judged(toolset: bytes) -> ToolsetFaults:
    arrays: list[tuple[int, Path]] = []
    opened: list[SchemaFault] = []
    for position, (schema, strict) in enumerate(orjson.loads(toolset)):
        path = next(bare_arrays(schema), None)
        if path is not None:
            arrays.append((position, path))
        fault = _strict_fault(schema) if strict else None
        if fault is not None:
            opened.append(SchemaFault(position, *fault))
    return ToolsetFaults(tuple(arrays), tuple(opened))


_NONE = ToolsetFaults((), ())


def judge_toolset(schemas: list[tuple[object, bool]]) -> ToolsetFaults:
    """The faults of a toolset's schemas, each given with whether it is marked strict (None
    for a tool not checked): the first bare array in each, and the first object strict mode
    refuses in each strict one. Judged once per toolset by its JSON text, the same on every
    turn of an agent. A toolset nested past orjson's depth is left to the request's depth
    check."""
    if not any(isinstance(schema, dict) for schema, _strict in schemas):
        return _NONE
    try:
        return _judged(orjson.dumps(schemas))
    except orjson.JSONEncodeError:
        return _NONE


def first_bare_arrays(schemas: list[object]) -> tuple[tuple[int, Path], ...]:
    """(position, path) of the first bare array in each of a toolset's parameter schemas."""
    return judge_toolset([(schema, False) for schema in schemas]).bare_arrays


class StrictFormat(NamedTuple):
    """A response format's schema marked strict, where the request puts it."""

    name: object
    schema: object
    field: str


def _refused(
    seq: MessageSequence, param: str, strict: list[bool], response_format: StrictFormat | None
) -> list[Violation]:
    schemas = [
        (tool.parameters if tool.tool_type == "function" else None, marked)
        for tool, marked in zip(seq.tools, strict, strict=True)
    ]
    faults = judge_toolset(schemas)
    out: list[Violation] = []
    for position, path in faults.bare_arrays:
        name = seq.tools[position].name
        out.append(
            violation(
                ARRAY_ITEMS,
                f"tool {name!r} declares an array with no items schema "
                f"({param.format(position)}); OpenAI: \"Invalid schema for function '{name}': "
                f'In context={path!r}, array schema missing items." (give the array an items '
                "schema; {} takes anything)",
                None,
            )
        )
    for fault in faults.open_objects:
        name = seq.tools[fault.position].name
        out.append(_open(f"function '{name}'", param.format(fault.position), fault))
    if response_format is not None:
        subject = f"response_format '{response_format.name!s}'"
        judged = judge_toolset([(response_format.schema, True)])
        out.extend(_open(subject, response_format.field, fault) for fault in judged.open_objects)
    return out


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
    strict = [_strict(tool.attrs.get("function")) for tool in seq.tools]
    wanted = _json_schema(seq.envelope.get("response_format"))
    spec = wanted.get("json_schema") if wanted is not None else None
    response_format = None
    if isinstance(spec, dict) and _strict(spec):
        response_format = StrictFormat(spec.get("name"), spec.get("schema"), "response_format")
    return _refused(seq, "tools[{}].function.parameters", strict, response_format)


@rule("responses_tool_schemas")
def responses_tool_schemas(seq: MessageSequence) -> list[Violation]:
    strict = [_strict(tool.attrs) for tool in seq.tools]
    text = seq.envelope.get("text")
    wanted = _json_schema(text.get("format") if isinstance(text, dict) else None)
    response_format = None
    if wanted is not None and _strict(wanted):
        response_format = StrictFormat(
            wanted.get("name"), wanted.get("schema"), "text.format.schema"
        )
    return _refused(seq, "tools[{}].parameters", strict, response_format)

"""Anthropic's check of each custom tool's ``input_schema`` (rule ``anthropic_tool_schema``).

Anthropic refuses the whole request, on every turn, when one declared tool's schema is not
an object schema valid under JSON Schema draft 2020-12, and names only the tool's place:
"tools.12.custom.input_schema: JSON schema is invalid. It must match JSON Schema draft
2020-12". MCP servers are the usual source: a draft-4 boolean ``exclusiveMinimum``
(Dokploy/mcp #74, fizzy-mcp PR #30), a date as ``minimum`` (kestra PR #17075), a property
given as ``"number"`` instead of a schema (anthropic-sdk-java #241), a root with no
``type`` or an array root ("tools.0.custom.input_schema.type: Field required" / "Input
should be 'object'"), a union at the root even beside ``"type": "object"`` ("input_schema
does not support oneOf, allOf, or anyOf at the top level", a zod union's shape: kilocode,
codex-app-tools). turngate refuses it before sending and says what is wrong and where.

The schema is checked against the draft's own meta-schema, without asserting formats (a
``pattern`` written for JavaScript is not judged by Python's regex syntax). Each toolset is
judged once, by its JSON text, in a bounded memo (an agent declares the same tools on every
turn), and each schema once within it; the validator is imported on first use.
"""

from __future__ import annotations

from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any

import orjson

from turngate.graph.codec import json_type
from turngate.graph.model import MessageSequence, ToolDef
from turngate.graph.rules import rule
from turngate.graph.validator import Violation, violation

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

TOOL_SCHEMA = "anthropic_tool_schema"
_DRAFT = "JSON schema is invalid. It must match JSON Schema draft 2020-12"
_UNION = "input_schema does not support oneOf, allOf, or anyOf at the top level"


@cache
def _meta_validator() -> Validator:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(Draft202012Validator.META_SCHEMA)


@lru_cache(maxsize=1024)
def _draft_fault(schema: bytes) -> str | None:
    """Where and how one schema breaks the draft's meta-schema, or None."""
    from jsonschema.exceptions import best_match

    try:
        error = best_match(_meta_validator().iter_errors(orjson.loads(schema)))
    except RecursionError:
        return None
    if error is None:
        return None
    where = ".".join(str(key) for key in error.absolute_path) or "the root"
    return f"at {where}: {error.message}"


@lru_cache(maxsize=256)
def _draft_faults(schemas: bytes) -> tuple[str | None, ...]:
    """Each schema's fault, judged once per toolset (and once per schema within it)."""
    return tuple(_draft_fault(orjson.dumps(schema)) for schema in orjson.loads(schemas))


def _shape_fault(native: dict[str, Any] | None, schema: Any) -> tuple[str, str] | None:
    """Anthropic's words after ``tools.N.custom.input_schema`` for a schema that is not an
    object schema, and turngate's detail."""
    if native is not None:
        return ": Field required", "no input_schema"
    if not isinstance(schema, dict):
        return ": Input should be a valid dictionary", f"a JSON {json_type(schema)}"
    if "type" not in schema:
        return ".type: Field required", 'its root has no "type"'
    if schema["type"] != "object":
        return ".type: Input should be 'object'", f"its root is of type {_json(schema['type'])}"
    union = next((key for key in ("oneOf", "allOf", "anyOf") if key in schema), None)
    if union is not None:
        return f": {_UNION}", f"its root holds {union}"
    return None


def _json(value: object) -> str:
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        return json_type(value)


def _custom_without_schema(tool: ToolDef) -> dict[str, Any] | None:
    """The native entry of a custom tool declared with no input_schema (server tools have a
    ``type`` of their own and no schema)."""
    native = tool.attrs.get("$native")
    if (
        tool.tool_type == "hosted"
        and isinstance(native, dict)
        and isinstance(native.get("name"), str)
        and native.get("type", "custom") == "custom"
    ):
        return native
    return None


@rule(TOOL_SCHEMA)
def tool_schemas(seq: MessageSequence) -> list[Violation]:
    faults: list[tuple[int, ToolDef, str, str]] = []
    objects: list[tuple[int, ToolDef]] = []
    for position, tool in enumerate(seq.tools):
        native = _custom_without_schema(tool)
        if tool.tool_type != "function" and native is None:
            continue
        shape = _shape_fault(native, tool.parameters)
        if shape is not None:
            faults.append((position, tool, *shape))
        else:
            objects.append((position, tool))
    if objects:
        try:
            toolset = orjson.dumps([tool.parameters for _p, tool in objects])
        except orjson.JSONEncodeError:  # orjson's is TypeError itself: keep the try this narrow
            toolset = None
        drafts = _draft_faults(toolset) if toolset is not None else ()
        for (position, tool), detail in zip(objects, drafts, strict=False):
            if detail is not None:
                faults.append((position, tool, f": {_DRAFT}", detail))
    return [
        violation(
            TOOL_SCHEMA,
            f"tool {tool.name!r} declares an input_schema Anthropic refuses ({detail}); "
            f'Anthropic: "tools.{position}.custom.input_schema{words}" (give every custom '
            'tool an object schema, "type": "object", valid under JSON Schema draft '
            "2020-12; one bad tool refuses every request that declares it)",
            None,
        )
        for position, tool, words, detail in sorted(faults, key=lambda fault: fault[0])
    ]

"""A response's tool calls, checked before it is committed: nothing half-valid is delivered.

Each function call's arguments must be one JSON object, name a tool the request
declared, and validate against that tool's JSON Schema, unless the route policy says
``tool_arguments: json`` (then ``ParseOnly`` stands in for the cache). Schemas are compiled
once per schema digest (fastjsonschema, a small LRU) by ``schema_check.compile_schema``:
remote ``$ref``s are never fetched, formats are not checked (a model's date string is not a
broken call). A schema that does not compile is skipped with a warning rather than failing
every call to that tool.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from turngate.graph.model import ToolDef
from turngate.graph.schema_check import SchemaUnusable, compile_schema

log = logging.getLogger("turngate.proxy")

INVALID_TOOL_CALL = "invalid_tool_call"
Validator = Callable[[Any], Any]
# Gemini's OpenAPI subset writes types in capitals.
_OPENAPI_TYPES = {"STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT", "NULL"}


class SchemaCache:
    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._compiled: OrderedDict[str, Validator | None] = OrderedDict()

    def validator(self, tool: ToolDef) -> Validator | None:
        key = tool.schema_digest
        if key in self._compiled:
            self._compiled.move_to_end(key)
            return self._compiled[key]
        compiled = _compile(tool)
        self._compiled[key] = compiled
        if len(self._compiled) > self.size:
            self._compiled.popitem(last=False)
        return compiled


class ParseOnly(SchemaCache):
    """``tool_arguments: json`` in the route policy: a call's arguments must still be one JSON
    object naming a declared tool, but no schema is checked."""

    def validator(self, tool: ToolDef) -> Validator | None:
        return None


def _compile(tool: ToolDef) -> Validator | None:
    if not isinstance(tool.parameters, dict):
        return None
    try:
        return compile_schema(json_schema(tool.parameters))
    except SchemaUnusable as exc:
        cause = exc.__cause__
        log.warning("tool %r: schema not checked (%s)", tool.name, type(cause).__name__)
        return None


def json_schema(schema: Any) -> Any:
    """A tool's parameters as JSON Schema: Gemini's OpenAPI type names lowered."""
    if isinstance(schema, dict):
        out = {k: json_schema(v) for k, v in schema.items()}
        kind = out.get("type")
        if isinstance(kind, str) and kind in _OPENAPI_TYPES:
            out["type"] = kind.lower()
        return out
    if isinstance(schema, list):
        return [json_schema(v) for v in schema]
    return schema

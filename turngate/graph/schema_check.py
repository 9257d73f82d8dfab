"""Tool-argument checking against the tool's declared JSON Schema, with compiled validators.

fastjsonschema turns a schema into Python code once; compiled validators are kept in a
bounded LRU keyed by the schema's digest (canonical JSON), so a toolset sent with every
request of a conversation compiles once per process. Defaults in a schema are never
written into the checked value.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

import fastjsonschema

from turngate.errors import UpstreamProtocolError
from turngate.graph.codec import digest_of
from turngate.graph.model import MessageSequence

Validator = Callable[[Any], Any]
# Tool name -> its parameters schema (None: declared without one, any object passes).
ToolSchemas = Mapping[str, Any]

DEFAULT_CACHE_SIZE = 512


class SchemaUnusable(UpstreamProtocolError):
    """A declared tool schema that cannot be compiled: no argument can be checked against it."""

    rule = "schema_unusable"


class SchemaCache:
    def __init__(self, max_size: int = DEFAULT_CACHE_SIZE) -> None:
        self.max_size = max_size
        self._validators: OrderedDict[str, Validator] = OrderedDict()
        self.compiled = 0

    def validator(self, schema: Mapping[str, Any]) -> Validator:
        key = digest_of(schema)
        found = self._validators.get(key)
        if found is not None:
            self._validators.move_to_end(key)
            return found
        try:
            compiled: Validator = fastjsonschema.compile(dict(schema), use_default=False)
        except Exception as exc:  # fastjsonschema raises several unrelated types
            raise SchemaUnusable(f"tool schema cannot be compiled: {exc}") from exc
        self.compiled += 1
        self._validators[key] = compiled
        if len(self._validators) > self.max_size:
            self._validators.popitem(last=False)
        return compiled

    def check(self, schema: Any, value: Any) -> str | None:
        """None when ``value`` satisfies ``schema``, else why not."""
        if schema is None or schema == {}:
            return None
        if not isinstance(schema, Mapping):
            raise SchemaUnusable(f"tool schema is a {type(schema).__name__}, not an object")
        try:
            self.validator(schema)(value)
        except fastjsonschema.JsonSchemaValueException as exc:
            return str(exc.message)
        except fastjsonschema.JsonSchemaException as exc:
            raise SchemaUnusable(f"tool schema cannot be applied: {exc}") from exc
        return None

    def __len__(self) -> int:
        return len(self._validators)


SCHEMAS = SchemaCache()


def check_arguments(schema: Any, value: Any) -> str | None:
    return SCHEMAS.check(schema, value)


def tool_schemas(seq: MessageSequence) -> dict[str, Any]:
    """The function tools a request declares, by name, for the assembler to check calls against."""
    return {t.name: t.parameters for t in seq.tools if t.tool_type == "function"}

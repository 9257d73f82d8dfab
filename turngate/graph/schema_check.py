"""Tool-argument checking against the tool's declared JSON Schema, with compiled validators.

fastjsonschema turns a schema into Python code once; compiled validators are kept in a
bounded LRU keyed by the schema's digest (canonical JSON), so a toolset sent with every
request of a conversation compiles once per process. ``compile_schema`` is the one way a
schema is compiled here and in the proxy:

- defaults in a schema are never written into the checked value;
- a remote ``$ref`` is never fetched (fastjsonschema would ``urlopen`` any scheme it has no
  handler for, from the event loop); such a schema does not compile;
- ``format`` is not checked. No provider holds its model to string formats (OpenAI's strict
  mode guarantees its own), and a tool given ``2025-03-14T09:30:00`` for a ``date-time``
  parses it: refusing that call would break a working agent. Types, required fields,
  enums, patterns and bounds are checked.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

import fastjsonschema

from turngate.errors import UpstreamProtocolError
from turngate.graph.capabilities import Capabilities
from turngate.graph.codec import arguments_value, digest_of
from turngate.graph.model import MessageSequence, ToolCallBlock
from turngate.graph.validator import DUPLICATE_CALL_ID, INCOMPLETE_ARGUMENTS, INVALID_CALL_ID

Validator = Callable[[Any], Any]
# Tool key (tool_key) -> its parameters schema (None: declared without one, any object passes).
ToolSchemas = Mapping[str, Any]

DEFAULT_CACHE_SIZE = 512
SCHEMA_VIOLATION = "schema_violation"
UNKNOWN_TOOL = "unknown_tool"
STREAM_PROTOCOL = "stream_protocol"
# Any printable ASCII, no spaces, when the API states nothing stricter.
_DEFAULT_CALL_ID = re.compile(r"[!-~]{1,256}")


class SchemaUnusable(UpstreamProtocolError):
    """A declared tool schema that cannot be compiled: no argument can be checked against it."""

    rule = "schema_unusable"


class _NoRemoteRefs(dict[str, Callable[[str], Any]]):
    """fastjsonschema fetches any scheme it has no handler for; here every scheme refuses."""

    def __contains__(self, scheme: object) -> bool:
        return True

    def __getitem__(self, scheme: str) -> Callable[[str], Any]:
        return _refuse_remote


def _refuse_remote(uri: str) -> Any:
    raise fastjsonschema.JsonSchemaDefinitionException(f"remote $ref {uri!r} is not fetched")


def compile_schema(schema: Mapping[str, Any]) -> Validator:
    """``schema`` compiled (see the module's notes), or ``SchemaUnusable``."""
    try:
        compiled: Validator = fastjsonschema.compile(
            dict(schema), handlers=_NoRemoteRefs(), use_default=False, use_formats=False
        )
    except Exception as exc:  # fastjsonschema raises several unrelated types
        raise SchemaUnusable(f"tool schema cannot be compiled: {exc}") from exc
    return compiled


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
        compiled = compile_schema(schema)
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


def qualified_name(namespace: str | None, name: str) -> str:
    """A tool's name as the checks key it: within its namespace, for APIs that group tools
    (OpenAI Responses ``namespace`` tools); tool names cannot hold a dot."""
    return f"{namespace}.{name}" if namespace else name


def tool_key(call: ToolCallBlock) -> str:
    namespace = call.attrs.get("namespace")
    return qualified_name(namespace if isinstance(namespace, str) else None, call.name)


class OpenToolset(dict[str, Any]):
    """The declared tools of a request whose provider may hold more (``Capabilities.
    tools_held_by``): any other name is a tool whose schema turngate cannot see (None)."""

    def __contains__(self, name: object) -> bool:
        return True

    def __missing__(self, name: str) -> None:
        return None


class CallChecker:
    """Whether a tool call may be committed: named, complete, one JSON object that satisfies
    the declared schema (``tools`` None: no schema check), and a valid id unique in the turn.
    """

    def __init__(self, tools: ToolSchemas | None, capabilities: Capabilities | None) -> None:
        self.tools = tools
        self._max = capabilities.max_call_id_length if capabilities else None
        pattern = capabilities.call_id_pattern if capabilities else None
        self._pattern = re.compile(pattern) if pattern else _DEFAULT_CALL_ID
        self._ids: set[str] = set()

    def problem(self, call: ToolCallBlock) -> tuple[str, str] | None:
        """``(rule, message)`` for a call that must not be committed; None records it."""
        name, call_id = tool_key(call), call.call_id
        if not call.name:
            return STREAM_PROTOCOL, f"tool call '{call_id}' has no name"
        if call.argument_state != "complete":
            return INCOMPLETE_ARGUMENTS, f"tool call '{call_id}' ({name}) arguments are incomplete"
        if call.tool_type == "function":
            value = arguments_value(call.arguments)
            if value is None:
                return (
                    INCOMPLETE_ARGUMENTS,
                    f"tool call '{call_id}' ({name}) arguments are not one complete JSON object",
                )
            found = self._schema_problem(name, call_id, value)
            if found is not None:
                return found
        if not self._pattern.fullmatch(call_id) or (
            self._max is not None and len(call_id) > self._max
        ):
            return INVALID_CALL_ID, f"tool call ({name}) has an invalid id {call_id!r}"
        if call_id in self._ids:
            return DUPLICATE_CALL_ID, f"tool call id '{call_id}' is used twice in a turn"
        self._ids.add(call_id)
        return None

    def _schema_problem(self, name: str, call_id: str, value: Any) -> tuple[str, str] | None:
        if self.tools is None:
            return None
        if name not in self.tools:
            return UNKNOWN_TOOL, f"tool call '{call_id}' names '{name}', a tool not declared"
        try:
            problem = SCHEMAS.check(self.tools[name], value)
        except SchemaUnusable as exc:
            return exc.rule, f"tool '{name}': {exc.message}"
        if problem is None:
            return None
        return SCHEMA_VIOLATION, f"tool call '{call_id}' ({name}) breaks its schema: {problem}"

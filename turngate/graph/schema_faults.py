"""What the providers refuse in a declared JSON schema, found in one walk and remembered per
toolset (the rules in rules/openai_schemas.py and rules/gemini.py word it each their way).

- a bare array: an array schema with no ``items`` (nor ``prefixItems``). OpenAI and Gemini
  refuse it on every turn;
- an open object, judged only in a schema marked strict: an object schema without
  ``additionalProperties: false``, or whose ``required`` does not list exactly its
  ``properties`` (OpenAI's strict mode);
- an undefined requirement: a name in ``required`` with no property of that name beside it
  (Gemini's "required[0]: property is not defined");
- a non-string enum: values other than strings, or an enum on a schema not of type string
  (Gemini's "enum: only allowed for STRING type");
- a root that is not an object schema: a ``type`` other than ``"object"``, or no ``type``
  beside a root ``anyOf`` / ``oneOf`` / ``allOf`` (OpenAI's "schema must be a JSON Schema of
  'type: "object"'").

An agent sends the same tools on every turn, so each toolset is judged once: by its JSON
text, in a bounded memo. Paths are tuples of keys, as OpenAI writes them
(``('properties', 'tags', 'anyOf', '1')``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import lru_cache
from typing import Any, NamedTuple

import orjson

# Where a schema holds schemas: under names, in lists, or as one.
_NAMED = ("properties", "$defs", "definitions", "patternProperties")
_LISTED = ("anyOf", "oneOf", "allOf", "prefixItems")
_SINGLE = ("items", "additionalProperties", "not", "if", "then", "else", "contains")

Path = tuple[str, ...]


def subschemas(node: object, path: Path = ()) -> Iterator[tuple[dict[str, Any], Path]]:
    """Each schema under ``node`` (itself first) with its path."""
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


# Each check looks at one schema and returns where below it the fault is and the words for
# it, or None.
Found = tuple[Path, str] | None


def _bare_array(schema: dict[str, Any]) -> Found:
    kind = schema.get("type")
    # Gemini's own schemas spell types in capitals ("ARRAY").
    array = isinstance(kind, str) and kind.lower() == "array"
    if array and "items" not in schema and "prefixItems" not in schema:
        return (), "array schema missing items."
    return None


_EVERY_KEY = "'required' is required to be supplied and to be an array including every key in"


def _open_object(schema: dict[str, Any]) -> Found:
    """OpenAI's words for what strict mode refuses in this one schema, if anything."""
    kind = schema.get("type")
    if kind != "object" and not (isinstance(kind, list) and "object" in kind):
        return None
    if schema.get("additionalProperties") is not False:
        return (), "'additionalProperties' is required to be supplied and to be false."
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return None
    required = schema.get("required")
    listed = (
        [name for name in required if isinstance(name, str)] if isinstance(required, list) else []
    )
    missing = [name for name in properties if name not in listed]
    if missing:
        return (), f"{_EVERY_KEY} properties. Missing {missing[0]!r}."
    extra = [name for name in listed if name not in properties]
    if extra:
        return (), f"{_EVERY_KEY} properties. Extra required key {extra[0]!r} supplied."
    return None


def _undefined_required(schema: dict[str, Any]) -> Found:
    """The first name ``required`` lists with no property of that name beside it."""
    required = schema.get("required")
    if not isinstance(required, list):
        return None
    properties = schema.get("properties")
    defined = properties if isinstance(properties, dict) else {}
    for place, name in enumerate(required):
        if isinstance(name, str) and name not in defined:
            return (f"required[{place}]",), name
    return None


def _non_string_enum(schema: dict[str, Any]) -> Found:
    """Gemini's words for an enum that is not one of strings on a string schema. A null among
    the values is the adapter's spelling of OpenAPI's ``nullable`` and is passed over."""
    enum = schema.get("enum")
    if not isinstance(enum, list):
        return None
    for place, value in enumerate(enum):
        if value is not None and not isinstance(value, str):
            return (f"enum[{place}]",), f"(TYPE_STRING), {orjson.dumps(value).decode()}"
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if not any(isinstance(k, str) and k.lower() == "string" for k in kinds):
        return ("enum",), "only allowed for STRING type"
    return None


_NODE_CHECKS: dict[str, Callable[[dict[str, Any]], Found]] = {
    "bare_arrays": _bare_array,
    "open_objects": _open_object,
    "undefined_required": _undefined_required,
    "non_string_enums": _non_string_enum,
}
_COMPOSITIONS = ("anyOf", "oneOf", "allOf")


def _root_fault(schema: object) -> str | None:
    """OpenAI's words for a root that is not an object schema, if it is not."""
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if isinstance(kind, str) and kind != "object":
        got = kind
    elif "type" not in schema and any(key in schema for key in _COMPOSITIONS):
        got = "None"
    else:
        return None
    return f"schema must be a JSON Schema of 'type: \"object\"', got 'type: \"{got}\"'."


class SchemaFault(NamedTuple):
    position: int
    """The schema's place in the toolset."""
    path: Path
    words: str


class ToolsetFaults(NamedTuple):
    bare_arrays: tuple[SchemaFault, ...] = ()
    open_objects: tuple[SchemaFault, ...] = ()
    """Sought only in schemas marked strict."""
    undefined_required: tuple[SchemaFault, ...] = ()
    non_string_enums: tuple[SchemaFault, ...] = ()
    other_roots: tuple[SchemaFault, ...] = ()


NO_FAULTS = ToolsetFaults()
"""The faults of a toolset that has none: always this object."""


def _first_faults(position: int, schema: object, strict: bool) -> dict[str, SchemaFault]:
    checks = {k: c for k, c in _NODE_CHECKS.items() if strict or k != "open_objects"}
    first: dict[str, SchemaFault] = {}
    for node, path in subschemas(schema):
        for kind, check in checks.items():
            if kind not in first and (found := check(node)) is not None:
                below, words = found
                first[kind] = SchemaFault(position, (*path, *below), words)
    root = _root_fault(schema)
    if root is not None:
        first["other_roots"] = SchemaFault(position, (), root)
    return first


@lru_cache(maxsize=256)
def _judged(toolset: bytes) -> ToolsetFaults:
    found = [
        _first_faults(position, schema, strict)
        for position, (schema, strict) in enumerate(orjson.loads(toolset))
    ]
    return ToolsetFaults(
        **{kind: tuple(f[kind] for f in found if kind in f) for kind in ToolsetFaults._fields}
    )


def judge_toolset(schemas: list[tuple[object, bool]]) -> ToolsetFaults:
    """The first fault of each kind in each of a toolset's schemas, each schema given with
    whether it is marked strict (None for a tool not checked; open objects are sought only
    in strict ones). Judged once per toolset by its JSON text, the same on every turn of an
    agent. A toolset nested past orjson's depth is left to the request's depth check."""
    if not any(isinstance(schema, dict) for schema, _strict in schemas):
        return NO_FAULTS
    try:
        toolset = orjson.dumps(schemas)
    except orjson.JSONEncodeError:  # orjson's is TypeError itself: keep the try this narrow
        return NO_FAULTS
    return _judged(toolset)

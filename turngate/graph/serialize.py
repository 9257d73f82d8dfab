"""The JSON form of MessageSequence.v1 and its JSON Schema, generated from the model.

The JSON form uses camelCase keys and carries every digest. Loading it back checks it
against the same model (pydantic), so a stored graph written by a newer turngate with a
block kind this one does not know fails to load instead of losing that block.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import Any

from pydantic import TypeAdapter
from pydantic.alias_generators import to_camel

from turngate.graph.model import MessageSequence, ToolDef, _Block

# Derived values written into the JSON form (read-only: recomputed on load).
_SEQUENCE_DERIVED = (
    "conversation_revision",
    "sequence_digest",
    "adapter_digest",
    "toolset_digest",
    "model_revision",
    "edges",
)


@cache
def _adapter() -> TypeAdapter[MessageSequence]:
    return TypeAdapter(MessageSequence)


def to_json(value: Any) -> Any:
    """A graph value as JSON: camelCase keys, digests included."""
    if isinstance(value, MessageSequence):
        out = _fields_json(value)
        for name in _SEQUENCE_DERIVED:
            out[to_camel(name)] = to_json(getattr(value, name))
        return out
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = _fields_json(value)
        if isinstance(value, _Block):
            out["digest"] = value.digest
        if isinstance(value, ToolDef):
            out["schemaDigest"] = value.schema_digest
        return out
    if isinstance(value, tuple | list):
        return [to_json(v) for v in value]
    return value


def _fields_json(value: Any) -> dict[str, Any]:
    return {to_camel(f.name): to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}


def from_json(data: Any) -> MessageSequence:
    """Load a MessageSequence.v1 JSON form; raises ``pydantic.ValidationError`` if it is not one."""
    return _adapter().validate_python(data)


def sequence_schema() -> dict[str, Any]:
    """The JSON Schema of MessageSequence.v1, as published by ``turngate schema sequence``."""
    schema = _adapter().json_schema(by_alias=True, mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://turngate.dev/schemas/MessageSequence.v1.json"
    schema["title"] = "MessageSequence.v1"
    digest = {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$", "readOnly": True}
    for definition in schema.get("$defs", {}).values():
        props = definition.get("properties", {})
        if "kind" in props and "role" in props:
            props["digest"] = dict(digest, description="sha256 of the block's canonical JSON")
            definition.setdefault("required", []).append("digest")
        if definition.get("title") == "ToolDef":
            props["schemaDigest"] = dict(digest)
    props = schema["properties"]
    props["conversationRevision"] = {"type": "integer", "minimum": 0, "readOnly": True}
    props["sequenceDigest"] = dict(digest)
    props["adapterDigest"] = dict(digest)
    props["toolsetDigest"] = dict(digest)
    props["modelRevision"] = {"anyOf": [{"type": "string"}, {"type": "null"}], "readOnly": True}
    props["edges"] = {"type": "array", "items": {"$ref": "#/$defs/ToolEdge"}, "readOnly": True}
    schema["$defs"]["ToolEdge"] = TypeAdapter(_tool_edge()).json_schema(by_alias=True)
    schema["required"] = sorted({*schema.get("required", []), "sequenceDigest", "edges"})
    return schema


def _tool_edge() -> type:
    from turngate.graph.model import ToolEdge

    return ToolEdge

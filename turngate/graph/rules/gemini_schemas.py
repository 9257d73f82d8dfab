"""What Gemini cannot read in a schema given in its OpenAPI form (a function's ``parameters``,
``generationConfig.responseSchema``): a JSON Schema keyword its ``Schema`` has no field for,
or a ``type`` given as a list. Google reads the body into its protocol types, so such a field
fails the whole request before any model sees it: "Invalid JSON payload received. Unknown
name "exclusiveMinimum" at '…parameters.properties[limit]': Cannot find field." Zod's
``.positive()``, Pydantic's bounded numbers and ``Literal``, and MCP servers' ``$schema``
write these keywords; ``parametersJsonSchema`` and ``responseJsonSchema`` take them, and are
left to Gemini.

Only keywords neither service's ``Schema`` has ever had are refused everywhere;
``additionalProperties``, which Vertex AI's takes, is refused on the Gemini API only (the
google-genai SDK itself refuses it there: "additionalProperties is only supported in Gemini
Enterprise Agent Platform mode"). ``$ref`` and ``$defs`` are left to Google.
"""

from __future__ import annotations

from functools import lru_cache

import orjson

from turngate.graph.model import Endpoint, MessageSequence
from turngate.graph.rules import rule
from turngate.graph.rules.gemini import OpenApiSchema, gemini_path, openapi_schemas
from turngate.graph.schema_faults import Path, subschemas
from turngate.graph.validator import Violation, violation

SCHEMA_FIELD = "gemini_schema_field"

# JSON Schema keywords with no field in Gemini's ``Schema`` on either service (its fields:
# type, format, title, description, nullable, enum, items, min/maxItems, properties, required,
# min/maxProperties, min/maxLength, pattern, example, anyOf, propertyOrdering, default,
# minimum, maximum; on Vertex AI also additionalProperties, $ref, $defs).
_NO_FIELD = frozenset(
    {
        "$schema",
        "$id",
        "$comment",
        "const",
        "oneOf",
        "allOf",
        "not",
        "if",
        "then",
        "else",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "uniqueItems",
        "patternProperties",
        "propertyNames",
        "examples",
        "definitions",
        "dependencies",
        "dependentRequired",
        "dependentSchemas",
        "contains",
        "minContains",
        "maxContains",
        "unevaluatedProperties",
        "unevaluatedItems",
        "additionalItems",
        "readOnly",
        "writeOnly",
        "deprecated",
        "contentEncoding",
        "contentMediaType",
    }
)
# google-genai writes the field as the protocol names it; Google reads both spellings of a
# field it has.
_NO_FIELD_ON_GEMINI_API = _NO_FIELD | {"additionalProperties", "additional_properties"}

# Where in one schema the first unreadable field is, and what it is: a keyword, or "type"
# for a type given as a list.
Unreadable = tuple[Path, str]


def _first_unreadable(schema: object, refused: frozenset[str]) -> Unreadable | None:
    for node, path in subschemas(schema):
        for key in node:
            if key in refused:
                return path, key
        if isinstance(node.get("type"), list):
            return path, "type"
    return None


@lru_cache(maxsize=256)
def _judged(schemas: bytes, endpoint: Endpoint | None) -> tuple[Unreadable | None, ...]:
    refused = _NO_FIELD_ON_GEMINI_API if endpoint == "gemini_api" else _NO_FIELD
    return tuple(_first_unreadable(schema, refused) for schema in orjson.loads(schemas))


@rule("gemini_schema_fields")
def unreadable_schema_fields(seq: MessageSequence) -> list[Violation]:
    judged = openapi_schemas(seq)
    if not any(isinstance(found.native, dict) for found in judged):
        return []
    try:
        schemas = orjson.dumps([found.native for found in judged])
    except orjson.JSONEncodeError:  # nested past orjson's depth: the depth check's to refuse
        return []
    return [
        _refused(found, *unreadable)
        for found, unreadable in zip(judged, _judged(schemas, seq.endpoint), strict=True)
        if unreadable is not None
    ]


def _refused(found: OpenApiSchema, path: Path, key: str) -> Violation:
    field = f"{found.where}{gemini_path(path)}"
    as_json = (
        "responseJsonSchema" if found.where.startswith("generation") else "parametersJsonSchema"
    )
    if key == "type":
        text = (
            f"{found.who} gives a type as a list, which Gemini's schema takes as one name; "
            f'Gemini: "Invalid JSON payload received. Unknown name "type" at \'{field}\': '
            'Proto field is not repeating, cannot start list." (write one type, with '
            f'"nullable": true for null, or give the schema as JSON Schema: {as_json})'
        )
    else:
        service = "Gemini's schema" if key in _NO_FIELD else "the Gemini API's schema"
        text = (
            f"{found.who} uses the JSON Schema keyword {key!r}, which {service} has no field "
            f'for; Gemini: "Invalid JSON payload received. Unknown name "{key}" at '
            f"'{field}': Cannot find field.\" (drop it, or give the schema as JSON Schema: "
            f"{as_json})"
        )
    return violation(SCHEMA_FIELD, text, None)

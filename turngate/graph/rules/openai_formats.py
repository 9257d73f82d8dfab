"""OpenAI, Chat and Responses: the structured output a request asks for.

``openai_json_mode``: JSON mode (Chat's ``response_format``, Responses' ``text.format``, of
type ``json_object``) when no message says "json": "'messages' must contain the word 'json'
in some form, to use 'response_format' of type 'json_object'." (Responses: "Response input
messages must contain the word 'json' in some form to use 'text.format' of type
'json_object'."). Any mention counts, in any case and any part of any message (Responses'
``instructions`` too); a Responses request continuing a stored response, or using a stored
prompt, is left to OpenAI, which holds the rest of its input.

``openai_format_name``: a structured output's ``name`` (Chat's ``response_format.json_schema``,
Responses' ``text.format``) outside 1 to 64 of ``a-z A-Z 0-9 _ -``: "Invalid
'response_format.json_schema.name': string does not match pattern. Expected a string that
matches the pattern '^[a-zA-Z0-9_-]+$'." A schema's title used as the name is the usual
source: a version ("extractor.v4"), a path ("intent/1.0"), a title in Korean.

``openai_format_shape``: a structured output written in the other API's shape, or without
its name. Chat nests the schema (``response_format: {type, json_schema: {name, schema,
strict}}``) and refuses the flat form: "Missing required parameter:
'response_format.json_schema'."; Responses takes it flat (``text.format: {type, name, schema,
strict}``) and refuses the nested one, or one without a name: "Missing required parameter:
'text.format.name'." A client moved between the two endpoints with its format kept, or a
library that sent a bare ``{"type": "json_schema"}`` (vercel/ai #21202, SwiftOpenAI #151,
Datus-agent PR #1281).

All are refused with OpenAI's ``param``.
"""

from __future__ import annotations

from typing import Any

import orjson

from turngate.graph.model import MessageSequence
from turngate.graph.rules import rule
from turngate.graph.rules.openai_chat import name_fits, pattern_text, too_long_text
from turngate.graph.validator import Violation, violation

JSON_MODE = "openai_json_mode"
FORMAT_NAME = "openai_format_name"
FORMAT_SHAPE = "openai_format_shape"
# What a json_schema format holds besides its type, in either API.
_SCHEMA_FIELDS = ("name", "schema", "strict", "description")
MAX_FORMAT_NAME = 64


@rule(JSON_MODE)
def json_mode(seq: MessageSequence) -> list[Violation]:
    chosen = _output_format(seq)
    if chosen is None or chosen.get("type") != "json_object":
        return []
    if seq.history == "partial" or seq.envelope.get("prompt") is not None or _mentions_json(seq):
        return []
    if seq.api == "openai_chat":
        param = "messages"
        text = (
            "'messages' must contain the word 'json' in some form, to use 'response_format' of "
            "type 'json_object'."
        )
    else:
        param = "text.format"
        text = (
            "Response input messages must contain the word 'json' in some form to use "
            "'text.format' of type 'json_object'."
        )
    return [
        violation(
            JSON_MODE,
            f'JSON mode is on and no message says "json"; OpenAI: "{text}" (say in the system '
            "prompt or the request that the answer is JSON)",
            None,
            param=param,
        )
    ]


def _mentions_json(seq: MessageSequence) -> bool:
    said = [[b.semantic() for b in m.blocks] for m in seq.messages]
    return b"json" in orjson.dumps(said).lower()


@rule(FORMAT_NAME)
def format_name(seq: MessageSequence) -> list[Violation]:
    chosen = _output_format(seq)
    holder = chosen.get("json_schema") if chosen and seq.api == "openai_chat" else chosen
    if not isinstance(holder, dict) or holder.get("type", "json_schema") != "json_schema":
        return []
    name = holder.get("name")
    if not isinstance(name, str):
        return []
    param = "response_format.json_schema.name" if seq.api == "openai_chat" else "text.format.name"
    if len(name) > MAX_FORMAT_NAME:
        words = too_long_text(param, MAX_FORMAT_NAME, len(name))
    elif not name_fits(name):
        words = pattern_text(param)
    else:
        return []
    return [
        violation(
            FORMAT_NAME,
            f"the structured output is named {name[:80]!r}; {words} "
            "(replace dots, slashes and spaces with _ or -)",
            None,
            param=param,
        )
    ]


@rule(FORMAT_SHAPE)
def format_shape(seq: MessageSequence) -> list[Violation]:
    chosen = _output_format(seq)
    if chosen is None or chosen.get("type") != "json_schema":
        return []
    if seq.api == "openai_chat":
        nested = chosen.get("json_schema")
        if not isinstance(nested, dict):
            flat = [field for field in _SCHEMA_FIELDS if field in chosen]
            fix = (
                f"nest {', '.join(flat)} under json_schema: Chat Completions' shape"
                if flat
                else "give it json_schema: {name, schema}"
            )
            return [_missing("response_format.json_schema", fix)]
        if "name" not in nested:
            return [_missing("response_format.json_schema.name", "name the schema")]
        return []
    if "name" in chosen:
        return []
    if isinstance(chosen.get("json_schema"), dict):
        fix = "put name, schema and strict directly in text.format: the Responses shape"
    else:
        fix = "name the schema"
    return [_missing("text.format.name", fix)]


def _missing(param: str, fix: str) -> Violation:
    return violation(
        FORMAT_SHAPE,
        f'the structured output has no {param.rsplit(".", 1)[-1]}; OpenAI: "Missing required '
        f"parameter: '{param}'.\" ({fix})",
        None,
        param=param,
    )


def _output_format(seq: MessageSequence) -> dict[str, Any] | None:
    """The structured-output setting: Chat's ``response_format``, Responses' ``text.format``."""
    if seq.api == "openai_chat":
        chosen = seq.envelope.get("response_format")
    else:
        config = seq.envelope.get("text")
        chosen = config.get("format") if isinstance(config, dict) else None
    return chosen if isinstance(chosen, dict) else None

"""OpenAI's check of a declared function's parameters (Chat and Responses, request rules):
every array schema says what it holds. OpenAI refuses the request otherwise, on every turn:
"Invalid schema for function 'book_reservation': In context=('properties', 'flights'), array
schema missing items." (code ``invalid_function_parameters``). MCP servers that declare a
parameter as ``{"type": "array"}`` alone put it in each request of an agent that loads them
(ogx #3004, mcphost #35, gbrain PR #1028, hermes-agent PR #24208).

An agent sends the same tools on every turn, so each toolset is judged once: by its JSON
text, in a bounded memo. Gemini refuses the same arrays in a function's ``parameters``; its
rule (rules/gemini.py) judges them here too (``first_bare_arrays``).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache

import orjson

from turngate.graph.model import MessageSequence
from turngate.graph.rules import rule
from turngate.graph.validator import Violation, violation

ARRAY_ITEMS = "openai_array_items"
# Where a schema holds schemas: under names, in lists, or as one.
_NAMED = ("properties", "$defs", "definitions", "patternProperties")
_LISTED = ("anyOf", "oneOf", "allOf", "prefixItems")
_SINGLE = ("items", "additionalProperties", "not", "if", "then", "else", "contains")


def bare_arrays(node: object, path: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    """The paths, as OpenAI writes them, of the array schemas under ``node`` with no items."""
    if not isinstance(node, dict):
        return
    if node.get("type") == "array" and "items" not in node and "prefixItems" not in node:
        yield path
    for key in _NAMED:
        named = node.get(key)
        if isinstance(named, dict):
            for name, sub in named.items():
                yield from bare_arrays(sub, (*path, key, str(name)))
    for key in _LISTED:
        listed = node.get(key)
        if isinstance(listed, list):
            for position, sub in enumerate(listed):
                yield from bare_arrays(sub, (*path, key, str(position)))
    for key in _SINGLE:
        yield from bare_arrays(node.get(key), (*path, key))


@lru_cache(maxsize=256)
def _judged(schemas: bytes) -> tuple[tuple[int, tuple[str, ...]], ...]:
    found = []
    for position, schema in enumerate(orjson.loads(schemas)):
        path = next(bare_arrays(schema, ()), None)
        if path is not None:
            found.append((position, path))
    return tuple(found)


def first_bare_arrays(schemas: list[object]) -> tuple[tuple[int, tuple[str, ...]], ...]:
    """(position, path) of the first bare array in each of a toolset's parameter schemas
    (None for a tool not checked), judged once per toolset by its JSON text: the same on
    every turn of an agent. A toolset nested past orjson's depth is left to the request's
    depth check."""
    if not any(isinstance(schema, dict) for schema in schemas):
        return ()
    try:
        return _judged(orjson.dumps(schemas))
    except orjson.JSONEncodeError:
        return ()


def _refused(seq: MessageSequence, param: str) -> list[Violation]:
    schemas = [tool.parameters if tool.tool_type == "function" else None for tool in seq.tools]
    out: list[Violation] = []
    for position, path in first_bare_arrays(schemas):
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
    return out


@rule("chat_tool_array_items")
def chat_bare_arrays(seq: MessageSequence) -> list[Violation]:
    return _refused(seq, "tools[{}].function.parameters")


@rule("responses_tool_array_items")
def responses_bare_arrays(seq: MessageSequence) -> list[Violation]:
    return _refused(seq, "tools[{}].parameters")

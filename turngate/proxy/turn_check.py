"""What an answer's tool calls must pass before the turn is committed, streamed or not.

One check for both paths: the stream assembler (``StreamRelay``) commits a tool call only
when ``CallChecker`` passes it, and a non-streamed answer, decoded once and parsed whole by
its adapter, puts each of its tool calls through a ``CallChecker`` built from the same
toolset. ``call_schemas`` is that toolset: each declared function tool's parameters as JSON
Schema (Gemini's OpenAPI type names lowered), or None where the schema cannot be checked (a
remote ``$ref``, which is never fetched, or a schema fastjsonschema cannot compile: any
object passes, with the warning ``SchemaCache`` logs once per schema).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from turngate.adapters import get_adapter
from turngate.adapters.anthropic import tools as anthropic_tools
from turngate.adapters.openai_responses import tools as responses_tools
from turngate.errors import UpstreamProtocolError
from turngate.graph.capabilities import Capabilities
from turngate.graph.model import MessageSequence, ToolDef
from turngate.graph.schema_check import CallChecker, OpenToolset, ToolSchemas
from turngate.graph.turn import AssistantTurn
from turngate.proxy.tool_calls import INVALID_TOOL_CALL, SchemaCache, json_schema

# The APIs whose messages may offer tools beyond the declared ones.
_OFFERED: dict[str, Callable[[MessageSequence], dict[str, ToolDef]]] = {
    "openai_responses": responses_tools.callable_tools,
    "anthropic": anthropic_tools.callable_tools,
}


def call_schemas(seq: MessageSequence, cache: SchemaCache) -> dict[str, Any]:
    """Tool key (``tool_key``) -> the JSON Schema its calls are checked against (None: not
    checkable). On OpenAI Responses also a namespace's members and the tools the history
    loaded (``openai_responses.tools``); on Anthropic the tools its messages define inline
    (``anthropic.tools``). An ``OpenToolset`` when the request names a
    provider-held object that may declare more tools (``Capabilities.tools_held_by``,
    ``history_holds_tools``: an Anthropic thread's continue) or
    declares a tool whose calls the provider names itself (``predefined_calls_by``). A
    provider-defined tool the application runs (``Capabilities.runs_on_client``) has no
    schema here: its calls are checked as one JSON object."""
    offered = _OFFERED.get(seq.api)
    tools = offered(seq) if offered is not None else {tool.name: tool for tool in seq.tools}
    capabilities = get_adapter(seq.api).capabilities
    held = capabilities.tools_held_by
    open_ended = (
        any(seq.envelope.get(f) for f in held)
        or (capabilities.history_holds_tools and seq.history == "partial")
        or any(capabilities.brings_predefined_calls(tool) for tool in seq.tools)
    )
    schemas: dict[str, Any] = OpenToolset() if open_ended else {}
    for key, tool in tools.items():
        if tool.tool_type != "function":
            if capabilities.runs_on_client(tool):
                schemas[key] = None
            continue
        checkable = cache.validator(tool) is not None
        schemas[key] = json_schema(tool.parameters) if checkable else None
    return schemas


def check_turn(
    turn: AssistantTurn, tools: ToolSchemas | None, capabilities: Capabilities | None
) -> None:
    """Raise ``UpstreamProtocolError`` (``invalid_tool_call``, 502) for the first tool call the
    stream assembler would not commit; the message names the call and the precise rule."""
    checker = CallChecker(tools, capabilities)
    for call in turn.tool_calls:
        problem = checker.problem(call)
        if problem is not None:
            rule, message = problem
            raise UpstreamProtocolError(
                f"turngate: the upstream's answer cannot be committed: {message} ({rule})",
                rule=INVALID_TOOL_CALL,
                status=502,
            )

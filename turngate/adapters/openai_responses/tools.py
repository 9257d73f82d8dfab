"""The tools a Responses answer may call, keyed as its calls name them (``tool_key``).

Besides the request's own functions: the members of a ``namespace`` tool (a call names
both, ``{"name": "get_order", "namespace": "crm"}``), and the tools the history loaded:
those a client-run tool search returned (``tool_search_output`` with ``execution:
client``) and those an ``additional_tools`` item added. A hosted tool search picks among
deferred tools the request declares already.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from turngate.adapters.openai_responses.request import parse_tool
from turngate.graph.model import MessageSequence, ServerToolBlock, ToolDef
from turngate.graph.schema_check import qualified_name

LOADS_TOOLS = frozenset({"tool_search_output", "additional_tools"})


def callable_tools(seq: MessageSequence) -> dict[str, ToolDef]:
    found: dict[str, ToolDef] = {}
    _add(found, seq.tools)
    for _message, block in seq.blocks():
        if isinstance(block, ServerToolBlock) and block.name in LOADS_TOOLS:
            loaded = block.attrs.get("tools")
            if isinstance(loaded, list):
                _add(found, (parse_tool(native) for native in loaded))
    return found


def _add(found: dict[str, ToolDef], tools: Iterable[ToolDef], namespace: str | None = None) -> None:
    for tool in tools:
        if tool.tool_type != "hosted":
            found[qualified_name(namespace, tool.name)] = tool
            continue
        native: Any = tool.attrs.get("$native")
        if namespace is None and is_namespace(native):
            _add(found, (parse_tool(member) for member in native["tools"]), native["name"])


def is_namespace(native: Any) -> bool:
    return (
        isinstance(native, dict)
        and native.get("type") == "namespace"
        and isinstance(native.get("name"), str)
        and isinstance(native.get("tools"), list)
    )

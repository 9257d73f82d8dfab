"""OpenAI's checks of ``tool_choice`` against the tools a request declares (request rules,
code ``openai_tool_choice``).

An agent that filters its tools per turn can end with none left and still send the
``tool_choice`` (or ``parallel_tool_calls``) it always sends; Chat refuses it: "Invalid value
for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified." (15 of 142
failed turns in one agent's month of logs). A choice that forces a function the request
does not declare is refused too (Responses: "Tool choice 'x' not found in 'tools'
parameter."). ``tool_choice: "none"`` with no tools is left to the provider.
"""

from __future__ import annotations

from turngate.graph.model import MessageSequence
from turngate.graph.rules import rule
from turngate.graph.validator import Violation, violation

TOOL_CHOICE = "openai_tool_choice"
_KINDS = ("function", "custom")


def _forced_name(choice: object, nested: bool) -> tuple[str, str] | None:
    """(kind, name) of the function or custom tool a ``tool_choice`` forces, if it does:
    Chat nests the name (``{"type": "function", "function": {"name": …}}``), Responses
    does not."""
    if not isinstance(choice, dict) or choice.get("type") not in _KINDS:
        return None
    kind = choice["type"]
    holder = choice.get(kind) if nested else choice
    name = holder.get("name") if isinstance(holder, dict) else None
    return (kind, name) if isinstance(name, str) else None


def _undeclared(seq: MessageSequence, nested: bool) -> tuple[str, str] | None:
    forced = _forced_name(seq.envelope.get("tool_choice"), nested)
    if forced is None:
        return None
    kind, name = forced
    declared = {tool.name for tool in seq.tools if tool.tool_type == kind}
    return None if name in declared else forced


@rule("chat_tool_choice")
def chat_tool_choice(seq: MessageSequence) -> list[Violation]:
    if not seq.tools and "tools" not in seq.envelope:
        choice = seq.envelope.get("tool_choice")
        fields = [
            field
            for field, value in (
                ("tool_choice", choice if choice != "none" else None),
                ("parallel_tool_calls", seq.envelope.get("parallel_tool_calls")),
            )
            if value is not None
        ]
        return [
            violation(
                TOOL_CHOICE,
                f'the request sets {field} but declares no tools; OpenAI: "Invalid value for '
                f"'{field}': '{field}' is only allowed when 'tools' are specified.\" (leave "
                f"{field} out of a turn with no tools)",
                None,
            )
            for field in fields
        ]
    return _forced_undeclared(seq, nested=True)


@rule("responses_tool_choice")
def responses_tool_choice(seq: MessageSequence) -> list[Violation]:
    return _forced_undeclared(seq, nested=False)


def _forced_undeclared(seq: MessageSequence, nested: bool) -> list[Violation]:
    found = _undeclared(seq, nested)
    if found is None:
        return []
    kind, name = found
    # Responses' words are known; Chat's are left unquoted.
    quoted = "" if nested else f"; OpenAI: \"Tool choice '{name}' not found in 'tools' parameter.\""
    return [
        violation(
            TOOL_CHOICE,
            f"tool_choice forces the {kind} tool {name!r}, which the request's tools do not "
            f"declare{quoted} (declare it, or let the model choose)",
            None,
        )
    ]

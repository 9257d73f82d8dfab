"""A sequence outline: what the hot path reads of a request made only of plain messages.

Most requests an agent sends hold nothing but text, function calls and text results, each in
its own role with no extra fields. For those an adapter can hand the graph an outline, one
tuple per message, instead of building every block up front. The validator, the trust labels,
the sequence digest and the renderer read the outline; the blocks are built (by the adapter's
own parser, so exactly as they would have been) only when something asks for
``MessageSequence.messages``: a violation to report, a stored graph, a foreign render.

An outline is only ever built for messages whose blocks would be exactly:

- a ``TextBlock`` in the message's role (string content), with default trust;
- for assistant messages, ``ToolCallBlock`` s of type ``function`` with no extra fields;
- for tool messages, one ``ToolResultBlock`` whose one part is a ``TextBlock``.

Anything else (content parts, extra fields, other roles) and the adapter builds the graph as
before. ``sequence_digest`` from an outline equals the one computed from the blocks
(tests/graph/test_outline.py holds the two to each other).

The sequence keeps the native message list it was parsed from, to build the blocks and to
render: a body must not be changed after it is parsed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from turngate.graph.codec import digest_of

if TYPE_CHECKING:
    from turngate.graph.model import Message

# (call id, tool name, arguments as sent, arguments are one JSON object)
OutlineCall = tuple[str, str, str, bool]
# (role, text or None, function calls, the call id a tool message answers or None)
OutlineMessage = tuple[str, str | None, tuple[OutlineCall, ...], str | None]

_NO_ATTRS: dict[str, Any] = {}


class SequenceOutline:
    """The outline of every message, the native messages it came from, and how to build them."""

    __slots__ = ("build", "messages", "native")

    def __init__(
        self,
        messages: tuple[OutlineMessage, ...],
        native: Sequence[Any],
        build: Callable[[], tuple[Message, ...]],
    ) -> None:
        self.messages = messages
        # The messages exactly as the client sent them: an unchanged graph renders as these.
        self.native = native
        self.build = build

    def kinds(self) -> set[str]:
        """The block kinds the messages hold, the parts of results included."""
        kinds: set[str] = set()
        for _role, text, calls, result in self.messages:
            if result is not None:
                kinds.update(("tool_result", "text"))
            else:
                if text is not None:
                    kinds.add("text")
                if calls:
                    kinds.add("tool_call")
        return kinds

    def has_tool_blocks(self) -> bool:
        return any(calls or result is not None for _r, _t, calls, result in self.messages)

    def conversation_revision(self) -> int:
        """Assistant turns: maximal runs of assistant messages (as ``MessageSequence``)."""
        turns = 0
        previous: str | None = None
        for role, _text, _calls, _result in self.messages:
            if role == "assistant" and previous != "assistant":
                turns += 1
            previous = role
        return turns

    def sequence_digest(self) -> str:
        """``MessageSequence.sequence_digest`` without the blocks.

        Each block is written as ``content_values`` writes it: the values of its content
        fields in sorted key order (text: attrs, kind, role, text; call: argument_state,
        arguments, attrs, call_id, kind, name, role, tool_type; result: attrs, call_id,
        content, kind, name, role, status, value).
        """
        out: list[Any] = []
        for role, text, calls, result in self.messages:
            if result is not None:
                part = (_NO_ATTRS, "text", "tool", text)
                blocks: list[Any] = [
                    (_NO_ATTRS, result, [part], "tool_result", None, "tool", "success", None)
                ]
            else:
                blocks = [] if text is None else [(_NO_ATTRS, "text", role, text)]
                for call_id, name, arguments, complete in calls:
                    state = "complete" if complete else "incomplete"
                    blocks.append(
                        (state, arguments, _NO_ATTRS, call_id, "tool_call", name, role, "function")
                    )
            out.append((role, blocks))
        return digest_of(out)

"""The toolsets of Anthropic Message Threads, remembered by reply.

A thread's continue carries neither ``system`` nor ``tools``: the server keeps those the
thread was created with (and the SDK refuses a continue that would change them). Its
answer's calls to the thread's tools could then only be checked as JSON objects. So for each
reply of a threaded request whose answer it committed, turngate remembers the toolset that
request was checked with; a continue naming that reply (``previous_message_id``) is checked
against it, with what the continue itself defines inline, and its own reply is remembered in
turn.

In process memory, bounded, most recently used kept: a sidecar sees its agent's whole
thread. A continue from a reply this process did not commit (another replica's, one from
before a restart, an evicted one) is checked as before: its calls to tools it does not show
as one JSON object each.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from turngate.adapters.anthropic.request import thread_anchor
from turngate.graph.model import MessageSequence
from turngate.graph.schema_check import OpenToolset, ToolSchemas

# Replies remembered; a toolset is shared by every reply of its thread, so an entry costs a
# key and a reference.
REMEMBERED = 4096


class ThreadToolsets:
    def __init__(self, size: int = REMEMBERED) -> None:
        self._size = size
        self._by_reply: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def toolset(self, seq: MessageSequence, shown: ToolSchemas) -> ToolSchemas:
        """What the answer to ``seq`` is checked against: ``shown`` (the request's own
        toolset), or for a continue from a remembered reply the thread's whole toolset."""
        anchor = thread_anchor(seq.envelope) if seq.api == "anthropic" else None
        known = None if anchor is None else self._by_reply.get(anchor)
        if anchor is None or known is None:
            return shown
        self._by_reply.move_to_end(anchor)
        return {**known, **shown}

    def remember(self, seq: MessageSequence, reply: str | None, toolset: ToolSchemas) -> None:
        """``reply``, the committed answer to the threaded request ``seq``, was checked
        against ``toolset``: a continue from it will be too. An open toolset is not the
        thread's whole one, and is not remembered."""
        if (
            reply is None
            or seq.api != "anthropic"
            or not isinstance(seq.envelope.get("thread"), dict)
        ):
            return
        if isinstance(toolset, OpenToolset) or not isinstance(toolset, dict):
            return
        self._by_reply[reply] = toolset
        self._by_reply.move_to_end(reply)
        while len(self._by_reply) > self._size:
            self._by_reply.popitem(last=False)

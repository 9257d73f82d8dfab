"""The sequence validator: ``validate(seq, capabilities) -> Verdict``.

Rule codes are stable; docs/rules.md lists them. A verdict is READY, WAITING (some
tool call has no result yet and nothing else is wrong) or REJECTED, and carries every
violation found, each naming its message, block and call id. Role-forgery text is a
*finding*: reported, and refused only when the caller's policy says so.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Literal

from turngate.graph import codec
from turngate.graph.capabilities import Capabilities
from turngate.graph.markers import forged_role_marker
from turngate.graph.model import (
    UNKNOWN_HINT,
    AnyBlock,
    CompressionBlock,
    Message,
    MessageSequence,
    ReasoningBlock,
    SnippetBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    UnknownBlock,
)
from turngate.graph.outline import SequenceOutline

VerdictStatus = Literal["READY", "WAITING", "REJECTED"]
ForgeryPolicy = Literal["allow", "flag", "refuse"]

ORPHAN_RESULT = "orphan_result"
DUPLICATE_RESULT = "duplicate_result"
MISSING_RESULT = "missing_result"
MISPLACED_RESULT = "misplaced_result"
DUPLICATE_CALL_ID = "duplicate_call_id"
INVALID_CALL_ID = "invalid_call_id"
INCOMPLETE_ARGUMENTS = "incomplete_arguments"
RESULT_MISMATCH = "result_mismatch"
UNKNOWN_KIND = "unknown_kind"
SCOPE_CROSSING = "scope_crossing"
ROLE_FORGERY = "role_forgery"


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str
    message_index: int | None = None
    location: str | None = None
    block_id: str | None = None
    call_id: str | None = None
    # True when the only problem is a result that has not arrived yet.
    waiting: bool = False

    def to_json(self) -> dict[str, object]:
        return {
            "rule": self.rule,
            "message": self.message,
            "messageIndex": self.message_index,
            "location": self.location,
            "blockId": self.block_id,
            "callId": self.call_id,
            "waiting": self.waiting,
        }


@dataclass(frozen=True)
class Verdict:
    status: VerdictStatus
    violations: tuple[Violation, ...] = ()
    findings: tuple[Violation, ...] = field(default=())

    @property
    def rules(self) -> list[str]:
        return [v.rule for v in self.violations]

    @property
    def ready(self) -> bool:
        return self.status == "READY"


def violation(
    rule: str,
    text: str,
    message: Message | None,
    block: AnyBlock | None = None,
    *,
    param: str | None = None,
    **kw: object,
) -> Violation:
    """A violation located at ``message``/``block``; ``text`` gets the location appended.
    ``param=`` names the request field to report instead (the API's ``param``): a request
    rule's, or a field inside the message."""
    where = f" ({message.location})" if message is not None else ""
    call_id = kw.pop("call_id", getattr(block, "call_id", None))
    return Violation(
        rule=rule,
        message=f"{text}{where}",
        message_index=message.index if message is not None else None,
        location=param if param is not None or message is None else message.location,
        block_id=block.id if block is not None else None,
        call_id=call_id if isinstance(call_id, str) else None,
        waiting=bool(kw.pop("waiting", False)),
    )


_READY = Verdict(status="READY")


def validate(
    seq: MessageSequence, caps: Capabilities, *, role_forgery: ForgeryPolicy = "flag"
) -> Verdict:
    outline = seq.outline
    settings = _request_rules(seq, caps)
    if (
        outline is not None
        and not settings
        and _outline_ready(outline, caps, scan=role_forgery != "allow")
    ):
        return _READY
    found: list[Violation] = [*settings]
    findings: list[Violation] = []
    reused_ids: list[Violation] = []
    scan = role_forgery != "allow"
    # Call ids seen in the current turn (a run of assistant messages), and, where the API
    # takes each id once per request, the message each id was first used in.
    turn_ids: set[str] = set()
    first_use: dict[str, Message] | None = {} if caps.call_ids_unique else None
    previous_role: str | None = None
    # One walk for the per-block checks, the forgery scan and the call-id check; each
    # keeps its own list so violations come out in the same order as separate passes.
    for message in seq.messages:
        role = message.role
        if role != "assistant" or previous_role != "assistant":
            turn_ids = set()
        previous_role = role
        for block in message.blocks:
            # The common kinds in their own role skip the general checks, which would
            # find nothing more: text breaks no structural rule, a call only its own
            # rules (and holds no text to scan), a result of text parts only its call's.
            if type(block) is TextBlock:
                if block.role != role:
                    found.extend(_check_block(message, block, caps))
                if scan and block.trust == "untrusted":
                    marker = forged_role_marker(block.text, from_tool=block.role == "tool")
                    if marker:
                        findings.append(_forgery_violation(message, block, marker))
                continue
            if type(block) is ToolCallBlock and block.role == role == "assistant":
                found.extend(_check_call(message, block, caps))
            elif type(block) is ToolResultBlock and _plain_result_fits(message, block):
                if scan:
                    findings.extend(_forgery(message, block))
                continue
            else:
                found.extend(_check_block(message, block, caps))
                if scan:
                    findings.extend(_forgery(message, block))
            if isinstance(block, ToolCallBlock) and block.call_id:
                if block.call_id in turn_ids:
                    reused_ids.append(_duplicate_call_id(message, block))
                elif first_use is not None:
                    first = first_use.setdefault(block.call_id, message)
                    if first is not message:
                        reused_ids.append(_reused_call_id(message, block, first))
                turn_ids.add(block.call_id)
    found.extend(reused_ids)
    found.extend(_Placement(seq, caps).run())
    if caps.extra_rules:
        from turngate.graph.rules import run_rules

        found.extend(run_rules(caps.extra_rules, seq))
    if role_forgery == "refuse":
        found.extend(findings)
    if any(not v.waiting for v in found):
        status: VerdictStatus = "REJECTED"
    elif found:
        status = "WAITING"
    else:
        status = "READY"
    return Verdict(status=status, violations=tuple(found), findings=tuple(findings))


def _request_rules(seq: MessageSequence, caps: Capabilities) -> list[Violation]:
    if not caps.request_rules:
        return []
    from turngate.graph.rules import run_rules

    return run_rules(caps.request_rules, seq)


def _outline_ready(outline: SequenceOutline, caps: Capabilities, *, scan: bool) -> bool:
    """True only when ``validate`` would find nothing in the outlined messages.

    Answers False on anything it does not settle (a violation, a finding, a placement it
    does not model): the full validator then runs on the built blocks and reports. Every
    outlined block carries its role's default trust (graph/outline.py), so system and
    developer text is trusted and everything else is scanned.
    """
    if (
        caps.result_window != "tool_messages"
        or caps.call_ids_unique
        or (caps.extra_rules and not caps.outline_clears_extra_rules)
    ):
        return False
    max_length, pattern = caps.max_call_id_length, caps.call_id_pattern
    matcher = None if pattern is None else _compiled(pattern).fullmatch
    # Calls waiting for their result in the open window.
    pending: set[str] = set()
    turn_ids: set[str] = set()
    previous: str | None = None
    for role, text, calls, result in outline.messages:
        if (
            scan
            and text
            and role not in ("system", "developer")
            and forged_role_marker(text, from_tool=role == "tool")
        ):
            return False
        if role == "assistant":
            if previous != "assistant":
                turn_ids = set()
            if pending and not (previous == "assistant" and caps.merges_runs):
                return False  # the window closes on calls never answered
            for call_id, _name, _arguments, complete in calls:
                if (
                    not complete
                    or not call_id
                    or (max_length is not None and len(call_id) > max_length)
                    or (matcher is not None and not matcher(call_id))
                    or call_id in turn_ids
                ):
                    return False
                turn_ids.add(call_id)
                pending.add(call_id)
        elif result is not None:
            if result not in pending:
                return False  # orphan, duplicate or misplaced
            pending.remove(result)
        elif pending:
            return False  # a user or system message closes the window on unanswered calls
        previous = role
    return not pending


def _unknown_text(block: UnknownBlock, where: str = "") -> str:
    return f"unknown content kind '{block.native_type}'{where}" + _hint_of(block)


def _hint_of(block: AnyBlock) -> str:
    """What the adapter knows of the usual fix for a block it could not read."""
    hint = block.attrs.get(UNKNOWN_HINT)
    return f"; {hint}" if hint else ""


def _check_block(message: Message, block: AnyBlock, caps: Capabilities) -> list[Violation]:
    out: list[Violation] = []
    if isinstance(block, UnknownBlock):
        out.append(violation(UNKNOWN_KIND, _unknown_text(block), message, block))
    elif isinstance(block, ToolCallBlock):
        out.extend(_check_call(message, block, caps))
    elif isinstance(block, ToolResultBlock):
        for part in block.content:
            if isinstance(part, UnknownBlock):
                out.append(
                    violation(
                        UNKNOWN_KIND,
                        _unknown_text(part, f" in tool result '{block.call_id}'"),
                        message,
                        part,
                        call_id=block.call_id,
                    )
                )
    if isinstance(block, SnippetBlock | CompressionBlock):
        # A compressed history or a snippet never gains an instruction's authority. A client's
        # directive noted in its place (a tool change: the anthropic SDK sends them in a
        # system message) carries no content to gain it.
        directive = isinstance(block, CompressionBlock) and not block.compaction
        instructions = message.role in ("system", "developer") and not directive
        if block.scope != block.role or instructions:
            out.append(
                violation(
                    SCOPE_CROSSING,
                    f"{block.kind} admitted as {block.scope} input sits in "
                    f"{a_role(message.role)} message",
                    message,
                    block,
                )
            )
    elif not _role_fits(message, block) and not isinstance(block, UnknownBlock):
        # (An unknown block is refused as one; the role an adapter guessed for it is not news.)
        out.append(
            violation(
                SCOPE_CROSSING,
                f"{block.role} block '{block.id}' sits in {a_role(message.role)} message",
                message,
                block,
            )
        )
    elif message.role != "assistant" and isinstance(block, ToolCallBlock | ReasoningBlock):
        # A client that merges runs of messages by mistake folds the assistant's calls (or
        # thinking) into a user message; Anthropic: "messages.0: `tool_use` blocks can only
        # be in `assistant` messages".
        out.append(
            violation(
                SCOPE_CROSSING,
                f"{block.kind} block '{block.id}' sits in {a_role(message.role)} message; only "
                "assistant messages hold the model's tool calls and reasoning",
                message,
                block,
            )
        )
    return out


def a_role(role: str) -> str:
    """``role`` with its article: "an assistant", "a user"."""
    return f"an {role}" if role == "assistant" else f"a {role}"


def _plain_result_fits(message: Message, block: ToolResultBlock) -> bool:
    """A result of text parts only, where its role may sit: ``_check_block`` finds nothing."""
    if message.role not in (block.role, "user"):
        return False
    return all(type(part) is TextBlock for part in block.content)


def _role_fits(message: Message, block: AnyBlock) -> bool:
    if block.role == message.role:
        return True
    # Results ride in user messages on APIs that carry them there.
    return isinstance(block, ToolResultBlock) and message.role == "user"


def _check_call(message: Message, block: ToolCallBlock, caps: Capabilities) -> Sequence[Violation]:
    call_id = block.call_id
    if (
        call_id
        and (caps.max_call_id_length is None or len(call_id) <= caps.max_call_id_length)
        and (caps.call_id_pattern is None or _compiled(caps.call_id_pattern).fullmatch(call_id))
        and block.argument_state == "complete"
        and (block.tool_type != "function" or block.arguments_are_an_object)
    ):
        return ()
    out: list[Violation] = []
    if not call_id:
        out.append(violation(INVALID_CALL_ID, "tool call has an empty call id", message, block))
    elif caps.max_call_id_length is not None and len(call_id) > caps.max_call_id_length:
        out.append(
            violation(
                INVALID_CALL_ID,
                f"tool call id '{call_id}' is longer than {caps.max_call_id_length} characters",
                message,
                block,
            )
        )
    elif caps.call_id_pattern is not None and not _compiled(caps.call_id_pattern).fullmatch(
        call_id
    ):
        out.append(
            violation(
                INVALID_CALL_ID,
                f"tool call id '{call_id}' does not match {caps.call_id_pattern}",
                message,
                block,
            )
        )
    if block.argument_state == "incomplete" or (
        block.tool_type == "function" and not block.arguments_are_an_object
    ):
        out.append(
            violation(
                INCOMPLETE_ARGUMENTS,
                f"tool call '{call_id}' ({block.name}) has arguments that are not one "
                "complete JSON object" + _hint_of(block),
                message,
                block,
            )
        )
    return out


# A capability's call-id pattern, compiled once (re.fullmatch looks it up in re's cache).
_compiled = cache(re.compile)

# Lives in codec (the model checks arguments once, when a call is built); adapters import
# it from here.
arguments_complete = codec.arguments_complete


def _duplicate_call_id(message: Message, block: ToolCallBlock) -> Violation:
    """Call ids are unique within a turn (a run of assistant messages)."""
    return violation(
        DUPLICATE_CALL_ID,
        f"tool call id '{block.call_id}' is used twice in one turn",
        message,
        block,
    )


def _reused_call_id(message: Message, block: ToolCallBlock, first: Message) -> Violation:
    """Where the API takes each call id once per request (``call_ids_unique``: Anthropic's
    tool_use ids), a later turn may not call an id again: a backend that numbers calls per
    turn (``call_0`` every time) breaks the second turn."""
    return violation(
        DUPLICATE_CALL_ID,
        f"tool call id '{block.call_id}' was used by an earlier turn ({first.location}); call "
        'ids must be unique across the request (Anthropic: "`tool_use` ids must be unique"): '
        "give each call its own id",
        message,
        block,
    )


# Where each API takes a turn's tool results, as a misplaced one is told.
_RESULT_PLACE: dict[str, str] = {
    "tool_messages": "one tool message per call, right after the assistant message that made "
    "the calls, before any other message",
    "next_turn_leading": "in the user message right after the calls, before any other block "
    'of it (Anthropic: "Each tool_use block must have a corresponding tool_result block in '
    'the next message.")',
    "next_turn": "in the content right after the calls, one response per call",
    "anywhere_after": "after its call",
}


class _Placement:
    """Walks the messages once, opening a result window after each assistant turn."""

    def __init__(self, seq: MessageSequence, caps: Capabilities):
        self.seq = seq
        self.caps = caps
        self.out: list[Violation] = []
        # Calls of the current window, waiting for their result.
        self.pending: dict[str, tuple[Message, ToolCallBlock]] = {}
        # Calls whose window closed unanswered, and calls already answered.
        self.closed: dict[str, tuple[Message, ToolCallBlock]] = {}
        self.answered: set[str] = set()

    def run(self) -> list[Violation]:
        window = self.caps.result_window
        messages = self.seq.messages
        previous: Message | None = None
        for message in messages:
            same_run = previous is not None and previous.role == message.role
            if message.role == "assistant":
                if not (same_run and self.caps.merges_runs) and window != "anywhere_after":
                    self._close_window()
                self._open(message)
            else:
                self._take_results(message, previous, same_run)
            previous = message
            if window == "next_turn" and message.role != "assistant":
                self._close_window()
            if (
                window == "anywhere_after"
                and message.role in ("user", "system", "developer")
                and any(not isinstance(b, ToolResultBlock) for b in message.blocks)
            ):
                self._close_window()
        self._end()
        return self.out

    def _open(self, message: Message) -> None:
        for block in message.blocks:
            if isinstance(block, ToolCallBlock) and block.call_id:
                stale = self.closed.pop(block.call_id, None)
                if stale is not None:
                    # The id is reused by a new call: the old call can no longer be answered.
                    self._missing(*stale)
                self.answered.discard(block.call_id)
                self.pending[block.call_id] = (message, block)

    def _take_results(self, message: Message, previous: Message | None, same_run: bool) -> None:
        window = self.caps.result_window
        leading = True
        for block in message.blocks:
            if not isinstance(block, ToolResultBlock):
                leading = False
                continue
            in_window = True
            if window == "tool_messages":
                in_window = message.role == "tool"
            elif window == "next_turn_leading":
                in_window = leading and (
                    previous is not None
                    and (previous.role == "assistant" or (same_run and self.caps.merges_runs))
                )
            elif window == "next_turn":
                in_window = previous is not None and previous.role == "assistant"
            self._result(message, block, in_window)
        if window == "tool_messages" and message.role != "tool":
            self._close_window()
        if window == "next_turn_leading" and not leading:
            self._close_window()

    def _result(self, message: Message, block: ToolResultBlock, in_window: bool) -> None:
        call_id = block.call_id
        if call_id in self.pending and in_window:
            _call_message, call = self.pending.pop(call_id)
            self.answered.add(call_id)
            if block.name is not None and block.name != call.name:
                self.out.append(
                    violation(
                        RESULT_MISMATCH,
                        f"tool result '{call_id}' names tool '{block.name}' but the call was "
                        f"to '{call.name}'",
                        message,
                        block,
                    )
                )
        elif call_id in self.answered:
            self.out.append(
                violation(
                    DUPLICATE_RESULT,
                    f"tool call '{call_id}' is answered more than once",
                    message,
                    block,
                )
            )
        elif call_id in self.pending or call_id in self.closed:
            self.closed.pop(call_id, None)
            self.pending.pop(call_id, None)
            self.answered.add(call_id)
            self.out.append(
                violation(
                    MISPLACED_RESULT,
                    f"tool result '{call_id}' is not where its call's results must be: "
                    + _RESULT_PLACE[self.caps.result_window],
                    message,
                    block,
                )
            )
        elif self.seq.history == "partial":
            # The call sits in the part of the history the provider holds (e.g. behind a
            # Responses previous_response_id): not an orphan, but still answerable once.
            self.answered.add(call_id)
        else:
            text = (
                f"tool result '{call_id}' answers no tool call"
                if call_id
                else "a tool result without its call's id answers no tool call (give it the "
                "id of the call it answers)"
            )
            self.out.append(violation(ORPHAN_RESULT, text, message, block))

    def _close_window(self) -> None:
        # A result arriving later is reported as misplaced; one that never does, as missing.
        self.closed.update(self.pending)
        self.pending = {}

    def _missing(self, message: Message, call: ToolCallBlock) -> None:
        self.out.append(
            violation(
                MISSING_RESULT,
                f"tool call '{call.call_id}' ({call.name}) has no result before the "
                "conversation moves on",
                message,
                call,
            )
        )

    def _end(self) -> None:
        for message, call in self.closed.values():
            self._missing(message, call)
        for call_id, (message, call) in self.pending.items():
            self.out.append(
                violation(
                    MISSING_RESULT,
                    f"tool call '{call_id}' ({call.name}) is waiting for its result",
                    message,
                    call,
                    waiting=True,
                )
            )


def _string_leaves(value: object) -> list[str]:
    """Every string in a structured result (Gemini's ``response`` is an object), in order."""
    out: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))
    return out


def _forgery(message: Message, block: AnyBlock) -> list[Violation]:
    if block.trust != "untrusted":
        return []
    marker = _first_marker(block)
    return [_forgery_violation(message, block, marker)] if marker else []


def _first_marker(block: AnyBlock) -> str | None:
    """The first role marker in the block's text: its own, its parts', then its value's."""
    from_tool = block.role == "tool"
    if isinstance(block, TextBlock | SnippetBlock):
        return forged_role_marker(block.text, from_tool=from_tool)
    if isinstance(block, ToolResultBlock):
        for part in block.content:
            if isinstance(part, TextBlock | SnippetBlock):
                marker = forged_role_marker(part.text, from_tool=from_tool)
                if marker:
                    return marker
        if block.value is not None:
            for text in _string_leaves(block.value):
                marker = forged_role_marker(text, from_tool=from_tool)
                if marker:
                    return marker
    return None


def _forgery_violation(message: Message, block: AnyBlock, marker: str) -> Violation:
    return violation(
        ROLE_FORGERY,
        f"{block.role} text in block '{block.id}' contains the role marker "
        f"{marker!r}; it stays {block.role} text",
        message,
        block,
    )

"""Anthropic Messages sequence rules (provider-rules.md §3.2).

The generic validator already places client tool results (``next_turn_leading``: every
result of an assistant turn in the next user turn, before any other block, runs of one role
merged as the API merges them). These rules add what only Anthropic enforces:

    anthropic_first_message_user   ``messages`` holds a message (system ones aside; a thread's
                                   continue carries only what follows the reply). Its name is
                                   from when Anthropic also refused a first assistant message
    anthropic_empty_content        no empty message but a final assistant one; no empty text block;
                                   no message of whitespace text alone; no failed tool's result
                                   (``is_error``) that says nothing
    anthropic_prefill_whitespace   (within anthropic_empty_content's pass) a final assistant
                                   message does not end with whitespace
    anthropic_prefill_unsupported  Claude 4.6 and later (by the request's model): the request
                                   does not end with an assistant message (a paused server-tool
                                   turn, a compaction or a call waiting for its result aside)
    anthropic_server_tool_result   a ``*_tool_result`` follows its ``server_tool_use`` in the same
                                   assistant turn, a server tool is never answered by tool_result,
                                   and no turn the conversation moved on from leaves a
                                   ``server_tool_use`` without its result
    anthropic_server_tool_id       (code ``invalid_call_id``) server tool ids match ``srvtoolu_…``
    anthropic_cache_breakpoints    at most 4 ``cache_control`` marks on tools, system blocks and
                                   message blocks together
    anthropic_cache_ttl_order      no 1-hour mark after a 5-minute one, in that order
    anthropic_tool_names_unique    no two tools (client or server) share a name
    anthropic_tool_name_pattern    a client tool's name is 1-128 of ``a-z A-Z 0-9 _ -``

Where thinking blocks may stand is in anthropic_thinking_blocks.py; the thinking and sampling
settings the model takes, in anthropic_settings.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, TypeGuard

from turngate.graph.history import is_compaction
from turngate.graph.model import (
    AnyBlock,
    Message,
    MessageSequence,
    ServerToolBlock,
    TextBlock,
    ToolCallBlock,
    ToolDef,
    ToolResultBlock,
)
from turngate.graph.rules import rule
from turngate.graph.validator import (
    INVALID_CALL_ID,
    Violation,
    violation,
)

FIRST_MESSAGE_USER = "anthropic_first_message_user"
EMPTY_CONTENT = "anthropic_empty_content"
PREFILL_WHITESPACE = "anthropic_prefill_whitespace"
SERVER_TOOL_RESULT = "anthropic_server_tool_result"
SERVER_TOOL_ID = "anthropic_server_tool_id"
PREFILL_UNSUPPORTED = "anthropic_prefill_unsupported"
THINKING_FORCED_TOOL = "anthropic_thinking_forced_tool"
TOOL_CHOICE = "anthropic_tool_choice"
CACHE_BREAKPOINTS = "anthropic_cache_breakpoints"
CACHE_TTL_ORDER = "anthropic_cache_ttl_order"
TOOL_NAMES_UNIQUE = "anthropic_tool_names_unique"
TOOL_NAME_PATTERN = "anthropic_tool_name_pattern"
_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,128}").fullmatch
MAX_CACHE_BREAKPOINTS = 4

SERVER_TOOL_ID_PATTERN = re.compile(r"srvtoolu_[a-zA-Z0-9_]+")
# A Claude model's version from its id: "claude-sonnet-4-6", "claude-opus-4-7@20260101",
# "claude-fable-5-1"; a minor of one or two digits, so that "claude-sonnet-4-20250514" is 4.0.
_CLAUDE_VERSION = re.compile(r"claude-([a-z]+)-(\d+)(?:-(\d{1,2})(?!\d))?")
# The 3.x names, which put the version before the family: "claude-3-5-haiku-20241022".
_CLAUDE_3 = re.compile(r"claude-3(?:-[57])?-[a-z]+")
_PREFILL_TEXT = (
    "This model does not support assistant message prefill. The conversation must end with a "
    "user message."
)
_INSTRUCTIONS = ("system", "developer")


def conversation_of(seq: MessageSequence) -> list[Message]:
    return [m for m in seq.messages if m.role not in _INSTRUCTIONS]


def entries_of(seq: MessageSequence) -> list[list[Message]]:
    """Messages grouped by the list entry they came from (a ``mid_conv_system`` block splits
    one entry into several graph messages with the same index)."""
    groups: list[list[Message]] = []
    for message in seq.messages:
        if message.origin == "system":
            continue
        last = groups[-1][0] if groups else None
        if last is not None and (last.origin, last.index) == (message.origin, message.index):
            groups[-1].append(message)
        else:
            groups.append([message])
    return groups


@rule(FIRST_MESSAGE_USER)
def first_message_user(seq: MessageSequence) -> list[Violation]:
    """An empty conversation. A first assistant message (a seeded greeting, a history trimmed
    to fit) is taken: Anthropic's API answers it since late 2024 (anthropic-sdk-typescript
    #622, where only Bedrock still said "messages: first message must use the "user"
    role")."""
    # A thread's continue (partial history) may carry nothing: the server holds the rest.
    if seq.history == "partial" or conversation_of(seq):
        return []
    words = 'the request has no messages; Anthropic: "messages: at least one message is required"'
    return [violation(FIRST_MESSAGE_USER, words, None)]


@rule(EMPTY_CONTENT)
def empty_content(seq: MessageSequence) -> list[Violation]:
    out = _empty_system_texts(seq)
    entries = entries_of(seq)
    silent = [_says_nothing(entry) for entry in entries]
    for position, entry in enumerate(entries):
        host = entry[0]
        blocks = [b for m in entry for b in m.blocks]
        final_assistant = position == len(entries) - 1 and host.role == "assistant"
        # A system message of no content that sets output_config is the directive-only form
        # Anthropic takes at any position ("content: [] with output_config").
        directive = host.role == "system" and "output_config" in host.attrs
        if silent[position] and not final_assistant and not directive:
            if host.role != "user":
                words = "every message but a final assistant one must have non-empty content"
            elif _run_answers_for(entries, silent, position):
                words = ""
            else:
                words = (
                    f'Anthropic: "messages.{host.index}: user messages must have non-empty '
                    'content" (give it content, or drop it)'
                )
            if words:
                out.append(
                    violation(
                        EMPTY_CONTENT, f"{host.role} message has empty content; {words}", host
                    )
                )
        blank = _blank_text(blocks)
        if blank is not None:
            out.append(
                violation(
                    EMPTY_CONTENT,
                    f'{host.role} message holds only whitespace text; Anthropic: "text content '
                    'blocks must contain non-whitespace text" (drop the message)',
                    host,
                    blank,
                )
            )
        elif final_assistant and _ends_in_whitespace(blocks):
            out.append(
                violation(
                    PREFILL_WHITESPACE,
                    "the final assistant message (a prefill) ends with whitespace; Anthropic: "
                    '"final assistant content cannot end with trailing whitespace"',
                    host,
                    blocks[-1],
                )
            )
        for message in entry:
            if message.shape == "string":
                continue
            for block in message.blocks:
                if _says_nothing_of_its_failure(block):
                    out.append(_empty_error_result(message, block))
                for empty in _empty_texts(block):
                    out.append(
                        violation(
                            EMPTY_CONTENT,
                            f"text block '{empty.id}' is empty; "
                            + _empty_text_words(empty, "text content blocks must be non-empty"),
                            message,
                            empty,
                            call_id=getattr(block, "call_id", None),
                        )
                    )
    return out


def _says_nothing(entry: list[Message]) -> bool:
    """No block at all, or a string content of ``""``."""
    host = entry[0]
    if not any(m.blocks for m in entry):
        return True
    return (
        host.shape == "string"
        and len(host.blocks) == 1
        and isinstance(host.blocks[0], TextBlock)
        and host.blocks[0].text == ""
    )


def _run_answers_for(entries: list[list[Message]], silent: list[bool], at: int) -> bool:
    """Whether the empty user message ``at`` needs no refusal of its own: its run of user
    messages (which Anthropic merges into one turn) is refused at an earlier empty one, as
    Anthropic reports a run at its first, or another message of the run has content, and
    Anthropic answers the turn (measured against claude-sonnet-5, 2026-08-31: ``[user "a",
    user []]`` answered 200)."""
    if at > 0 and silent[at - 1] and entries[at - 1][0].role == "user":
        return True
    for step in (-1, 1):
        position = at + step
        while 0 <= position < len(entries) and entries[position][0].role == "user":
            if not silent[position]:
                return True
            position += step
    return False


def _empty_text_words(block: AnyBlock, plain: str) -> str:
    """Anthropic's words for an empty text block: ``plain``, or its own for one marked for
    the cache (a client that caches a prompt it left unset, or a turn that came back empty)."""
    if "cache_control" in block.attrs:
        return (
            'Anthropic: "text: cache_control cannot be set for empty text blocks" (drop the '
            "block, or mark the block before it)"
        )
    return plain


_EMPTY_SYSTEM = (
    'Anthropic: "system: text content blocks must be non-empty" (drop the block, or leave '
    "system out)"
)


def _empty_system_texts(seq: MessageSequence) -> list[Violation]:
    """Empty text blocks in a ``system`` list: "system: text content blocks must be
    non-empty" (a client that sends an unset prompt as one empty block)."""
    return [
        violation(
            EMPTY_CONTENT,
            f"system text block '{block.id}' is empty; " + _empty_text_words(block, _EMPTY_SYSTEM),
            message,
            block,
        )
        for message in seq.messages
        if message.origin == "system" and message.shape != "string"
        for block in message.blocks
        if isinstance(block, TextBlock) and block.text == ""
    ]


def claude_version(model: str | None) -> tuple[int, int] | None:
    """A Claude model's (major, minor) from its id; None for the 3.x names
    ("claude-3-7-sonnet") and any other model."""
    found = claude_family(model)
    return found[1:] if found is not None else None


def claude_family(model: str | None) -> tuple[str, int, int] | None:
    """A Claude model's (family, major, minor) from its id: ("opus", 4, 1)."""
    version = _CLAUDE_VERSION.search(model or "")
    if version is None:
        return None
    return version.group(1), int(version.group(2)), int(version.group(3) or 0)


def claude_3_name(model: str | None) -> str | None:
    """A Claude 3.x model's name without its date ("claude-3-5-haiku"); None for any other."""
    found = _CLAUDE_3.search(model or "")
    return found.group(0) if found is not None else None


def _refuses_prefill(model: str | None) -> bool:
    """Claude 4.6 and later take no prefill; 4.5 and older (and the 3.x names) do."""
    version = claude_version(model)
    return version is not None and version >= (4, 6)


@rule(PREFILL_UNSUPPORTED)
def prefill_unsupported(seq: MessageSequence) -> list[Violation]:
    if seq.history == "partial" or not _refuses_prefill(seq.model):
        return []
    entries = entries_of(seq)
    if not entries or entries[-1][0].role != "assistant":
        return []
    last = entries[-1][0]
    blocks = [b for m in entries[-1] for b in m.blocks]
    # A paused server-tool turn (pause_turn) and a compaction (pause_after_compaction, the
    # SDK's tool runner) are continued so; a call left waiting for its result is reported
    # as such.
    if any(isinstance(b, (ToolCallBlock, ServerToolBlock)) or is_compaction(b) for b in blocks):
        return []
    return [
        violation(
            PREFILL_UNSUPPORTED,
            f"the request ends with an assistant message (a prefill), which {seq.model} "
            f'refuses: "{_PREFILL_TEXT}" (ask for the format in the user message instead)',
            last,
        )
    ]


def _blank_text(blocks: list[AnyBlock]) -> TextBlock | None:
    """The first text of a message that holds only text, all of it whitespace (an empty one
    is reported as empty). Anthropic takes a whitespace text beside other text, and beside
    tool calls (a recorded request: `" "` before two tool_use blocks)."""
    if not blocks or not all(isinstance(b, TextBlock) for b in blocks):
        return None
    texts = [b for b in blocks if isinstance(b, TextBlock)]
    if any(t.text.strip() for t in texts):
        return None
    return next((t for t in texts if t.text), None)


def _ends_in_whitespace(blocks: list[AnyBlock]) -> bool:
    last = blocks[-1] if blocks else None
    return isinstance(last, TextBlock) and last.text != last.text.rstrip()


def _says_nothing_of_its_failure(block: AnyBlock) -> TypeGuard[ToolResultBlock]:
    """A tool result marked ``is_error`` whose content is empty: "", [], null or none (a
    content Anthropic cannot read is left to it)."""
    if not isinstance(block, ToolResultBlock) or block.status != "error":
        return False
    if block.attrs.get("$content") == "string":
        return all(isinstance(part, TextBlock) and part.text == "" for part in block.content)
    return not block.content and block.attrs.get("content") is None


def _empty_error_result(message: Message, block: ToolResultBlock) -> Violation:
    # A denied permission or a crashed tool: the agent SDKs send is_error with nothing said.
    return violation(
        EMPTY_CONTENT,
        f"the result of call '{block.call_id}' marks a failure (is_error) and says nothing; "
        'Anthropic: "tool_result: content cannot be empty if `is_error` is true" (say in '
        "the result what failed)",
        message,
        block,
        call_id=block.call_id,
    )


def _empty_texts(block: AnyBlock) -> Iterator[TextBlock]:
    if isinstance(block, TextBlock) and block.text == "":
        yield block
    # ``$content: string`` is the adapter's note that the result was sent as a plain string:
    # an empty string there is an empty result, not an empty text block.
    elif isinstance(block, ToolResultBlock) and block.attrs.get("$content") != "string":
        for part in block.content:
            if isinstance(part, TextBlock) and part.text == "":
                yield part


@rule(SERVER_TOOL_RESULT)
def server_tool_results(seq: MessageSequence) -> list[Violation]:
    out: list[Violation] = []
    server_calls: set[str] = set()
    # A call whose result sits elsewhere (a user message, a later turn) is reported there.
    answered: set[str] = set()
    for _m, b in seq.blocks():
        if isinstance(b, ServerToolBlock) and b.call_id:
            (server_calls if b.phase == "call" else answered).add(b.call_id)
    loop_calls: set[str] = set()
    # The loop's calls whose result has not come yet (a turn that mixes server and client
    # tools runs its server calls after the client's results: they resolve later in the loop).
    unresolved: dict[str, tuple[Message, ServerToolBlock]] = {}
    for message in conversation_of(seq):
        if message.role == "user" and not any(
            isinstance(b, ToolResultBlock) for b in message.blocks
        ):
            out.extend(_left_unresolved(unresolved, answered))
            loop_calls = set()
            unresolved = {}
        for block in message.blocks:
            if isinstance(block, ServerToolBlock) and block.call_id:
                if block.phase == "call":
                    loop_calls.add(block.call_id)
                    unresolved[block.call_id] = (message, block)
                elif message.role != "assistant":
                    out.append(
                        violation(
                            SERVER_TOOL_RESULT,
                            f"server tool result {block.name} '{block.call_id}' sits in a "
                            f"{message.role} message; it belongs to the assistant turn that "
                            "made the call",
                            message,
                            block,
                        )
                    )
                elif block.call_id not in loop_calls:
                    out.append(
                        violation(
                            SERVER_TOOL_RESULT,
                            f"server tool result {block.name} '{block.call_id}' has no "
                            "server_tool_use before it in the same assistant turn",
                            message,
                            block,
                        )
                    )
                else:
                    unresolved.pop(block.call_id, None)
            elif isinstance(block, ToolResultBlock) and block.call_id in server_calls:
                out.append(
                    violation(
                        SERVER_TOOL_RESULT,
                        f"tool_result '{block.call_id}' answers a server tool call; the "
                        "provider runs server tools and returns their results itself",
                        message,
                        block,
                    )
                )
    return out


def _left_unresolved(
    unresolved: dict[str, tuple[Message, ServerToolBlock]], answered: set[str]
) -> Iterator[Violation]:
    """The server calls of an assistant turn the conversation moved on from without their
    results (Anthropic: "`code_execution` tool use with id … was found without a
    corresponding `code_execution_tool_result` block")."""
    for call_id, (message, block) in unresolved.items():
        if call_id in answered:
            continue
        yield violation(
            SERVER_TOOL_RESULT,
            f"server tool call {block.name} '{call_id}' has no result in its assistant turn, "
            "and a user message moved the conversation on without it",
            message,
            block,
        )


@rule(SERVER_TOOL_ID)
def server_tool_ids(seq: MessageSequence) -> list[Violation]:
    out: list[Violation] = []
    for message, block in seq.blocks():
        if (
            isinstance(block, ServerToolBlock)
            and block.phase == "call"
            and block.call_id is not None
            and "$type" not in block.attrs  # mcp_tool_use ids are not srvtoolu_
            and not SERVER_TOOL_ID_PATTERN.fullmatch(block.call_id)
        ):
            out.append(
                violation(
                    INVALID_CALL_ID,
                    f"server tool id '{block.call_id}' does not match "
                    f"^{SERVER_TOOL_ID_PATTERN.pattern}$",
                    message,
                    block,
                )
            )
    return out


@rule(TOOL_CHOICE)
def tool_choice_undeclared(seq: MessageSequence) -> list[Violation]:
    """``tool_choice`` forces a tool by a name the request's tools do not declare (a tool
    filtered out of this turn, a server tool not offered), forces a tool without naming it
    (Cursor's ``{"type": "tool"}``, which gateways drop or rewrite for this refusal), or
    forces ``any`` tool with none declared. ``auto`` and ``none`` with no tools are taken."""
    kind, choice = _tool_choice(seq)
    if kind == "any" and not seq.tools:
        return [
            violation(
                TOOL_CHOICE,
                'tool_choice is "any" but the request declares no tools; Anthropic: '
                '"tool_choice.any may only be specified while providing tools" (leave it out of '
                "a turn whose tools were all filtered out)",
                None,
            )
        ]
    if kind == "tool" and "name" not in choice:
        return [
            violation(
                TOOL_CHOICE,
                'tool_choice is {"type": "tool"} without the tool\'s name; Anthropic: '
                '"tool_choice.tool.name: Field required" (name the tool to force, or send '
                '{"type": "any"} to force any tool)',
                None,
            )
        ]
    name = choice.get("name") if kind == "tool" else None
    if not isinstance(name, str) or any(tool.name == name for tool in seq.tools):
        return []
    return [
        violation(
            TOOL_CHOICE,
            f"tool_choice forces the tool {name!r}, which the request's tools do not declare; "
            f"Anthropic: \"tool_choice.name: Tool '{name}' not found in provided tools\" "
            "(declare it, or let the model choose)",
            None,
        )
    ]


@rule(THINKING_FORCED_TOOL)
def thinking_with_forced_tool(seq: MessageSequence) -> list[Violation]:
    """Thinking enabled with a budget while ``tool_choice`` forces a tool (``any``, or a
    named ``tool``): a structured-output call given a thinking model. Adaptive thinking is
    left to Anthropic."""
    forced, _choice = _tool_choice(seq)
    if thinking_type(seq) != "enabled" or forced not in ("any", "tool"):
        return []
    return [
        violation(
            THINKING_FORCED_TOOL,
            f'thinking is enabled and tool_choice forces a tool (type "{forced}"); Anthropic: '
            '"Thinking may not be enabled when tool_choice forces tool use." (use tool_choice '
            "auto with thinking, or send this call without thinking)",
            None,
        )
    ]


def _tool_choice(seq: MessageSequence) -> tuple[object, dict[str, Any]]:
    """The ``tool_choice``'s type and the choice itself ({} when there is none)."""
    choice = seq.envelope.get("tool_choice")
    return (choice.get("type"), choice) if isinstance(choice, dict) else (None, {})


def thinking_type(seq: MessageSequence) -> str | None:
    config = seq.envelope.get("thinking") if seq.api == "anthropic" else None
    kind = config.get("type") if isinstance(config, dict) else None
    return kind if isinstance(kind, str) else None


@rule(CACHE_BREAKPOINTS)
def cache_breakpoints(seq: MessageSequence) -> list[Violation]:
    """Marks on tool definitions, system blocks and message blocks count; those nested in a
    tool_result's content and the request's own ``cache_control`` are left to Anthropic."""
    marked_tools = sum(1 for t in seq.tools if isinstance(t.attrs.get("cache_control"), dict))
    marked = [(m, b) for m, b in seq.blocks() if isinstance(b.attrs.get("cache_control"), dict)]
    found = marked_tools + len(marked)
    if found <= MAX_CACHE_BREAKPOINTS:
        return []
    message, block = marked[-1] if marked else (None, None)
    return [
        violation(
            CACHE_BREAKPOINTS,
            f"{found} blocks carry cache_control ({marked_tools} tool definition(s), "
            f'{len(marked)} content block(s)); Anthropic: "A maximum of '
            f'{MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. Found {found}." '
            "(keep the marks on the last tool, the system prompt and the newest turns)",
            message,
            block,
        )
    ]


@rule(CACHE_TTL_ORDER)
def cache_ttl_order(seq: MessageSequence) -> list[Violation]:
    """Anthropic reads the marks in prefix order (tools, system, messages) and refuses a
    longer TTL after a shorter one: a gateway's own 5-minute marks injected before a
    caller's 1-hour ones (llmgateway PR #2629, vellum-assistant PR #22191). A mark without a
    ``ttl`` is 5 minutes; marks nested in a tool_result are left to Anthropic, as above."""
    short: str | None = None
    marks: list[tuple[Message | None, AnyBlock | None, object, str]] = [
        (None, None, t.attrs.get("cache_control"), f"tool {t.name!r}") for t in seq.tools
    ]
    marks += [(m, b, b.attrs.get("cache_control"), f"block '{b.id}'") for m, b in seq.blocks()]
    for message, block, mark, where in marks:
        if not isinstance(mark, dict):
            continue
        if mark.get("ttl", "5m") == "5m":
            short = short or where
        elif mark.get("ttl") == "1h" and short is not None:
            return [
                violation(
                    CACHE_TTL_ORDER,
                    f"the 1-hour cache mark on {where} comes after the 5-minute one on {short}; "
                    "Anthropic: \"a ttl='1h' cache_control block must not come after a "
                    "ttl='5m' cache_control block\" (longer TTLs first, in the order tools, "
                    "system, messages: give the earlier marks 1h, or this one 5m)",
                    message,
                    block,
                )
            ]
    return []


def _declared_name(tool: ToolDef) -> str | None:
    """The name a tool is declared under; a toolset declares none (its type stands in)."""
    if tool.tool_type != "hosted":
        return tool.name
    native = tool.attrs.get("$native")
    name = native.get("name") if isinstance(native, dict) else None
    return name if isinstance(name, str) else None


@rule(TOOL_NAMES_UNIQUE)
def tool_names_unique(seq: MessageSequence) -> list[Violation]:
    seen: dict[str, int] = {}
    out: list[Violation] = []
    for position, tool in enumerate(seq.tools):
        name = _declared_name(tool)
        if name is None:
            continue
        first = seen.setdefault(name, position)
        if first != position:
            out.append(
                violation(
                    TOOL_NAMES_UNIQUE,
                    f"tools[{position}] and tools[{first}] are both named '{name}'; Anthropic: "
                    '"tools: Tool names must be unique." (a server tool such as web_search '
                    "takes its name too: rename the client tool)",
                    None,
                )
            )
    return out


@rule(TOOL_NAME_PATTERN)
def tool_names_outside_pattern(seq: MessageSequence) -> list[Violation]:
    return [
        violation(
            TOOL_NAME_PATTERN,
            f"tool {tool.name!r} is declared under a name Anthropic refuses; Anthropic: "
            f'"tools.{position}.custom.name: String should match pattern '
            "'^[a-zA-Z0-9_-]{1,128}$'\" (an MCP server's 'server.tool' or 'server/tool' "
            "names: replace the dot or slash)",
            None,
        )
        for position, tool in enumerate(seq.tools)
        if tool.tool_type == "function" and _TOOL_NAME(tool.name) is None
    ]

"""OpenAI Responses rules the generic validator does not know.

* ``responses_reasoning_unbound``: a reasoning item is bound to the output item that
  followed it when the model produced it. It must be followed *immediately* by an
  assistant-side item (a message, a function or custom tool call, a hosted tool call),
  never be the last input item, and, when it carries its ``rs_…`` id, the item after it
  must carry its own id too: the provider ties the two by id, so a rewritten easy-form
  message cannot stand in. The provider refuses each with "Item 'rs_…' of type
  'reasoning' was provided without its required following item." (400).
* ``responses_output_type_mismatch``: ``function_call_output`` answers a
  ``function_call`` and ``custom_tool_call_output`` a ``custom_tool_call``; the provider
  looks the call up by ``call_id`` among calls of its own kind.
* ``responses_reasoning_missing`` (run by the proxy, which remembers the answers it
  relayed: proxy/replies.py): an item sent back by its id without the reasoning item that
  came right before it in the answer; the provider, which stored both, refuses it: "Item
  'fc_…' of type 'function_call' was provided without its required 'reasoning' item".
* ``responses_duplicate_item``: two input items carry one ``id`` (a reasoning item, a call
  or a message sent twice); the provider refuses it: "Duplicate item found with id rs_…".
  Outputs are not counted: some name their call by ``id``.
* ``responses_item_id_prefix``: an input item's ``id`` must begin with its type's prefix
  (``msg`` for a message, ``rs`` for reasoning, ``fc`` for a function call, ``ctc`` for a
  custom tool call); the provider refuses any other: "Invalid 'input[3].id': 'call_…'.
  Expected an ID that begins with 'fc'." Clients that put a call's ``call_id`` in its ``id``,
  or give messages ids of their own, meet it on every later turn.
* ``responses_item_not_stored``: with ``store: false`` the provider looks no item up by its
  id, so a reasoning item sent back without its ``encrypted_content``, or an
  ``item_reference``, names something it cannot find: "Item with id 'rs_…' not found. Items
  are not persisted when `store` is set to false." (a 404). Agents that run with ``store:
  false`` and drop the encrypted reasoning meet it on the turn after the model thinks.
* ``responses_tool_name_pattern`` (code ``responses_name_pattern``, a request rule): a
  function or custom tool declared under a name OpenAI refuses: characters other than
  ``a-z A-Z 0-9 _ -``, as in Chat, or longer than 128 (Chat's limit is 64).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from turngate.graph.model import (
    ITEM_NOTE,
    AnyBlock,
    CompressionBlock,
    Message,
    MessageSequence,
    ReasoningBlock,
    RefusalBlock,
    ServerToolBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from turngate.graph.rules import rule
from turngate.graph.rules.openai_chat import declared_names_refused
from turngate.graph.validator import Violation, violation

REASONING_UNBOUND = "responses_reasoning_unbound"
OUTPUT_TYPE_MISMATCH = "responses_output_type_mismatch"
DUPLICATE_ITEM = "responses_duplicate_item"
MISSING_REASONING = "responses_reasoning_missing"
ID_PREFIX = "responses_item_id_prefix"
NOT_STORED = "responses_item_not_stored"
NAME_PATTERN = "responses_name_pattern"

_CALL_TYPES = {"function": "function_call", "custom": "custom_tool_call"}
_OUTPUT_TYPES = {"function": "function_call_output", "custom": "custom_tool_call_output"}


@rule(REASONING_UNBOUND)
def reasoning_unbound(seq: MessageSequence) -> list[Violation]:
    out: list[Violation] = []
    items = [m for m in seq.messages if m.origin == "input"]
    for position, message in enumerate(items):
        for block in message.blocks:
            if not isinstance(block, ReasoningBlock):
                continue
            rs_id = block.attrs.get("id")
            name = f"reasoning item '{rs_id}'" if isinstance(rs_id, str) else "reasoning item"
            following = items[position + 1] if position + 1 < len(items) else None
            problem = _binding_problem(following, has_id=isinstance(rs_id, str))
            if problem:
                out.append(
                    violation(
                        REASONING_UNBOUND,
                        f"{name} is not immediately followed by the item it belongs to: {problem}",
                        message,
                        block,
                    )
                )
    return out


def _binding_problem(following: Message | None, *, has_id: bool) -> str | None:
    if following is None:
        return "it is the last input item"
    if following.role != "assistant" or not following.blocks:
        return f"{following.location} is a {following.role} item"
    first = following.blocks[0]
    if isinstance(first, ReasoningBlock):
        return f"{following.location} is another reasoning item"
    if isinstance(first, CompressionBlock):
        # An item_reference names a stored item we cannot see: it may well be the follower.
        if first.attrs.get("$item") == "item_reference":
            return None
        return f"{following.location} is a compaction item"
    if isinstance(first, ServerToolBlock) and first.phase != "call":
        return f"{following.location} is a hosted tool result"
    if not isinstance(first, TextBlock | RefusalBlock | ToolCallBlock | ServerToolBlock):
        return f"{following.location} is a {first.kind} item"
    if has_id and _item_id(following) is None:
        return (
            f"{following.location} carries no item id, so it cannot be the output item the "
            "reasoning was produced with (replay output items unchanged, ids included)"
        )
    return None


def _item_id(message: Message) -> str | None:
    """The ``id`` an input item carries: its one block's (a reasoning item, a call, an
    output) or a message's own. An ``item_reference`` names another item and has none."""
    value = (
        message.blocks[0].attrs.get("id") if message.shape == "item" else message.attrs.get("id")
    )
    return value if isinstance(value, str) else None


@rule(OUTPUT_TYPE_MISMATCH)
def output_type_mismatch(seq: MessageSequence) -> list[Violation]:
    out: list[Violation] = []
    calls: dict[str, ToolCallBlock] = {}
    for message, block in seq.blocks():
        if isinstance(block, ToolCallBlock):
            calls.setdefault(block.call_id, block)
            continue
        if not isinstance(block, ToolResultBlock):
            continue
        call = calls.get(block.call_id)
        output_type = block.attrs.get("type")
        if call is None or not isinstance(output_type, str):
            continue
        if output_type == _OUTPUT_TYPES[call.tool_type]:
            continue
        out.append(
            violation(
                OUTPUT_TYPE_MISMATCH,
                f"{output_type} '{block.call_id}' answers a {_CALL_TYPES[call.tool_type]} "
                f"({call.name}); it must be a {_OUTPUT_TYPES[call.tool_type]}",
                message,
                block,
            )
        )
    return out


def _own_id(item: Message) -> str | None:
    """The id of a message, a reasoning item or a call: each names the item itself. An
    output's may name its call (``local_shell_call_output.id`` is the call's), so outputs
    are not counted."""
    if item.shape == "item" and not isinstance(item.blocks[0], ReasoningBlock | ToolCallBlock):
        return None
    return _item_id(item)


@rule(DUPLICATE_ITEM)
def duplicate_items(seq: MessageSequence) -> list[Violation]:
    out: list[Violation] = []
    first_at: dict[str, Message] = {}
    for item in seq.messages:
        if item.origin != "input":
            continue
        item_id = _own_id(item)
        if not item_id:
            continue
        first = first_at.setdefault(item_id, item)
        if first.index != item.index:
            out.append(
                violation(
                    DUPLICATE_ITEM,
                    f"item '{item_id}' is sent twice, first at {first.location}; OpenAI: "
                    f'"Duplicate item found with id {item_id}. Remove duplicate items from your '
                    'input and try again."',
                    item,
                    item.blocks[0] if item.blocks else None,
                )
            )
    return out


# What each input item's ``id`` must begin with, by the item's type.
_ID_PREFIXES = {
    "message": "msg",
    "reasoning": "rs",
    "function_call": "fc",
    "custom_tool_call": "ctc",
}


def _id_type(item: Message) -> str | None:
    """The type of an item whose ``id`` OpenAI checks the prefix of; None for the rest (an
    output, whose message the adapter shapes as its text or parts, a hosted call)."""
    block = item.blocks[0] if item.blocks else None
    if item.shape != "item":
        return None if isinstance(block, ToolResultBlock) else "message"
    if isinstance(block, ReasoningBlock):
        return "reasoning"
    if isinstance(block, ToolCallBlock):
        return _CALL_TYPES[block.tool_type]
    return None


@rule(ID_PREFIX)
def item_id_prefixes(seq: MessageSequence) -> list[Violation]:
    out: list[Violation] = []
    for item in seq.messages:
        item_id = _item_id(item) if item.origin == "input" else None
        item_type = None if item_id is None else _id_type(item)
        if item_id is None or item_type is None:
            continue
        prefix = _ID_PREFIXES[item_type]
        if item_id.startswith(prefix):
            continue
        expected = (
            f"Expected an ID that begins with '{prefix}'."
            if item_id
            else "Expected an ID that contains letters, numbers, underscores, or dashes"
        )
        out.append(
            violation(
                ID_PREFIX,
                f"{item_type} item has id {item_id[:64]!r}, which does not begin with "
                f"'{prefix}'; OpenAI: \"Invalid '{item.location}.id': '{item_id[:64]}'. "
                f'{expected}" (send the id the answer gave the item, or leave the id out)',
                item,
                item.blocks[0] if item.blocks else None,
            )
        )
    return out


_REASONING_FIX = (
    "send it with its encrypted_content, asked for with include: "
    "['reasoning.encrypted_content'], or leave it out"
)
_REFERENCE_FIX = "send the item itself, or leave the reference out"


@rule(NOT_STORED)
def items_not_stored(seq: MessageSequence) -> list[Violation]:
    if seq.envelope.get("store") is not False:
        return []
    out: list[Violation] = []
    for item in seq.messages:
        if item.origin != "input" or item.shape != "item":
            continue
        block = item.blocks[0]
        if isinstance(block, ReasoningBlock) and block.payload is None:
            named, fix = _item_id(item), _REASONING_FIX
        elif isinstance(block, CompressionBlock) and block.attrs.get(ITEM_NOTE) == "item_reference":
            named, fix = block.payload, _REFERENCE_FIX
        else:
            continue
        if not isinstance(named, str):
            continue
        out.append(
            violation(
                NOT_STORED,
                f"item '{named}' can only be found by its id, and with store: false OpenAI "
                f"keeps no items: \"Item with id '{named}' not found. Items are not persisted "
                f'when `store` is set to false." ({fix})',
                item,
                block,
            )
        )
    return out


def reasoning_bindings(blocks: Sequence[AnyBlock]) -> dict[str, str]:
    """An answer's output item ids -> the id of the reasoning item right before each: the
    provider stores the two together and requires the reasoning wherever the item goes back."""
    bound: dict[str, str] = {}
    reasoning: str | None = None
    for block in blocks:
        item_id = block.attrs.get("id")
        if not isinstance(item_id, str):
            reasoning = None
        elif isinstance(block, ReasoningBlock):
            reasoning = item_id
        else:
            if reasoning is not None:
                bound[item_id] = reasoning
            reasoning = None
    return bound


def returned_items(seq: MessageSequence) -> list[tuple[Message, str | None]]:
    """The input items of ``seq``, each with its id, when the provider checks them against
    the items it stored (``store`` not false, nothing it holds chained to); else none."""
    if seq.envelope.get("store") is False or seq.history != "complete":
        return []
    return [(m, _item_id(m)) for m in seq.messages if m.origin == "input"]


def missing_reasoning(
    seq: MessageSequence, required: Callable[[str], str | None]
) -> list[Violation]:
    """Items of ``seq`` sent back by id without the reasoning item ``required`` names for
    them (None or "": none). Only for a request whose items the provider stored (``store``
    not false) and that chains to nothing it holds."""
    items = returned_items(seq)
    sent = {item_id for _item, item_id in items if item_id}
    out: list[Violation] = []
    for item, item_id in items:
        reasoning = required(item_id) if item_id else None
        if not reasoning or reasoning in sent:
            continue
        kind = item.blocks[0].attrs.get("type", "item") if item.blocks else "item"
        out.append(
            violation(
                MISSING_REASONING,
                f"item '{item_id}' came right after reasoning item '{reasoning}' in the answer "
                f"turngate relayed, and is sent back without it; OpenAI: \"Item '{item_id}' of "
                f"type '{kind}' was provided without its required 'reasoning' item: "
                f"'{reasoning}'.\" (send the reasoning item back before it, or leave out the "
                "items' ids)",
                item,
                item.blocks[0] if item.blocks else None,
            )
        )
    return out


@rule("responses_tool_name_pattern")
def tool_names_outside_pattern(seq: MessageSequence) -> list[Violation]:
    return declared_names_refused(seq, NAME_PATTERN, ("function", "custom"), "tools[{}].name", 128)

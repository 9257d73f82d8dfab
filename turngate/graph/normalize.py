"""Fitting a graph parsed from one API to another API's rules before it is rendered.

Rendering across providers never drops or merges content into strings. It may only:
  * move tool results to where the target API requires them (``place_results``),
  * rewrite call ids the target would refuse (``fit_call_ids``),
and each such change is recorded on the graph as a ``Normalization``. A block the target
cannot carry at all is refused with ``unsupported_in_target`` (``check_carriable``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Iterable
from typing import Any

from turngate.errors import UnsupportedInTarget
from turngate.graph.capabilities import Capabilities
from turngate.graph.model import (
    AnyBlock,
    CompressionBlock,
    Message,
    MessageSequence,
    Normalization,
    ReasoningBlock,
    ServerToolBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)

_OUTPUT_KEYS = ("output", "content", "result")


def fit_to(seq: MessageSequence, caps: Capabilities) -> MessageSequence:
    """``seq`` made ready for rendering to ``caps.api``: carriable, results placed, ids fitted."""
    check_carriable(seq, caps)
    return fit_call_ids(place_results(seq, caps), caps)


def check_carriable(seq: MessageSequence, caps: Capabilities) -> None:
    for message, block in seq.blocks():
        reason = _uncarriable(block, caps)
        if reason is None and isinstance(block, ToolResultBlock):
            for part in block.content:
                reason = _uncarriable(part, caps)
                if reason:
                    break
        if reason:
            raise UnsupportedInTarget(
                f"turngate: {reason} (block '{block.id}', {message.location}) cannot be sent "
                f"to {caps.api}; it is refused rather than dropped"
            )


def _uncarriable(block: AnyBlock, caps: Capabilities) -> str | None:
    if block.kind not in caps.block_kinds:
        return f"a {block.kind} block"
    if (
        isinstance(block, ReasoningBlock | ServerToolBlock | CompressionBlock)
        and block.provider != caps.api
    ):
        return f"a {block.kind} block signed by or bound to {block.provider}"
    return None


def place_results(seq: MessageSequence, caps: Capabilities) -> MessageSequence:
    """Regroup each assistant turn's tool results the way ``caps.result_window`` requires.

    Results follow their turn in call order: one ``tool`` message each (Chat and Responses),
    or all in one ``user`` message ahead of any other block (Anthropic, Gemini). Whatever
    else sat in the messages that carried them follows, unchanged, in a message of its own.
    """
    taken: set[str] = set()
    out: list[Message] = []
    notes: list[Normalization] = list(seq.normalizations)
    turn_calls: list[ToolCallBlock] = []
    messages = seq.messages
    for position, message in enumerate(messages):
        if message.role == "assistant":
            turn_calls.extend(b for b in message.blocks if isinstance(b, ToolCallBlock))
            out.append(message)
            following = messages[position + 1] if position + 1 < len(messages) else None
            if following is None or following.role != "assistant":
                answered = _results_for(turn_calls, messages[position + 1 :], taken)
                out.extend(_result_messages(answered, caps, notes))
                turn_calls = []
            continue
        rest = tuple(b for b in message.blocks if b.id not in taken)
        if rest:
            out.append(dataclasses.replace(message, blocks=rest))
    renumbered = tuple(
        dataclasses.replace(m, index=i) if m.origin in ("messages", "input", "contents") else m
        for i, m in enumerate(out)
    )
    return dataclasses.replace(seq, messages=renumbered, normalizations=tuple(notes))


def _results_for(
    calls: list[ToolCallBlock], later: tuple[Message, ...], taken: set[str]
) -> list[tuple[Message, ToolResultBlock]]:
    """The first not-yet-placed result of each call, in call order; marks them taken."""
    found: dict[str, tuple[Message, ToolResultBlock]] = {}
    wanted = {c.call_id for c in calls}
    for message in later:
        for block in message.blocks:
            if (
                isinstance(block, ToolResultBlock)
                and block.call_id in wanted
                and block.call_id not in found
                and block.id not in taken
            ):
                found[block.call_id] = (message, block)
    answered = [found[c.call_id] for c in calls if c.call_id in found]
    taken.update(b.id for _m, b in answered)
    return answered


def _result_messages(
    answered: list[tuple[Message, ToolResultBlock]],
    caps: Capabilities,
    notes: list[Normalization],
) -> list[Message]:
    if not answered:
        return []
    grouped = caps.result_window in ("next_turn_leading", "next_turn")
    if grouped:
        placed = [
            Message(
                index=-1,
                role="user",
                blocks=tuple(b for _m, b in answered),
                origin=answered[0][0].origin,
            )
        ]
    else:
        placed = [Message(index=-1, role="tool", blocks=(b,), origin=m.origin) for m, b in answered]
    source_groups = _groups((m.location, b.call_id) for m, b in answered)
    call_ids = [b.call_id for _m, b in answered]
    target_groups = [call_ids] if grouped else [[c] for c in call_ids]
    if source_groups != target_groups:
        for message, block in answered:
            where = "one user message" if grouped else "its own tool message"
            notes.append(
                Normalization(
                    rule="results_regrouped",
                    block_id=block.id,
                    detail=f"tool result '{block.call_id}' moved from {message.location} "
                    f"into {where}, in call order, for {caps.api}",
                )
            )
    return placed


def _groups(pairs: Iterable[tuple[str, str]]) -> list[list[str]]:
    groups: list[list[str]] = []
    last: str | None = None
    for location, call_id in pairs:
        if location != last:
            groups.append([])
            last = location
        groups[-1].append(call_id)
    return groups


def fit_call_ids(seq: MessageSequence, caps: Capabilities) -> MessageSequence:
    """Rewrite call ids the target refuses, each call's with the results that answer it: too
    long or bad characters (the same way at every occurrence), and, for a target that wants
    them unique (``caps.call_ids_unique``), an id a later message calls again."""
    taken = {b.call_id for _m, b in seq.blocks() if isinstance(b, ToolCallBlock)}
    called_in: dict[str, int] = {}  # id as written -> the message that called it last
    calls: dict[str, int] = {}  # id as written -> how many messages called it
    sent_as: dict[str, str] = {}  # id as written -> the id its latest call is sent as
    notes = list(seq.normalizations)
    messages = []
    for index, message in enumerate(seq.messages):
        blocks: list[AnyBlock] = []
        for block in message.blocks:
            if not isinstance(block, ToolCallBlock | ToolResultBlock):
                blocks.append(block)
                continue
            if isinstance(block, ToolCallBlock) and called_in.get(block.call_id) != index:
                sent_as[block.call_id] = _sent_id(block.call_id, calls, taken, caps)
                called_in[block.call_id] = index
            new = sent_as.get(block.call_id, block.call_id)
            if new == block.call_id:
                blocks.append(block)
                continue
            why = "is not valid" if calls[block.call_id] == 1 else "was used by an earlier turn"
            notes.append(
                Normalization(
                    rule="call_id_rewritten",
                    block_id=block.id,
                    detail=f"call id '{block.call_id}' {why} for {caps.api}; sent as '{new}'",
                )
            )
            blocks.append(dataclasses.replace(block, call_id=new))
        changed = any(a is not b for a, b in zip(blocks, message.blocks, strict=True))
        messages.append(dataclasses.replace(message, blocks=tuple(blocks)) if changed else message)
    if len(notes) == len(seq.normalizations):
        return seq
    return dataclasses.replace(seq, messages=tuple(messages), normalizations=tuple(notes))


def _sent_id(call_id: str, calls: dict[str, int], taken: set[str], caps: Capabilities) -> str:
    """The id a call is sent as: its own when the target takes it (and, for a target that
    wants ids unique, no earlier message called it), else a fitted one no call holds."""
    count = calls[call_id] = calls.get(call_id, 0) + 1
    if count == 1 or not caps.call_ids_unique:
        return call_id if _id_fits(call_id, caps) else _fitted_id(call_id, caps)
    while True:
        fitted = _fitted_id(f"{call_id}#{count}", caps)
        if fitted not in taken:
            taken.add(fitted)
            return fitted
        count += 1


def _id_fits(call_id: str, caps: Capabilities) -> bool:
    if caps.max_call_id_length is not None and len(call_id) > caps.max_call_id_length:
        return False
    return caps.call_id_pattern is None or re.fullmatch(caps.call_id_pattern, call_id) is not None


def _fitted_id(call_id: str, caps: Capabilities) -> str:
    suffix = hashlib.sha256(call_id.encode()).hexdigest()[:10]
    cleaned = re.sub(r"[^A-Za-z0-9_-]", "_", call_id)
    limit = caps.max_call_id_length or 64
    return f"{cleaned[: max(0, limit - 11)]}_{suffix}"


def result_text(block: ToolResultBlock) -> str:
    """A result as text, for APIs whose results are text: texts joined, else the value."""
    texts = [p.text for p in block.content if isinstance(p, TextBlock)]
    if texts and len(texts) == len(block.content):
        return "".join(texts)
    value = block.value
    if isinstance(value, dict) and len(value) == 1:
        ((key, inner),) = value.items()
        if key in (*_OUTPUT_KEYS, "error") and isinstance(inner, str):
            return inner
    if value is not None:
        import orjson

        return orjson.dumps(value).decode()
    return ""


def result_value(block: ToolResultBlock) -> dict[str, Any]:
    """A result as a JSON object, for APIs whose results are objects (Gemini)."""
    if isinstance(block.value, dict):
        return block.value
    if block.value is not None:
        return {"output": block.value}
    key = "error" if block.status == "error" else "output"
    return {key: result_text(block)}

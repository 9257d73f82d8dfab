"""Anthropic: a ``role: "system"`` message inside ``messages`` (rule
``anthropic_system_message``).

The system prompt goes in the top-level ``system`` field. A client written for OpenAI sends
it as the first message instead, and every request fails: before Claude Opus 4.8, which
takes no system message in ``messages`` at all, with "messages: Unexpected role "system".
The Messages API accepts a top-level `system` parameter, not "system" as an input message
role."; on Opus 4.8 and later, which take one mid-conversation but never first, with
"messages.0: use the top-level 'system' parameter for the initial system prompt" (gproxy
#209, a Codex developer message converted so).

Judged for a model whose id names Claude: a first system message with content, on any of
them (its directive-only form, no content, is taken anywhere); a system message anywhere
on a Claude model before 4.8, unless a beta that sends system messages is named (the
official SDK's tool runner announces tool changes in one, on Opus 4.6 too, under
``inline-tools-…``). Where Opus 4.8 and the Claude 5 models take one mid-conversation is
left to Anthropic, as is a continued thread, whose first message is not the conversation's.
"""

from __future__ import annotations

import re

from turngate.graph.model import Message, MessageSequence
from turngate.graph.rules import rule
from turngate.graph.rules.anthropic import claude_3_name, claude_version
from turngate.graph.rules.anthropic_settings import betas_named
from turngate.graph.validator import Violation, violation

SYSTEM_MESSAGE = "anthropic_system_message"
# The first Claude model to take a system message inside ``messages``.
MID_CONVERSATION_SYSTEM = (4, 8)
# A system block inside a user message's content (the adapter's shape for it): not judged.
_SYSTEM_BLOCK = "mid_conv_system"
# Betas under which a model before 4.8 takes system messages in ``messages``.
_SYSTEM_BETA = re.compile(r"inline-tools-|mid-conversation-system-").match
_FIRST = "messages.0: use the top-level 'system' parameter for the initial system prompt"
_UNEXPECTED = (
    'messages: Unexpected role "system". The Messages API accepts a top-level `system` '
    'parameter, not "system" as an input message role.'
)


@rule(SYSTEM_MESSAGE)
def system_messages(seq: MessageSequence) -> list[Violation]:
    model = seq.model or ""
    if "claude" not in model.lower():
        return []
    inline = [
        m
        for m in seq.messages
        if m.role == "system" and m.origin == "messages" and m.shape != _SYSTEM_BLOCK
    ]
    if not inline:
        return []
    if _takes_none(model) and not any(_SYSTEM_BETA(name) for name in betas_named(seq)):
        return [
            violation(
                SYSTEM_MESSAGE,
                f'{model} takes no system message in messages; Anthropic: "{_UNEXPECTED}" '
                "(move it to the top-level system field)",
                message,
            )
            for message in inline
        ]
    first = inline[0]
    if first.index != 0 or seq.history == "partial" or not _has_content(first):
        return []
    return [
        violation(
            SYSTEM_MESSAGE,
            f'the conversation starts with a system message; Anthropic: "{_FIRST}" (move it '
            "to the top-level system field)",
            first,
        )
    ]


def _takes_none(model: str) -> bool:
    version = claude_version(model)
    if version is not None:
        return version < MID_CONVERSATION_SYSTEM
    return claude_3_name(model) is not None


def _has_content(message: Message) -> bool:
    return bool(message.blocks) or message.shape == "string"

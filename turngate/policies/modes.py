"""Rollout modes as a decision table: (mode, does the request use tools?) -> enforce | shadow.

``shadow`` sends the client's original bytes unchanged and only records what turngate would
have done; ``enforce`` refuses invalid sequences and sends what turngate rendered.
``enforce-no-tools`` enforces requests that neither define tools nor carry tool blocks in
their history, and shadows the rest: the tool paths are where a new proxy is most likely to
differ from what the application was tested against, so they are adopted last.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, assert_never

from turngate.graph.model import (
    AnyBlock,
    AudioBlock,
    CompressionBlock,
    FileBlock,
    ImageBlock,
    MessageSequence,
    ReasoningBlock,
    RefusalBlock,
    ServerToolBlock,
    SnippetBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    UnknownBlock,
)

Mode = Literal["shadow", "enforce-no-tools", "enforce"]
MODES: tuple[Mode, ...] = ("shadow", "enforce-no-tools", "enforce")
Decision = Literal["enforce", "shadow"]
# What a request does with tools: nothing, defines tools, carries tool blocks, or both.
ToolUse = Literal["none", "defined", "in_history", "defined_and_in_history"]
TOOL_USES: tuple[ToolUse, ...] = ("none", "defined", "in_history", "defined_and_in_history")

DECISIONS: Mapping[tuple[Mode, ToolUse], Decision] = {
    ("shadow", "none"): "shadow",
    ("shadow", "defined"): "shadow",
    ("shadow", "in_history"): "shadow",
    ("shadow", "defined_and_in_history"): "shadow",
    ("enforce-no-tools", "none"): "enforce",
    ("enforce-no-tools", "defined"): "shadow",
    ("enforce-no-tools", "in_history"): "shadow",
    ("enforce-no-tools", "defined_and_in_history"): "shadow",
    ("enforce", "none"): "enforce",
    ("enforce", "defined"): "enforce",
    ("enforce", "in_history"): "enforce",
    ("enforce", "defined_and_in_history"): "enforce",
}


@dataclass(frozen=True)
class ModeDecision:
    mode: Mode
    tool_use: ToolUse
    decision: Decision

    @property
    def enforced(self) -> bool:
        return self.decision == "enforce"


def decide(mode: Mode, seq: MessageSequence) -> ModeDecision:
    """Whether turngate enforces this request or only shadows it."""
    use = tool_use(seq)
    return ModeDecision(mode=mode, tool_use=use, decision=DECISIONS[(mode, use)])


def tool_use(seq: MessageSequence) -> ToolUse:
    defined = bool(seq.tools) or _declares_tools(seq.envelope)
    outline = seq.outline
    if outline is not None:
        in_history = outline.has_tool_blocks()
    else:
        in_history = any(_is_tool_block(block) for _message, block in seq.blocks())
    if defined and in_history:
        return "defined_and_in_history"
    if defined:
        return "defined"
    if in_history:
        return "in_history"
    return "none"


def _declares_tools(envelope: Mapping[str, object]) -> bool:
    # An envelope keeps what the adapter did not model, e.g. a `tools` value that is not a list
    # or a Gemini `toolConfig`: still a request about tools, so not one to enforce early.
    return any(key in envelope for key in ("tools", "tool_choice", "toolConfig", "tool_config"))


def _is_tool_block(block: AnyBlock) -> bool:
    if isinstance(block, ToolCallBlock | ToolResultBlock | ServerToolBlock):
        return True
    if isinstance(
        block,
        TextBlock
        | ImageBlock
        | AudioBlock
        | FileBlock
        | ReasoningBlock
        | RefusalBlock
        | SnippetBlock
        | CompressionBlock
        | UnknownBlock,
    ):
        return False
    assert_never(block)


def decision_table_markdown() -> str:
    """The decision table as docs/policies.md shows it (a test keeps the two equal)."""
    header = "| mode | " + " | ".join(f"tools: {use}" for use in TOOL_USES) + " |"
    rule = "|---" * (len(TOOL_USES) + 1) + "|"
    rows = [
        f"| `{mode}` | " + " | ".join(DECISIONS[(mode, use)] for use in TOOL_USES) + " |"
        for mode in MODES
    ]
    return "\n".join([header, rule, *rows])

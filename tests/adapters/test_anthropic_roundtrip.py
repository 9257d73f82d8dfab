"""Render -> parse is the identity for Anthropic graphs: hand-written bodies using every kind
the adapter models (same JSON value back), and hypothesis-generated graphs (same
semantic_view, same render again, still READY)."""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.adapters.anthropic_builders import (
    assistant,
    body,
    parse,
    server_tool_use,
    text,
    thinking,
    tool_result,
    tool_use,
    user,
    verdict_of,
    web_search_result,
)
from turngate.adapters.anthropic import ADAPTER, CAPABILITIES
from turngate.adapters.anthropic.foreign import fit_foreign
from turngate.graph.equivalence import semantic_view
from turngate.graph.model import (
    AnyBlock,
    CompressionBlock,
    ContentBlock,
    ImageBlock,
    Message,
    MessageSequence,
    ReasoningBlock,
    Role,
    ServerToolBlock,
    SnippetBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from turngate.graph.validator import validate

CACHE = {"cache_control": {"type": "ephemeral", "ttl": "1h"}}
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kg=="


def _image(kind: str) -> dict[str, Any]:
    sources = {
        "base64": {"type": "base64", "media_type": "image/png", "data": PNG},
        "url": {"type": "url", "url": "https://example.com/a.png"},
        "file": {"type": "file", "file_id": "file_011abc"},
    }
    return {"type": "image", "source": sources[kind]}


def _document(kind: str) -> dict[str, Any]:
    sources = {
        "base64": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQ="},
        "text": {"type": "text", "media_type": "text/plain", "data": "plain words"},
        "url": {"type": "url", "url": "https://example.com/a.pdf"},
        "file": {"type": "file", "file_id": "file_011pdf"},
    }
    return {
        "type": "document",
        "source": sources[kind],
        "title": "A",
        "citations": {"enabled": True},
    }


EVERY_KIND = body(
    user(
        text("look", **CACHE),
        _image("base64"),
        _image("url"),
        _image("file"),
        _document("base64"),
        _document("text"),
        _document("url"),
        _document("file"),
        {
            "type": "search_result",
            "source": "https://docs.example/a",
            "title": "A",
            "content": [text("first"), text("second", citations=[])],
            "citations": {"enabled": True},
        },
        {"type": "container_upload", "file_id": "file_011csv"},
    ),
    assistant(
        thinking("hmm", "c2ln"),
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3"},
        server_tool_use("srvtoolu_01AbC"),
        web_search_result("srvtoolu_01AbC"),
        {
            "type": "code_execution_tool_result",
            "tool_use_id": "srvtoolu_02",
            "content": {
                "type": "code_execution_result",
                "stdout": "4",
                "stderr": "",
                "return_code": 0,
            },
        },
        {
            "type": "mcp_tool_use",
            "id": "mcptoolu_01",
            "name": "lookup",
            "server_name": "docs",
            "input": {"q": "x"},
        },
        {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_01", "is_error": False, "content": []},
        text("calling", citations=None),
        tool_use("toolu_01", input={"city": "Paris", "days": [1, 2], "unit": None}, **CACHE),
        tool_use("toolu_02", input={}, caller={"type": "direct"}),
    ),
    user(
        tool_result("toolu_01", content=[text("sunny"), _image("base64")], is_error=False, **CACHE),
        tool_result("toolu_02", content="boom", is_error=True),
        {"type": "tool_result", "tool_use_id": "toolu_03_absent"},
        text("and?"),
    ),
    assistant({"type": "compaction", "content": "summary so far", "encrypted_content": "b3BhcXVl"}),
    {"role": "system", "content": [text("from now on, be brief")]},
    user(
        text("before"),
        {"type": "mid_conv_system", "content": [text("mid-conversation rule")], **CACHE},
        text("after"),
    ),
    system=[text("You are terse.", **CACHE)],
    thinking={"type": "enabled", "budget_tokens": 2048},
    metadata={"user_id": "u1"},
    tool_choice={"type": "auto", "disable_parallel_tool_use": True},
    vendor_extension={"a": [1, None]},
)


def test_every_modelled_kind_renders_back_to_the_same_body() -> None:
    seq = parse(EVERY_KIND)
    assert ADAPTER.render_request(seq) == EVERY_KIND
    kinds = {b.kind for _m, b in seq.blocks()}
    assert kinds >= {"text", "image", "file", "snippet", "server_tool", "reasoning"}
    assert kinds >= {"tool_call", "tool_result", "compression"}
    assert "unknown" not in kinds


@pytest.mark.parametrize(
    "compaction",
    [
        {"type": "compaction", "content": "summary, signed", "signature": "EqQBCkgIAxAB"},
        {"type": "compaction", "content": None, "encrypted_content": None},
        {"type": "compaction", "content": None},
    ],
    ids=["summary-only", "failed-with-nulls", "failed"],
)
def test_a_compaction_without_encrypted_content_is_one_and_renders_back(
    compaction: dict[str, Any],
) -> None:
    request = body(user("go"), assistant(compaction, text("Continuing.")), user("on"))
    seq = parse(request)
    assert validate(seq, CAPABILITIES).ready
    block = seq.messages[1].blocks[0]
    assert isinstance(block, CompressionBlock)
    assert block.compaction
    assert ADAPTER.render_request(seq) == request


def test_tool_changes_are_kept_as_they_came() -> None:
    changes = [
        {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "lookup"}},
        {
            "type": "tool_addition",
            "tool": {
                "type": "tool_definition",
                "definition": {"name": "refund", "input_schema": {}},
            },
            "cache_control": {"type": "ephemeral"},
        },
    ]
    request = body({"role": "user", "content": [text("go"), *changes]})
    seq = parse(request)
    assert validate(seq, CAPABILITIES).ready
    assert ADAPTER.render_request(seq) == request


def test_modelled_meaning_of_the_special_kinds() -> None:
    seq = parse(EVERY_KIND)
    blocks = {b.id: (m, b) for m, b in seq.blocks()}
    upload = blocks["m0.b9"][1]
    assert isinstance(upload, ServerToolBlock)
    assert (upload.name, upload.phase, upload.call_id) == ("container_upload", "call", None)
    first, second = blocks["m0.b8"][1], blocks["m0.b8.c1"][1]
    assert isinstance(first, SnippetBlock)
    assert isinstance(second, SnippetBlock)
    assert (first.text, second.text, first.scope) == ("first", "second", "user")
    mcp = blocks["m1.b5"][1]
    assert isinstance(mcp, ServerToolBlock)
    assert mcp.call_id == "mcptoolu_01"
    result = blocks["m1.b4"][1]
    assert isinstance(result, ServerToolBlock)
    assert (result.phase, result.name) == ("result", "code_execution_tool_result")
    (mid,) = [m for m in seq.messages if m.index == 5 and m.role == "system"]
    assert [(b.kind, b.role, b.trust) for b in mid.blocks] == [("text", "system", "trusted")]
    assert [m.role for m in seq.messages if m.index == 5] == ["user", "system", "user"]
    (system_entry,) = [m for m in seq.messages if m.index == 4 and m.origin == "messages"]
    assert system_entry.role == "system"
    statuses = [b.status for _m, b in seq.blocks() if isinstance(b, ToolResultBlock)]
    assert statuses == ["success", "error", "success"]


def test_a_partial_tool_use_input_is_kept_and_refused() -> None:
    request = body(user("hi"), assistant(tool_use("toolu_1", input='{"city": "Par')))
    seq = parse(request)
    assert ADAPTER.render_request(seq) == request
    assert validate(seq, CAPABILITIES).rules == ["incomplete_arguments", "missing_result"]
    no_input = body(user("hi"), assistant({"type": "tool_use", "id": "toolu_1", "name": "f"}))
    assert ADAPTER.render_request(parse(no_input)) == no_input


@pytest.mark.parametrize(
    "content",
    [
        [{"type": "image", "source": {"type": "s3", "bucket": "b"}}],
        [{"type": "document", "source": {"type": "content", "content": [text("x")]}}],
        [{"type": "search_result", "source": "s", "title": "t", "content": []}],
        ["a bare string"],
        [{"type": "thinking"}],
    ],
)
def test_forms_not_modelled_are_unknown_and_kept(content: list[Any]) -> None:
    request = body({"role": "user", "content": content})
    seq = parse(request)
    assert ADAPTER.render_request(seq) == request
    assert "unknown_kind" in verdict_of(request).rules


# --- hypothesis: generated graphs ---------------------------------------------------------

_words = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12
)
# Texts Anthropic takes: not whitespace alone, and (for a prefill) not ending in it.
_texts = _words.map(str.strip).filter(bool)
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | _words,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_words, inner, max_size=3),
    max_leaves=6,
)
_arguments = st.dictionaries(_words, _json_values, max_size=3)


class _Builder:
    def __init__(self) -> None:
        self.order = 0

    def common(self, block_id: str, role: Role) -> dict[str, Any]:
        self.order += 1
        trust = "trusted" if role == "system" else "untrusted"
        return {"id": block_id, "role": role, "order": self.order, "trust": trust}


@st.composite
def _user_parts(draw: st.DrawFn, b: _Builder, prefix: str, role: Role) -> list[AnyBlock]:
    parts: list[AnyBlock] = []
    for j in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            parts.append(TextBlock(text=draw(_texts), **b.common(f"{prefix}.{j}", role)))
        else:
            url = draw(st.booleans())
            parts.append(
                ImageBlock(
                    source="url" if url else "base64",
                    data="https://example.com/i.png" if url else PNG,
                    media_type=None if url else "image/png",
                    **b.common(f"{prefix}.{j}", role),
                )
            )
    return parts


@st.composite
def anthropic_graphs(draw: st.DrawFn) -> MessageSequence:
    b = _Builder()
    messages: list[Message] = []
    if draw(st.booleans()):
        instructions = TextBlock(text=draw(_texts), **b.common("system.b0", "system"))
        string = draw(st.booleans())
        messages.append(
            Message(
                index=0,
                role="system",
                blocks=(instructions,),
                origin="system",
                shape="string" if string else "parts",
            )
        )
    index = 0
    for turn in range(draw(st.integers(1, 4))):
        prefix = f"m{index}"
        messages.append(
            Message(index=index, role="user", blocks=tuple(draw(_user_parts(b, prefix, "user"))))
        )
        index += 1
        calls: list[ToolCallBlock] = []
        blocks: list[AnyBlock] = []
        if draw(st.booleans()):
            blocks.append(
                ReasoningBlock(
                    provider="anthropic",
                    text=draw(_texts),
                    signature="c2ln" + str(turn),
                    **b.common(f"m{index}.think", "assistant"),
                )
            )
        if draw(st.booleans()):
            blocks.append(TextBlock(text=draw(_texts), **b.common(f"m{index}.text", "assistant")))
        # Thinking alone is no answer (anthropic_thinking_final): text or a call follows it.
        answered = any(isinstance(block, TextBlock) for block in blocks)
        for k in range(draw(st.integers(0 if answered else 1, 3))):
            call = ToolCallBlock(
                call_id=f"toolu_{turn}_{k}",
                name=draw(st.sampled_from(["get_weather", "lookup"])),
                arguments=orjson.dumps(draw(_arguments)).decode(),
                argument_state="complete",
                **b.common(f"m{index}.call{k}", "assistant"),
            )
            calls.append(call)
            blocks.append(call)
        messages.append(Message(index=index, role="assistant", blocks=tuple(blocks)))
        index += 1
        if calls:
            results: list[AnyBlock] = []
            for call in draw(st.permutations(calls)):
                rid = f"m{index}.r{call.call_id}"
                parts: list[AnyBlock] = [
                    TextBlock(text=draw(_texts), **b.common(f"{rid}.c0", "tool"))
                ]
                as_string = draw(st.booleans())
                if not as_string and draw(st.booleans()):
                    parts.extend(draw(_user_parts(b, f"{rid}.c1", "tool")))
                results.append(
                    ToolResultBlock(
                        call_id=call.call_id,
                        status=draw(st.sampled_from(["success", "error"])),
                        content=cast(tuple[ContentBlock, ...], tuple(parts)),
                        attrs={"$content": "string"} if as_string else {},
                        **b.common(rid, "tool"),
                    )
                )
            if draw(st.booleans()):
                results.append(TextBlock(text=draw(_texts), **b.common(f"m{index}.t", "user")))
            messages.append(Message(index=index, role="user", blocks=tuple(results)))
            index += 1
    model = "claude-sonnet-4-5"
    envelope: dict[str, Any] = {"model": model, "max_tokens": 1024}
    if any(isinstance(block, ReasoningBlock) for m in messages for block in m.blocks):
        # Thinking blocks come with thinking on (anthropic_thinking_disabled); adaptive
        # thinking may think in some turns and not in others. Claude 4.5 has no adaptive
        # thinking and 4.6 takes no prefill, so a model turngate places in neither.
        model = envelope["model"] = "claude-mythos-preview"
        envelope["thinking"] = {"type": "adaptive"}
    return MessageSequence(
        api="anthropic",
        adapter="anthropic@1",
        model=model,
        messages=tuple(messages),
        envelope=envelope,
        max_output_tokens=1024,
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(anthropic_graphs())
def test_generated_graphs_render_and_parse_back_the_same(seq: MessageSequence) -> None:
    rendered = ADAPTER.render_request(seq)
    parsed = ADAPTER.parse_request(orjson.loads(orjson.dumps(rendered)))
    assert semantic_view(parsed) == semantic_view(seq)
    assert ADAPTER.render_request(parsed) == rendered
    verdict = validate(parsed, CAPABILITIES)
    assert verdict.status in ("READY", "WAITING"), verdict.violations


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(anthropic_graphs())
def test_generated_graphs_from_another_api_render_the_same_conversation(
    seq: MessageSequence,
) -> None:
    """The same conversation labelled as another API's graph takes the foreign path (modelled
    fields only). Thinking is refused there, as it is bound to Anthropic only by its label."""
    foreign = dataclasses.replace(
        seq,
        api="openai_chat",
        envelope={},
        messages=tuple(
            dataclasses.replace(m, blocks=tuple(x for x in m.blocks if x.kind != "reasoning"))
            for m in seq.messages
        ),
    )
    foreign = dataclasses.replace(foreign, messages=tuple(m for m in foreign.messages if m.blocks))
    rendered = ADAPTER.render_request(foreign)
    parsed = ADAPTER.parse_request(rendered)
    assert semantic_view(parsed) == semantic_view(fit_foreign(foreign, CAPABILITIES))
    assert validate(parsed, CAPABILITIES).status in ("READY", "WAITING")

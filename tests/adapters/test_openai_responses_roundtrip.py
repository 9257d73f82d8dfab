"""Hypothesis: generated Responses graphs (many turns, reasoning, parallel calls answered in
any order, text and image parts, custom tools) -> render -> parse is the identity."""

from __future__ import annotations

import base64
from typing import Any, cast

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turngate.adapters.openai_responses import ADAPTER, CAPABILITIES
from turngate.graph.equivalence import semantic_view
from turngate.graph.model import (
    AnyBlock,
    ContentBlock,
    ImageBlock,
    Message,
    MessageSequence,
    ReasoningBlock,
    Role,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from turngate.graph.validator import validate

TEXT = st.text(max_size=40)
NAMES = st.sampled_from(["get_weather", "search", "lookup_user", "send_mail"])
ARGS = st.dictionaries(
    st.text(min_size=1, max_size=8),
    st.integers(-(2**53), 2**53) | st.text(max_size=10) | st.booleans(),
    max_size=3,
)
IMAGE_BYTES = st.binary(min_size=1, max_size=24)


class Builder:
    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.order = 0
        self.calls = 0

    def _common(self, block_id: str, role: Role) -> dict[str, Any]:
        self.order += 1
        trust = "trusted" if role in ("system", "developer") else "untrusted"
        return {"id": block_id, "role": role, "order": self.order - 1, "trust": trust}

    def _add(self, role: Role, shape: str, make: list[Any], origin: str = "input") -> None:
        index = 0 if origin == "instructions" else sum(m.origin == "input" for m in self.messages)
        prefix = "instructions" if origin == "instructions" else f"m{index}"
        blocks = tuple(fn(f"{prefix}.b{j}") for j, fn in enumerate(make))
        self.messages.append(
            Message(index=index, role=role, blocks=blocks, origin=origin, shape=shape)
        )

    def text(self, role: Role, text: str) -> Any:
        return lambda block_id: TextBlock(text=text, **self._common(block_id, role))

    def image(self, role: Role, data: bytes | None, url: str) -> Any:
        if data is None:
            return lambda block_id: ImageBlock(
                source="url", data=url, **self._common(block_id, role)
            )
        payload = base64.b64encode(data).decode()
        return lambda block_id: ImageBlock(
            source="base64", data=payload, media_type="image/png", **self._common(block_id, role)
        )

    def instructions(self, text: str) -> None:
        self._add("system", "string", [self.text("system", text)], origin="instructions")

    def content(self, role: Role, parts: list[Any], string_form: bool) -> None:
        single_text = len(parts) == 1 and parts[0][0] == "text"
        shape = "string" if string_form and single_text else "parts"
        self._add(role, shape, [self._part(role, p) for p in parts])

    def _part(self, role: Role, part: tuple[Any, ...]) -> Any:
        if part[0] == "text":
            return self.text(role, part[1])
        return self.image(role, part[1], part[2])

    def reasoning(self, summary: list[str], payload: str | None) -> None:
        attrs = {
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": t} for t in summary],
        }
        self._add(
            "assistant",
            "item",
            [
                lambda block_id: ReasoningBlock(
                    provider="openai_responses",
                    text="\n\n".join(summary),
                    payload=payload,
                    attrs=attrs,
                    **self._common(block_id, "assistant"),
                )
            ],
        )

    def call(self, name: str, arguments: Any, custom: bool) -> ToolCallBlock:
        self.calls += 1
        call_id = f"call_{self.calls}"
        data = arguments if custom else orjson.dumps(arguments).decode()
        made: list[ToolCallBlock] = []

        def make(block_id: str) -> ToolCallBlock:
            made.append(
                ToolCallBlock(
                    call_id=call_id,
                    name=name,
                    arguments=data,
                    argument_state="complete",
                    tool_type="custom" if custom else "function",
                    **self._common(block_id, "assistant"),
                )
            )
            return made[0]

        self._add("assistant", "item", [make])
        return made[0]

    def result(self, call: ToolCallBlock, parts: list[Any], string_form: bool) -> None:
        index = sum(m.origin == "input" for m in self.messages)
        block_id = f"m{index}.b0"
        content: list[AnyBlock] = [
            self._part("tool", p)(f"{block_id}.c{k}") for k, p in enumerate(parts)
        ]
        single_text = len(parts) == 1 and parts[0][0] == "text"
        shape = "string" if string_form and single_text else "parts"
        block = ToolResultBlock(
            call_id=call.call_id,
            content=cast(tuple[ContentBlock, ...], tuple(content)),
            **self._common(block_id, "tool"),
        )
        self.messages.append(
            Message(index=index, role="tool", blocks=(block,), origin="input", shape=shape)
        )

    def sequence(self) -> MessageSequence:
        return MessageSequence(
            api="openai_responses",
            adapter="openai_responses@1",
            model="gpt-5",
            messages=tuple(self.messages),
        )


PART = st.one_of(
    st.tuples(st.just("text"), TEXT),
    st.tuples(
        st.just("image"),
        st.none() | IMAGE_BYTES,
        st.from_regex(r"https://img\.example/[a-z]{1,8}\.png", fullmatch=True),
    ),
)


@st.composite
def conversations(draw: st.DrawFn) -> MessageSequence:
    b = Builder()
    if draw(st.booleans()):
        b.instructions(draw(st.text(min_size=1, max_size=40)))
    for _turn in range(draw(st.integers(1, 4))):
        role: Role = draw(st.sampled_from(["user", "user", "developer"]))
        parts = draw(st.lists(PART, min_size=1, max_size=3))
        if role == "developer":
            parts = [p for p in parts if p[0] == "text"] or [("text", "rules")]
        b.content(role, parts, draw(st.booleans()))
        for _step in range(draw(st.integers(0, 3))):
            texts = draw(st.lists(TEXT, max_size=2))
            n_calls = draw(st.integers(0 if texts else 1, 3))
            if draw(st.booleans()):
                summary = draw(st.lists(TEXT, max_size=2))
                b.reasoning(summary, draw(st.none() | st.text(min_size=1, max_size=30)))
            for text in texts:
                b.content("assistant", [("text", text)], draw(st.booleans()))
            calls = []
            for _ in range(n_calls):
                custom = draw(st.booleans())
                arguments = draw(TEXT) if custom else draw(ARGS)
                calls.append(b.call(draw(NAMES), arguments, custom))
            for call in draw(st.permutations(calls)):
                result_parts = draw(st.lists(PART, min_size=1, max_size=2))
                b.result(call, result_parts, draw(st.booleans()))
    return b.sequence()


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations())
def test_render_then_parse_is_the_identity(seq: MessageSequence) -> None:
    body = ADAPTER.render_request(seq)
    parsed = ADAPTER.parse_request(orjson.loads(orjson.dumps(body)))
    assert semantic_view(parsed) == semantic_view(seq)
    assert [(m.role, m.index) for m in parsed.messages] == [(m.role, m.index) for m in seq.messages]
    assert ADAPTER.render_request(parsed) == body
    verdict = validate(parsed, CAPABILITIES)
    assert verdict.status == "READY", verdict.violations

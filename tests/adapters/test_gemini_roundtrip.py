"""Hypothesis: generated graphs render to Gemini and parse back to the same graph."""

from __future__ import annotations

import base64
import itertools
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from turngate.adapters.base import RouteInfo
from turngate.adapters.gemini import ADAPTER, CAPABILITIES
from turngate.graph.equivalence import semantic_view
from turngate.graph.model import (
    AnyBlock,
    ApiName,
    ImageBlock,
    Message,
    MessageSequence,
    ReasoningBlock,
    Role,
    TextBlock,
    ToolCallBlock,
    ToolDef,
    ToolResultBlock,
)
from turngate.graph.validator import validate

_ROUTE = RouteInfo(model="gemini-2.5-flash", stream=True)
_NAMES = st.sampled_from(["get_weather", "search", "add", "read_file"])
_TEXT = st.text(max_size=40)
_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)
_ARGS = st.dictionaries(st.text(min_size=1, max_size=8), _JSON, max_size=4)


class _Graph:
    """Builds one graph's messages with ids and order the way adapters number them."""

    def __init__(self, api: ApiName) -> None:
        self.api = api
        self.order = itertools.count()
        self.messages: list[Message] = []
        self.calls = itertools.count()

    def block_args(self, index: int, j: int, role: Role) -> dict[str, Any]:
        trust = "trusted" if role == "system" else "untrusted"
        return {"id": f"m{index}.b{j}", "role": role, "order": next(self.order), "trust": trust}

    def add(self, role: Role, make: list[Any], origin: str | None = None) -> None:
        origin = origin or ("contents" if self.api == "gemini" else "messages")
        index = sum(1 for m in self.messages if m.origin == origin)
        block_role: Role = role
        blocks: list[AnyBlock] = []
        for j, build in enumerate(make):
            kind, payload = build
            block_role = "tool" if kind == "result" else role
            common = self.block_args(index, j, block_role)
            blocks.append(_block(kind, payload, common, self.api))
        self.messages.append(Message(index=index, role=role, blocks=tuple(blocks), origin=origin))

    def sequence(self, tools: tuple[ToolDef, ...]) -> MessageSequence:
        return MessageSequence(
            api=self.api,
            adapter=f"{self.api}@1",
            model="m",
            messages=tuple(self.messages),
            tools=tools,
            stream=True,
        )


def _block(kind: str, payload: Any, common: dict[str, Any], api: ApiName) -> AnyBlock:
    if kind == "text":
        return TextBlock(text=payload, **common)
    if kind == "thought":
        return ReasoningBlock(provider="gemini", text=payload, **common)
    if kind == "image":
        source, data, media_type = payload
        return ImageBlock(source=source, data=data, media_type=media_type, **common)
    if kind == "call":
        call_id, name, args = payload
        return ToolCallBlock(
            call_id=call_id,
            name=name,
            arguments=orjson.dumps(args).decode(),
            argument_state="complete",
            **common,
        )
    call_id, name, output, failed = payload
    if api == "gemini":
        return ToolResultBlock(
            call_id=call_id,
            name=name,
            status="error" if failed else "success",
            value={"error" if failed else "output": output},
            **common,
        )
    text = TextBlock(**{**common, "id": f"{common['id']}.c0", "role": "tool"}, text=output)
    return ToolResultBlock(
        call_id=call_id, status="error" if failed else "success", content=(text,), **common
    )


_IMAGE = st.one_of(
    st.binary(min_size=1, max_size=24).map(
        lambda raw: ("base64", base64.b64encode(raw).decode(), "image/png")
    ),
    st.sampled_from(["gs://bucket/cat.jpg", "https://example.com/a.png"]).map(
        lambda uri: ("file", uri, "image/jpeg")
    ),
)


@st.composite
def conversations(draw: st.DrawFn, api: ApiName) -> MessageSequence:
    graph = _Graph(api)
    if draw(st.booleans()):
        system = [("text", t) for t in draw(st.lists(_TEXT, min_size=1, max_size=2))]
        origin = "systemInstruction" if api == "gemini" else "messages"
        graph.add("system", system, origin=origin)
    turns = draw(st.integers(1, 4))
    pending_results: list[Any] = []
    for turn in range(turns):
        asked = [("text", draw(_TEXT))]
        asked += [("image", draw(_IMAGE)) for _ in range(draw(st.integers(0, 1)))]
        if pending_results and draw(st.booleans()) and api == "gemini":
            graph.add("user", pending_results + asked)
        else:
            if pending_results:
                _add_results(graph, api, pending_results)
            graph.add("user", asked)
        pending_results = []
        said: list[Any] = []
        if api == "gemini" and draw(st.booleans()):
            said.append(("thought", draw(_TEXT)))
        if draw(st.booleans()):
            said.append(("text", draw(_TEXT)))
        calls = []
        for _ in range(draw(st.integers(0 if said else 1, 3))):
            call_id = f"call_{next(graph.calls)}"
            name = draw(_NAMES)
            calls.append((call_id, name))
            said.append(("call", (call_id, name, draw(_ARGS))))
        graph.add("assistant", said)
        answered = turn < turns - 1 or draw(st.booleans())
        if calls and answered:
            pending_results = [
                ("result", (call_id, name, draw(_TEXT), draw(st.booleans())))
                for call_id, name in calls
            ]
    if pending_results:
        _add_results(graph, api, pending_results)
    names = sorted(
        {b.name for m in graph.messages for b in m.blocks if isinstance(b, ToolCallBlock)}
    )
    tools = tuple(
        ToolDef(name=n, description=f"the {n} tool", parameters={"type": "object"}) for n in names
    )
    return graph.sequence(tools)


def _add_results(graph: _Graph, api: ApiName, results: list[Any]) -> None:
    if api == "gemini":
        graph.add("user", results)
    else:
        for result in results:
            graph.add("tool", [result], origin="messages")


def _same_again(seq: MessageSequence) -> tuple[MessageSequence, dict[str, Any]]:
    body = ADAPTER.render_request(seq)
    back = ADAPTER.parse_request(orjson.loads(orjson.dumps(body)), _ROUTE)
    assert semantic_view(back) == semantic_view(seq)
    assert ADAPTER.render_request(back) == body
    return back, body


@settings(max_examples=150, deadline=None)
@given(conversations("gemini"))
def test_gemini_graphs_render_and_parse_back_to_the_same_graph(seq: MessageSequence):
    back, _body = _same_again(seq)
    assert validate(back, CAPABILITIES).status == validate(seq, CAPABILITIES).status
    assert [e.call_id for e in back.edges] == [e.call_id for e in seq.edges]
    assert [e.result_status for e in back.edges] == [e.result_status for e in seq.edges]


@settings(max_examples=150, deadline=None)
@given(conversations("openai_chat"))
def test_chat_shaped_graphs_render_to_gemini_and_parse_back_equivalent(seq: MessageSequence):
    back, body = _same_again(seq)
    assert validate(back, CAPABILITIES).status in ("READY", "WAITING")
    roles = [c["role"] for c in body["contents"]]
    assert all(a != b for a, b in itertools.pairwise(roles)), roles
    steps = [c for c in body["contents"] if any("functionCall" in p for p in c["parts"])]
    for content in steps:
        first = next(p for p in content["parts"] if "functionCall" in p)
        assert first["thoughtSignature"] == "skip_thought_signature_validator"

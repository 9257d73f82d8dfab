"""Adapter pins: versions side by side, and the pause (409) on a block kind a version does not
know, instead of dropping it or joining it into text."""

from __future__ import annotations

import dataclasses
from typing import Any

import httpx2 as httpx
import openai
import orjson
import pytest

from tests.graph.chat_builders import assistant, body, call, tool, user
from tests.policies import chat_v0
from turngate.adapters.openai_chat import ADAPTER
from turngate.errors import ConversationPaused, StateConflict
from turngate.graph.codec import digest_of
from turngate.graph.model import CompressionBlock, Message, MessageSequence
from turngate.graph.serialize import to_json
from turngate.policies.config import PolicyFile
from turngate.policies.pins import AdapterRegistry, AdapterVersion, ensure_known, load_for

REGISTRY = AdapterRegistry().register(chat_v0.VERSION)
CURRENT = REGISTRY.current("openai_chat")


def stored(seq: MessageSequence) -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads(orjson.dumps(to_json(seq)))
    return data


def conversation() -> MessageSequence:
    return ADAPTER.parse_request(
        body(user("weather?"), assistant(calls=[call("call_7")]), tool("call_7", "sunny"))
    )


def test_a_stored_graph_with_a_newer_kind_pauses_the_conversation_with_409():
    data = stored(conversation())
    data["messages"][1]["blocks"][0]["kind"] = "hologram"
    with pytest.raises(ConversationPaused) as caught:
        load_for(CURRENT, data)
    paused = caught.value
    assert isinstance(paused, StateConflict)
    assert (paused.rule, paused.status) == ("conversation_paused", 409)
    assert paused.message == (
        "turngate: conversation paused: block 'm1.b0' (messages[1]) is of kind 'hologram', "
        "which adapter openai_chat@1 does not know; roll forward to a turngate that knows it, "
        "or start a new conversation"
    )
    # The client gets the API's own 409, which its SDK raises as a conflict, not a retry of
    # something it could fix by editing text.
    rendered = CURRENT.adapter().render_error(paused)
    assert rendered.status == 409
    assert rendered.headers["Turngate-Rejection"] == "conversation_paused"
    client = openai.OpenAI(api_key="k", base_url="http://127.0.0.1:9/v1")
    response = httpx.Response(
        rendered.status,
        json=rendered.body,
        request=httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions"),
    )
    raised = client._make_status_error_from_response(response)
    assert isinstance(raised, openai.ConflictError)
    assert raised.code == "conversation_paused"


def test_a_newer_kind_inside_a_tool_result_pauses_too():
    data = stored(conversation())
    data["messages"][2]["blocks"][0]["content"][0]["kind"] = "hologram"
    with pytest.raises(ConversationPaused, match=r"block 'm2\.b0\.c0' \(messages\[2\]\)"):
        load_for(CURRENT, data)


def test_a_graph_of_known_kinds_loads_unchanged():
    seq = conversation()
    loaded = load_for(CURRENT, stored(seq))
    assert loaded == seq
    assert CURRENT.adapter().render_request(loaded) == ADAPTER.render_request(seq)


def test_a_stored_block_with_content_this_version_cannot_represent_pauses():
    # A newer version added a field to text blocks; this one would silently drop it.
    data = stored(conversation())
    block = data["messages"][0]["blocks"][0]
    block["emphasis"] = "strong"
    newer = {"kind": "text", "text": block["text"], "attrs": {}, "emphasis": "strong"}
    newer["role"] = "user"
    block["digest"] = digest_of(newer)
    digests = [[m["role"], [b["digest"] for b in m["blocks"]]] for m in data["messages"]]
    data["sequenceDigest"] = digest_of(digests)
    with pytest.raises(ConversationPaused, match="cannot represent"):
        load_for(CURRENT, data)


def test_a_stored_graph_that_does_not_load_pauses():
    data = stored(conversation())
    data["schemaVersion"] = "turngate.MessageSequence.v2"
    with pytest.raises(ConversationPaused, match="does not load for adapter openai_chat@1"):
        load_for(CURRENT, data)


def with_compression() -> MessageSequence:
    seq = conversation()
    compressed = CompressionBlock(
        id="m3.b0",
        role="user",
        order=99,
        trust="untrusted",
        provider="openai_responses",
        payload="opaque",
        scope="user",
    )
    extra = Message(index=3, role="user", blocks=(compressed,))
    return dataclasses.replace(seq, messages=(*seq.messages, extra))


def test_two_versions_coexist_and_a_route_pins_one():
    config = PolicyFile.model_validate(
        {
            "routes": [
                {"match": {"model": "legacy-*"}, "adapter_versions": {"openai_chat": "0"}},
            ]
        }
    )
    legacy = REGISTRY.pinned("openai_chat", config.policy_for("openai_chat", "legacy-4o"))
    current = REGISTRY.pinned("openai_chat", config.policy_for("openai_chat", "gpt-4o"))
    assert (legacy.id, current.id) == ("openai_chat@0", "openai_chat@1")
    assert legacy.adapter() is chat_v0.ADAPTER
    assert current.adapter() is ADAPTER
    assert [v.version for v in REGISTRY.versions("openai_chat")] == ["0", "1"]

    # A graph holding a compression block: the current version renders it, the pinned older
    # one pauses instead of guessing.
    seq = with_compression()
    ensure_known(seq, current)
    assert load_for(current, stored(seq)) == seq
    with pytest.raises(ConversationPaused, match=r"kind 'compression'.*openai_chat@0"):
        ensure_known(seq, legacy)
    with pytest.raises(ConversationPaused, match=r"kind 'compression'.*openai_chat@0"):
        load_for(legacy, stored(seq))
    # Without such a block the older version works as before.
    plain = conversation()
    ensure_known(plain, legacy)
    assert legacy.adapter().render_request(load_for(legacy, stored(plain))) == (
        ADAPTER.render_request(plain)
    )


def test_pins_naming_no_registered_version_are_found_at_start():
    config = PolicyFile.model_validate(
        {
            "defaults": {"adapter_versions": {"openai_chat": "1"}},
            "routes": [{"match": {"prefix": "gemini"}, "adapter_versions": {"gemini": "7"}}],
        }
    )
    policies = [config.defaults, config.policy_for("gemini", "gemini-2.5-pro")]
    assert REGISTRY.unknown_pins(policies) == ["gemini has no adapter version '7' (registered: 1)"]


def test_the_registry_orders_versions_numerically_and_refuses_duplicates():
    registry = AdapterRegistry(
        [
            AdapterVersion("gemini", "9", "x"),
            AdapterVersion("gemini", "10", "y"),
            AdapterVersion("gemini", "9.1", "z"),
        ]
    )
    assert registry.current("gemini").version == "10"
    with pytest.raises(ValueError, match="registered twice"):
        registry.register(AdapterVersion("gemini", "9", "again"))
    with pytest.raises(LookupError, match="no adapter is registered for anthropic"):
        registry.current("anthropic")
    wrong = AdapterVersion("openai_chat", "2", "turngate.adapters.openai_chat")
    with pytest.raises(LookupError, match="is version 1, not 2"):
        wrong.adapter()

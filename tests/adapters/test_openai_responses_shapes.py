"""How each Responses item and part is modelled, and that every form renders back as sent."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from turngate.adapters.openai_responses import ADAPTER, CAPABILITIES
from turngate.errors import UpstreamProtocolError
from turngate.graph.model import (
    AudioBlock,
    CompressionBlock,
    FileBlock,
    ImageBlock,
    ReasoningBlock,
    RefusalBlock,
    ServerToolBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    UnknownBlock,
)
from turngate.graph.validator import validate

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n fake image").decode()
PDF = base64.b64encode(b"%PDF-1.7 fake").decode()

USER_PARTS = {
    "type": "message",
    "role": "user",
    "content": [
        {"type": "input_text", "text": "Compare these."},
        {"type": "input_image", "detail": "auto", "image_url": f"data:image/png;base64,{PNG}"},
        {"type": "input_image", "detail": "high", "image_url": "https://example.com/cat.jpg"},
        {"type": "input_image", "detail": "low", "file_id": "file-abc", "image_url": None},
        {
            "type": "input_file",
            "filename": "a.pdf",
            "file_data": f"data:application/pdf;base64,{PDF}",
        },
        {"type": "input_file", "file_id": "file-pdf"},
        {"type": "input_file", "file_url": "https://example.com/b.pdf"},
        {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
    ],
}
ASSISTANT_OUTPUT = {
    "type": "message",
    "id": "msg_1",
    "role": "assistant",
    "status": "completed",
    "phase": "commentary",
    "content": [
        {"type": "output_text", "text": "Looking.", "annotations": [], "logprobs": []},
        {"type": "refusal", "refusal": "I cannot open the second file."},
    ],
}
HOSTED = [
    {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "q", "sources": [{"type": "url", "url": "u"}]},
    },
    {"type": "file_search_call", "id": "fs_1", "queries": ["q"], "status": "completed"},
    {
        "type": "computer_call",
        "id": "cu_1",
        "call_id": "call_cu",
        "action": {"type": "click", "button": "left", "x": 1, "y": 2},
        "pending_safety_checks": [],
        "status": "completed",
    },
    {
        "type": "computer_call_output",
        "call_id": "call_cu",
        "output": {"type": "computer_screenshot", "image_url": "https://example.com/s.png"},
    },
    {
        "type": "code_interpreter_call",
        "id": "ci_1",
        "code": "1+1",
        "container_id": "cntr_1",
        "outputs": [{"type": "logs", "logs": "2"}],
        "status": "completed",
    },
    {"type": "image_generation_call", "id": "ig_1", "result": None, "status": "generating"},
    {
        "type": "local_shell_call",
        "id": "ls_1",
        "call_id": "call_ls",
        "action": {"type": "exec", "command": ["ls"], "env": {}},
        "status": "completed",
    },
    {"type": "local_shell_call_output", "id": "ls_1", "output": "a.txt"},
    {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "s", "tools": []},
    {
        "type": "mcp_approval_request",
        "id": "mcpr_1",
        "arguments": "{}",
        "name": "t",
        "server_label": "s",
    },
    {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True},
]


def body_of(*items: Any, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-5", "input": list(items), **extra}


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"model": "gpt-5", "input": "Just a string."}, id="input-string"),
        pytest.param(
            {"model": "gpt-5", "instructions": "Be brief.", "input": "Hi"}, id="instructions"
        ),
        pytest.param({"model": "gpt-5", "instructions": "", "input": []}, id="empty"),
        pytest.param({"model": "gpt-5", "previous_response_id": "resp_1"}, id="no-input"),
        pytest.param(body_of(USER_PARTS), id="user-parts"),
        pytest.param(body_of({"role": "developer", "content": "Rules."}), id="developer"),
        pytest.param(body_of({"role": "user", "content": "q"}, ASSISTANT_OUTPUT), id="output-msg"),
        pytest.param(body_of(*HOSTED), id="hosted-items"),
        pytest.param(
            body_of(
                {"type": "compaction", "id": "cmp_1", "encrypted_content": "enc=="},
                {"role": "user", "content": "go on"},
                {"type": "compaction_trigger"},
            ),
            id="compaction",
        ),
        pytest.param(
            body_of({"id": "msg_9"}, {"type": "item_reference", "id": "rs_9"}), id="references"
        ),
        pytest.param(
            body_of(
                {"role": "user", "content": "q"},
                {"type": "configuration_update", "id": "cfg_1", "reasoning": {"effort": "high"}},
                {
                    "type": "program",
                    "id": "prg_1",
                    "call_id": "p1",
                    "code": "x",
                    "fingerprint": "f",
                },
                {
                    "type": "program_output",
                    "id": "po_1",
                    "call_id": "p1",
                    "result": "r",
                    "status": "completed",
                },
                {"type": "additional_tools", "id": "at_1", "role": "developer", "tools": []},
                tools=[{"type": "namespace", "name": "crm", "description": "d", "tools": []}],
            ),
            id="programs-and-settings",
        ),
        pytest.param(
            body_of(
                {"role": "user", "content": "q"},
                {
                    "type": "function_call",
                    "id": "fc_1",
                    "call_id": "call_1",
                    "name": "f",
                    "arguments": "{}",
                    "namespace": "ns",
                    "status": "completed",
                },
                {
                    "type": "function_call_output",
                    "id": "fco_1",
                    "call_id": "call_1",
                    "output": [
                        {"type": "input_text", "text": "see image"},
                        {"type": "input_image", "detail": "auto", "image_url": "https://x/y.png"},
                    ],
                    "status": "completed",
                },
                {"type": "function_call", "call_id": "call_2", "name": "f", "arguments": "{}"},
                {
                    "type": "function_call_output",
                    "call_id": "call_2",
                    "output": [{"type": "input_text", "text": "one part, still a list"}],
                },
            ),
            id="call-with-parts-output",
        ),
        pytest.param(
            body_of(
                {
                    "type": "function_call_output",
                    "id": "fco_1",
                    "name": "create_thread",
                    "namespace": "codex_app",
                    "output": "<codex_delegation>fix the build</codex_delegation>",
                    "internal_chat_message_metadata_passthrough": {},
                },
                {"type": "custom_tool_call_output", "name": "notes", "output": [{"type": "x"}]},
            ),
            id="named-outputs-without-a-call",
        ),
        pytest.param(
            body_of(
                {"type": "hologram", "value": 1},
                7,
                {"role": "narrator", "content": "x"},
                {"role": "user", "content": [3, {"type": "input_smell"}]},
            ),
            id="unknowns",
        ),
        pytest.param(
            body_of(
                {"role": "user", "content": "q"},
                tools=[
                    {"type": "function", "name": "f", "description": None, "parameters": None},
                    {
                        "type": "function",
                        "name": "g",
                        "parameters": {"type": "object"},
                        "strict": True,
                    },
                    {"type": "custom", "name": "sql", "format": {"type": "text"}},
                    {"type": "web_search", "search_context_size": "low"},
                ],
            ),
            id="tools",
        ),
    ],
)
def test_body_renders_back_as_sent(body: dict[str, Any]) -> None:
    assert ADAPTER.render_request(ADAPTER.parse_request(body)) == body


def test_parts_are_modelled_with_the_shared_media_convention() -> None:
    seq = ADAPTER.parse_request(body_of(USER_PARTS))
    blocks = seq.messages[0].blocks
    kinds = [type(b) for b in blocks]
    assert kinds == [
        TextBlock,
        ImageBlock,
        ImageBlock,
        ImageBlock,
        FileBlock,
        FileBlock,
        FileBlock,
        AudioBlock,
    ]
    image_b64, image_url, image_file = blocks[1], blocks[2], blocks[3]
    assert isinstance(image_b64, ImageBlock)
    assert (image_b64.source, image_b64.data, image_b64.media_type) == ("base64", PNG, "image/png")
    assert isinstance(image_url, ImageBlock)
    assert image_url.source == "url"
    assert isinstance(image_file, ImageBlock)
    assert (image_file.source, image_file.data) == ("file", "file-abc")
    pdf = blocks[4]
    assert isinstance(pdf, FileBlock)
    assert (pdf.source, pdf.data, pdf.media_type, pdf.filename) == (
        "base64",
        PDF,
        "application/pdf",
        "a.pdf",
    )
    assert [b.source for b in blocks[5:7] if isinstance(b, FileBlock)] == ["file", "url"]
    audio = blocks[7]
    assert isinstance(audio, AudioBlock)
    assert audio.media_type == "audio/wav"
    assert [b.id for b in blocks] == [f"m0.b{j}" for j in range(8)]


def test_instructions_become_a_system_message_named_by_its_field() -> None:
    seq = ADAPTER.parse_request({"model": "m", "instructions": "Be brief.", "input": "Hi"})
    system, user = seq.messages
    assert (system.role, system.origin, system.location) == (
        "system",
        "instructions",
        "instructions[0]",
    )
    assert system.blocks[0].trust == "trusted"
    assert (user.role, user.origin, user.index) == ("user", "input", 0)
    assert [b.order for m in seq.messages for b in m.blocks] == [0, 1]


def test_items_become_the_right_blocks() -> None:
    fc = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "f",
        "arguments": "{}",
    }
    items = [
        {"role": "user", "content": "q"},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [
                {"type": "summary_text", "text": "one"},
                {"type": "summary_text", "text": "two"},
            ],
            "encrypted_content": "ENC+/==",
        },
        fc,
        {"type": "function_call_output", "call_id": "call_1", "output": "ok"},
        ASSISTANT_OUTPUT,
        *HOSTED,
        {"type": "compaction", "encrypted_content": "cmp=="},
        {"type": "item_reference", "id": "msg_0"},
    ]
    seq = ADAPTER.parse_request(body_of(*items))
    by_index = {m.index: m for m in seq.messages}
    rs = by_index[1].blocks[0]
    assert isinstance(rs, ReasoningBlock)
    assert (rs.provider, rs.payload, rs.text, rs.attrs["id"]) == (
        "openai_responses",
        "ENC+/==",
        "one\n\ntwo",
        "rs_1",
    )
    # The two summary parts stay two parts in the native form.
    assert len(rs.attrs["summary"]) == 2
    call = by_index[2].blocks[0]
    assert isinstance(call, ToolCallBlock)
    assert (call.call_id, call.attrs["id"], call.argument_state) == ("call_1", "fc_1", "complete")
    result = by_index[3].blocks[0]
    assert isinstance(result, ToolResultBlock)
    assert result.role == "tool"
    assert [b.kind for b in by_index[4].blocks] == ["text", "refusal"]
    assert isinstance(by_index[4].blocks[1], RefusalBlock)
    assert by_index[4].attrs["phase"] == "commentary"
    hosted = [by_index[5 + k].blocks[0] for k in range(len(HOSTED))]
    assert all(isinstance(b, ServerToolBlock) and b.provider == "openai_responses" for b in hosted)
    assert [b.name for b in hosted if isinstance(b, ServerToolBlock)] == [h["type"] for h in HOSTED]
    answers = {
        b.name: b.role for b in hosted if isinstance(b, ServerToolBlock) and b.phase == "result"
    }
    assert set(answers.values()) == {"tool"}
    compaction = by_index[5 + len(HOSTED)].blocks[0]
    assert isinstance(compaction, CompressionBlock)
    assert compaction.payload == "cmp=="
    reference = by_index[6 + len(HOSTED)].blocks[0]
    assert isinstance(reference, CompressionBlock)
    assert reference.payload == "msg_0"
    verdict = validate(seq, CAPABILITIES)
    assert verdict.status == "READY", verdict.violations


def test_unknown_items_and_parts_are_refused_not_dropped() -> None:
    seq = ADAPTER.parse_request(
        body_of({"type": "hologram"}, {"role": "user", "content": [{"type": "x"}]})
    )
    unknown = [b for m in seq.messages for b in m.blocks if isinstance(b, UnknownBlock)]
    assert [b.native_type for b in unknown] == ["hologram", "x"]
    assert validate(seq, CAPABILITIES).rules == ["unknown_kind", "unknown_kind"]


def test_input_that_is_neither_string_nor_list_is_a_bad_request() -> None:
    from turngate.errors import BadRequestBody

    with pytest.raises(BadRequestBody):
        ADAPTER.parse_request({"model": "m", "input": {"role": "user"}})


def test_incomplete_response_stops_for_its_reason_and_running_has_no_stop() -> None:
    body: dict[str, Any] = {
        "id": "resp_1",
        "object": "response",
        "model": "gpt-5",
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"},
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": "f",
                "arguments": '{"a": ',
                "status": "incomplete",
            },
        ],
        "usage": None,
    }
    turn = ADAPTER.parse_response(body)
    assert turn.stop_reason == "max_output_tokens"
    assert [b.kind for b in turn.blocks] == ["reasoning", "tool_call"]
    assert turn.tool_calls[0].argument_state == "incomplete"
    assert turn.usage is None
    assert ADAPTER.parse_response({**body, "status": "in_progress"}).stop_reason is None
    assert ADAPTER.parse_response({**body, "status": "failed"}).stop_reason == "failed"


def test_a_body_that_is_not_a_response_is_an_upstream_protocol_error() -> None:
    with pytest.raises(UpstreamProtocolError):
        ADAPTER.parse_response({"object": "chat.completion", "choices": []})
    with pytest.raises(UpstreamProtocolError):
        ADAPTER.parse_response({"object": "response", "output": None})

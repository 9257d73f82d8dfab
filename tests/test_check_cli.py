"""`turngate check`: READY for every recorded Chat body, violations printed, exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tests.adapters.anthropic_builders import assistant as claude_assistant
from tests.adapters.anthropic_builders import body as claude_body
from tests.adapters.anthropic_builders import tool_result
from tests.adapters.anthropic_builders import user as claude_user
from tests.fixtures_dir import fixture_paths
from tests.graph.chat_builders import assistant, body, call, tool, user
from turngate.cli import main


def run(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["check", *args])
    return code, capsys.readouterr().out


def test_every_recorded_chat_body_prints_ready(capsys: pytest.CaptureFixture[str]):
    paths = fixture_paths("openai-chat/*.request.json")
    if not paths:
        pytest.skip("recorded fixtures ABSENT")
    code, out = run(*map(str, paths), capsys=capsys)
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == len(paths)
    assert all(": READY (openai_chat," in line for line in lines)


def test_a_rejection_prints_rule_location_and_exits_1(tmp_path: Path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_bytes(orjson.dumps(body(user("hi"), assistant("hello"), tool("call_7"))))
    code, out = run(str(bad), capsys=capsys)
    assert code == 1
    assert "REJECTED" in out
    assert "orphan_result" in out
    assert "messages[2] block m2.b0 call call_7" in out


def test_waiting_is_reported_without_failing(tmp_path: Path, capsys):
    waiting = tmp_path / "waiting.json"
    waiting.write_bytes(orjson.dumps(body(user("hi"), assistant(calls=[call("c1")]))))
    code, out = run(str(waiting), capsys=capsys)
    assert code == 0
    assert "WAITING" in out
    assert "missing_result" in out


def test_json_output_for_machines(tmp_path: Path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_bytes(orjson.dumps(body(user("hi"), assistant("x"), tool("call_7"))))
    code, out = run("--json", str(bad), capsys=capsys)
    (report,) = orjson.loads(out)
    assert code == 1
    assert report["status"] == "REJECTED"
    assert report["violations"][0]["rule"] == "orphan_result"
    assert report["violations"][0]["callId"] == "call_7"


def test_jsonl_transcript_of_messages_is_one_conversation(tmp_path: Path, capsys):
    lines = [user("hi"), assistant(calls=[call("c1")]), tool("c1"), tool("c1")]
    transcript = tmp_path / "t.jsonl"
    transcript.write_bytes(b"\n".join(orjson.dumps(line) for line in lines) + b"\n")
    code, out = run("--api", "openai_chat", str(transcript), capsys=capsys)
    assert code == 1
    assert "(transcript): REJECTED" in out
    assert "duplicate_result" in out


def test_jsonl_of_request_bodies_checks_each_line(tmp_path: Path, capsys):
    good = body(user("hi"))
    bad = body(user("hi"), tool("nope"))
    path = tmp_path / "bodies.jsonl"
    path.write_bytes(orjson.dumps(good) + b"\n" + orjson.dumps(bad) + b"\n")
    code, out = run(str(path), capsys=capsys)
    assert code == 1
    assert f"{path}:1: READY" in out
    assert f"{path}:2: REJECTED" in out


def test_unreadable_and_non_json_files_are_errors_with_exit_2(tmp_path: Path, capsys):
    junk = tmp_path / "junk.txt"
    junk.write_text("not json {")
    code, out = run(str(junk), str(tmp_path / "missing.json"), capsys=capsys)
    assert code == 2
    assert "junk.txt: ERROR not JSON or JSONL" in out
    assert "missing.json: ERROR cannot read" in out


def test_console_script_and_schema_command():
    result = subprocess.run(
        [sys.executable, "-m", "turngate.cli", "schema", "sequence"],
        capture_output=True,
        check=True,
    )
    schema = orjson.loads(result.stdout)
    assert schema["title"] == "MessageSequence.v1"
    assert "ToolCallBlock" in schema["$defs"]


ORPHAN = body(user("hi"), assistant("hello"), tool("call_7"))
VALID = body(user("weather?"), assistant(calls=[call("c1")]), tool("c1"))


def test_an_openai_batch_file_is_checked_line_by_line(tmp_path: Path, capsys):
    lines = [
        {"custom_id": "ok", "method": "POST", "url": "/v1/chat/completions", "body": VALID},
        {"custom_id": "emb", "method": "POST", "url": "/v1/embeddings", "body": {"input": "x"}},
        {"custom_id": "bad", "method": "POST", "url": "/v1/chat/completions", "body": ORPHAN},
    ]
    path = tmp_path / "batch.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(line) for line in lines) + b"\n")
    code, out = run(str(path), capsys=capsys)
    assert code == 1
    lines_out = [line for line in out.splitlines() if not line.startswith(" ")]
    assert lines_out[0].startswith(f"{path} line 1 (ok): READY (openai_chat,")
    assert lines_out[1].startswith(f"{path} line 3 (bad): REJECTED (openai_chat,")
    assert len(lines_out) == 2
    assert "orphan_result" in out


def test_an_anthropic_batch_body_is_checked_request_by_request(tmp_path: Path, capsys):
    orphan = claude_body(
        claude_user("hi"), claude_assistant("hello"), claude_user(tool_result("t7"))
    )
    batch = {
        "requests": [
            {"custom_id": "fine", "params": claude_body(claude_user("hi"))},
            {"custom_id": "orphan", "params": orphan},
        ]
    }
    path = tmp_path / "batch.json"
    path.write_bytes(orjson.dumps(batch))
    code, out = run("--json", str(path), capsys=capsys)
    assert code == 1
    reports = orjson.loads(out)
    assert [(r["source"], r["api"], r["status"]) for r in reports] == [
        (f"{path} requests[0] (fine)", "anthropic", "READY"),
        (f"{path} requests[1] (orphan)", "anthropic", "REJECTED"),
    ]


def test_a_gemini_batch_file_is_checked_line_by_line(tmp_path: Path, capsys):
    ask = {"role": "user", "parts": [{"text": "weather?"}]}
    answer = {"role": "model", "parts": [{"functionCall": {"name": "weather", "args": {}}}]}
    lines = [
        {"key": "asks", "request": {"contents": [ask]}},
        {"key": "waits", "request": {"contents": [ask, answer]}},
        {
            "key": "stray",
            "request": {
                "contents": [
                    ask,
                    {
                        "role": "user",
                        "parts": [{"functionResponse": {"name": "weather", "response": {"t": 18}}}],
                    },
                ]
            },
        },
    ]
    path = tmp_path / "gemini.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(line) for line in lines))
    code, out = run("--json", str(path), capsys=capsys)
    assert code == 1
    reports = orjson.loads(out)
    assert [(r["source"], r["status"]) for r in reports] == [
        (f"{path} line 1 (asks)", "READY"),
        (f"{path} line 2 (waits)", "WAITING"),
        (f"{path} line 3 (stray)", "REJECTED"),
    ]


def test_the_anthropic_beta_a_body_was_sent_with_is_named_on_the_command_line(
    tmp_path: Path, capsys
):
    """A budget past max_tokens is refused, unless the header the body was sent with turned
    on interleaved thinking; a batch is judged the same way."""
    thinking = {"type": "enabled", "budget_tokens": 32000}
    request = claude_body(claude_user("plan it"), thinking=thinking)
    single, batch = tmp_path / "plan.json", tmp_path / "batch.json"
    single.write_bytes(orjson.dumps(request))
    batch.write_bytes(orjson.dumps({"requests": [{"custom_id": "p", "params": request}]}))
    code, out = run(str(single), str(batch), capsys=capsys)
    assert code == 1
    assert out.count("anthropic_thinking_budget") == 2
    beta = "--anthropic-beta=context-1m-2025-08-07, Interleaved-Thinking-2025-05-14"
    code, out = run(beta, str(single), str(batch), capsys=capsys)
    assert code == 0, out
    assert out.count(": READY (anthropic,") == 2


def test_the_anthropic_version_a_body_was_sent_with_is_named_on_the_command_line(
    tmp_path: Path, capsys
):
    """Under 2026-10-21 the body takes no temperature at all; under 2023-06-01 (the default
    the check judges by) temperature 1 is fine."""
    sampled = tmp_path / "sampled.json"
    sampled.write_bytes(orjson.dumps(claude_body(claude_user("hi"), temperature=1)))
    code, out = run("--api", "anthropic", str(sampled), capsys=capsys)
    assert code == 0, out
    code, out = run("--anthropic-version", "2026-10-21", str(sampled), capsys=capsys)
    assert code == 1
    assert "anthropic-version 2026-10-21 takes no temperature" in out


def test_the_path_a_gemini_body_was_sent_on_is_named_on_the_command_line(tmp_path: Path, capsys):
    """A Gemini body names neither its model nor its service: the rules they decide (a
    penalty Gemini 2.5 does not take, an output limit Vertex AI refuses) are left to Google
    unless --gemini-path gives the path; a path that is no Gemini chat path is an error."""
    config = {"maxOutputTokens": 65536, "presencePenalty": 0.5}
    request = {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "generationConfig": config,
    }
    single, transcript = tmp_path / "ask.json", tmp_path / "history.jsonl"
    single.write_bytes(orjson.dumps(request))
    answer = {"role": "model", "parts": [{"text": "hello"}]}
    lines = [request["contents"][0], answer, request["contents"][0]]
    transcript.write_bytes(b"\n".join(orjson.dumps(line) for line in lines))
    code, out = run("--api", "gemini", str(single), capsys=capsys)
    assert (code, out.count(": READY (gemini,")) == (0, 1), out
    api_path = "/v1beta/models/gemini-2.5-flash:generateContent"
    code, out = run("--gemini-path", api_path, str(single), capsys=capsys)
    assert code == 1
    assert "gemini_penalty" in out
    assert "gemini_max_output" not in out
    vertex = (
        "/v1beta1/projects/acme/locations/us-central1/publishers/google/models/"
        "gemini-2.0-flash:streamGenerateContent?alt=sse"
    )
    code, out = run("--gemini-path", vertex, str(single), str(transcript), capsys=capsys)
    assert code == 1
    assert "gemini_max_output" in out
    assert "gemini_penalty" not in out
    assert f"{transcript} (transcript): READY (gemini," in out
    assert run("--gemini-path", "/v1/chat/completions", str(single), capsys=capsys)[0] == 2

"""`turngate check`: READY for every recorded Chat body, violations printed, exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

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

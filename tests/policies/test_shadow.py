"""Shadow mode over every recorded request, a seeded mismatch in the report, and the caps."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.fixtures_dir import COUNTS, fixture_params, fixture_paths
from tests.graph.chat_builders import assistant, body, call, tool, user
from turngate.adapters import detect_api, get_adapter
from turngate.adapters.openai_chat import ADAPTER, CAPABILITIES
from turngate.graph.model import MessageSequence
from turngate.graph.validator import validate
from turngate.policies.config import ShadowPolicy
from turngate.policies.diff import (
    ShadowRecord,
    byte_diff,
    failed_render_record,
    semantic_diff,
    shadow_record,
)
from turngate.policies.report import aggregate, format_report

POLICY = ShadowPolicy()


def shadow(raw: bytes, render: Any = None) -> tuple[MessageSequence, ShadowRecord]:
    """What the proxy does in shadow mode: the client's bytes go out; turngate records."""
    request = orjson.loads(raw)
    api = detect_api(request)
    assert api is not None
    adapter = get_adapter(api)
    seq = adapter.parse_request(request)
    verdict = validate(seq, adapter.capabilities)
    rendered = (render or adapter.render_request)(seq)
    record = shadow_record(
        api=api,
        model=seq.model,
        raw=raw,
        body=request,
        rendered=rendered,
        verdict=verdict,
        policy=POLICY,
        operation_id=f"op_{len(raw)}",
        now=1_700_000_000.0,
    )
    return seq, record


@pytest.mark.parametrize("path", fixture_params("*/*.request.json"))
def test_shadowing_a_recorded_request_changes_no_byte(path: Path):
    raw = path.read_bytes()
    _seq, record = shadow(raw)
    assert record.bytes.equal, record.bytes
    assert record.bytes.sent_length == record.bytes.would_send_length == len(raw)
    assert record.semantic.equal
    assert record.semantic.changes == ()
    assert ShadowRecord.from_json(orjson.loads(orjson.dumps(record.to_json()))) == record
    COUNTS[f"shadow: recorded requests with 0 byte changes, {record.api}"] += 1


def swap_parallel_results(seq: MessageSequence) -> dict[str, Any]:
    """A renderer that puts the first two of a run of tool messages in the other order."""
    messages = list(seq.messages)
    for i in range(len(messages) - 1):
        if messages[i].role == "tool" and messages[i + 1].role == "tool":
            messages[i], messages[i + 1] = messages[i + 1], messages[i]
            break
    return ADAPTER.render_request(dataclasses.replace(seq, messages=tuple(messages)))


def parallel_result_fixtures() -> list[Path]:
    out = []
    for path in fixture_paths("openai-chat/*.request.json"):
        roles = [m.get("role") for m in orjson.loads(path.read_bytes())["messages"]]
        if any(a == b == "tool" for a, b in itertools.pairwise(roles)):
            out.append(path)
    return out


def test_a_seeded_reordering_of_parallel_results_shows_in_the_report_by_path():
    seeded = parallel_result_fixtures()
    if not seeded:
        pytest.skip("recorded fixtures ABSENT")
    records = [shadow(p.read_bytes())[1] for p in fixture_paths("openai-chat/*.request.json")]
    swapped = [shadow(p.read_bytes(), swap_parallel_results)[1] for p in seeded]
    report = aggregate([*records, *swapped])
    assert report.records == len(records) + len(seeded)
    assert report.bytes_equal == len(records)
    assert report.bytes_changed == report.semantic_changed == len(seeded)
    # Chat accepts results in any order: nothing would be refused, only the diff shows it.
    assert report.would_refuse == 0
    assert report.by_path["changed messages[*].tool_call_id"] == len(seeded)
    assert report.path_occurrences["changed messages[*].tool_call_id"] == 2 * len(seeded)
    text = format_report(report)
    assert f"changed messages[*].tool_call_id: {len(seeded)} (" in text
    example = report.path_examples["changed messages[*].tool_call_id"][0]
    assert example.api == "openai_chat"
    assert example.detail.startswith("messages[")
    COUNTS["shadow: seeded reorderings found in the report"] += report.by_path[
        "changed messages[*].tool_call_id"
    ]


def test_what_the_validator_would_refuse_is_counted_by_rule():
    missing = orjson.dumps(body(user("hi"), assistant(calls=[call("a"), call("b")]), tool("a")))
    orphan = orjson.dumps(body(user("hi"), assistant("hello"), tool("call_7")))
    fine = orjson.dumps(body(user("hi")))
    records = [shadow(raw)[1] for raw in (missing, orphan, orphan, fine)]
    report = aggregate(records, examples=1)
    assert report.would_refuse == 3
    assert report.by_rule == {"missing_result": 1, "orphan_result": 2}
    assert len(report.rule_examples["orphan_result"]) == 1
    text = format_report(report)
    assert "  orphan_result: 2\n    e.g. op_" in text
    assert "would refuse: 3" in text


def test_a_request_turngate_cannot_render_is_recorded_with_its_rule():
    raw = orjson.dumps(body(user("hi")))
    seq = ADAPTER.parse_request(orjson.loads(raw))
    record = failed_render_record(
        api="openai_chat",
        model="gpt-4o",
        raw=raw,
        rule="unsupported_in_target",
        verdict=validate(seq, CAPABILITIES),
    )
    report = aggregate([record])
    assert (report.render_failed, report.would_refuse) == (1, 1)
    assert report.by_rule == {"unsupported_in_target": 1}


def test_byte_diff_names_the_first_differing_offset_and_both_lengths():
    assert byte_diff(b"abc", b"abc").equal
    changed = byte_diff(b'{"a":1,"b":2}', b'{"a":1,"b":3}')
    assert (changed.equal, changed.first_difference) == (False, 11)
    longer = byte_diff(b"abc", b"abcd")
    assert (longer.first_difference, longer.sent_length, longer.would_send_length) == (3, 3, 4)


def test_semantic_diff_kinds_paths_and_json_equality():
    sent = {"a": 1, "b": [1, 2, 3], "c": {"d": True}, "e": "x"}
    would = {"a": 1.0, "b": [1, 9], "c": {"d": 1}, "f": None}
    diff = semantic_diff(sent, would, POLICY)
    assert [(c.kind, c.path, c.sent, c.would_send) for c in diff.changes] == [
        ("changed", "b[1]", "2", "9"),
        ("removed", "b[2]", "3", None),
        ("changed", "c.d", "true", "1"),
        ("removed", "e", '"x"', None),
        ("added", "f", None, "null"),
    ]
    assert semantic_diff([1], [1], POLICY).equal
    assert semantic_diff(1, 2, POLICY).changes[0].path == "$"


def test_a_semantic_diff_keeps_at_most_max_paths_and_clips_examples():
    policy = ShadowPolicy(max_paths=3, max_example_chars=16)
    sent = {"messages": [{"content": "x" * 100} for _ in range(10)]}
    would = {"messages": [{"content": "y" * 100} for _ in range(10)]}
    diff = semantic_diff(sent, would, policy)
    assert (len(diff.changes), diff.total, diff.truncated) == (3, 10, True)
    assert all(len(c.sent or "") == 16 and c.sent.endswith("…") for c in diff.changes)  # type: ignore[union-attr]
    report = aggregate(
        [dataclasses.replace(shadow(orjson.dumps(body(user("hi"))))[1], semantic=diff)]
    )
    assert report.truncated == 1
    assert "(1 with more paths than kept)" in format_report(report)


def test_hashed_values_keep_no_prompt_text():
    policy = ShadowPolicy(values="hashed")
    diff = semantic_diff({"content": "my secret"}, {"content": "my secreT"}, policy)
    (change,) = diff.changes
    assert "secret" not in (change.sent or "") + (change.would_send or "")
    assert change.sent is not None
    assert change.sent.startswith("sha256:")
    assert change.sent.endswith("(11 bytes)")

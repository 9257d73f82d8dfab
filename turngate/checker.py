"""`turngate check`: validate request bodies, transcripts and batches offline.

A file is one request body (JSON), or JSONL: either one request body per line, or one
message per line (a transcript), which is checked as the message list of one request. A
batch is checked request by request, each reported under its place and name: an Anthropic
Message Batches body or a Gemini ``batchGenerateContent`` body (JSON), an OpenAI Batch API
input file or a Gemini batch input file (JSONL).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import orjson

from turngate.adapters import detect_api, get_adapter
from turngate.adapters.base import RouteInfo
from turngate.adapters.batches import BatchEntry, batch_entries, gemini_file_lines
from turngate.adapters.openai_batch import batch_lines
from turngate.errors import TurngateError
from turngate.graph.validator import Violation, validate

_LIST_KEY = {
    "openai_chat": "messages",
    "anthropic": "messages",
    "openai_responses": "input",
    "gemini": "contents",
}


# A body checked as sent with no header that changes what the API accepts.
_NO_HEADERS = RouteInfo()
# A Gemini batch body names its model in the path, which a file does not hold.
_GEMINI_MODEL = "batch"


@dataclass
class Report:
    source: str
    api: str | None
    status: str  # READY | WAITING | REJECTED | ERROR
    messages: int = 0
    revision: int = 0
    violations: list[Violation] = field(default_factory=list)
    findings: list[Violation] = field(default_factory=list)
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "api": self.api,
            "status": self.status,
            "messages": self.messages,
            "conversationRevision": self.revision,
            "violations": [v.to_json() for v in self.violations],
            "findings": [v.to_json() for v in self.findings],
            "error": self.error,
        }


def check_file(
    path: Path,
    api: str | None,
    sent_with: RouteInfo = _NO_HEADERS,
    *,
    gemini_route: RouteInfo | None = None,
) -> list[Report]:
    """``sent_with``: what the headers the bodies were sent with asked of the API;
    ``gemini_route``: what the path a Gemini body was sent on says (its model, its service,
    whether it streams)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return [Report(str(path), api, "ERROR", error=f"cannot read: {exc.strerror}")]
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    else:
        entries = list(_batch_body(value, sent_with))
        if entries:
            return [check_entry(str(path), entry) for entry in entries]
        return [check_body(str(path), value, api, sent_with, gemini_route=gemini_route)]
    lines = [line for line in raw.splitlines() if line.strip()]
    try:
        values = [orjson.loads(line) for line in lines]
    except orjson.JSONDecodeError as exc:
        return [Report(str(path), api, "ERROR", error=f"not JSON or JSONL: {exc}")]
    if values and all(isinstance(v, dict) and "body" in v and "url" in v for v in values):
        return [check_entry(str(path), entry) for entry in batch_lines(raw)]
    if values and all(isinstance(v, dict) and "request" in v for v in values):
        return [check_entry(str(path), entry) for entry in gemini_file_lines(values)]
    if values and all(isinstance(v, dict) and "role" in v for v in values):
        chosen = api or _detect_transcript(values)
        body: dict[str, Any] = {_LIST_KEY[chosen]: values}
        if chosen in ("openai_chat", "anthropic", "openai_responses"):
            body["model"] = "transcript"
        return [check_body(f"{path} (transcript)", body, chosen, gemini_route=gemini_route)]
    return [
        check_body(f"{path}:{n}", value, api, sent_with, gemini_route=gemini_route)
        for n, value in enumerate(values, start=1)
    ]


def _detect_transcript(messages: list[Any]) -> str:
    if any(m.get("role") == "model" or "parts" in m for m in messages):
        return "gemini"
    if any("type" in m for m in messages):
        return "openai_responses"
    found = detect_api({"messages": messages})
    return found or "openai_chat"


def _batch_body(value: Any, sent_with: RouteInfo) -> Iterator[BatchEntry]:
    if not isinstance(value, dict):
        return
    if isinstance(value.get("requests"), list):
        yield from batch_entries("anthropic", sent_with, value)
    elif isinstance(value.get("batch"), dict):
        yield from batch_entries("gemini", RouteInfo(model=_GEMINI_MODEL, stream=False), value)


def check_entry(path: str, entry: BatchEntry) -> Report:
    named = f" ({entry.name})" if entry.name is not None else ""
    return check_body(f"{path} {entry.location}{named}", entry.body, entry.api, entry.info)


def check_body(
    source: str,
    body: Any,
    api: str | None,
    info: RouteInfo | None = None,
    *,
    gemini_route: RouteInfo | None = None,
) -> Report:
    if not isinstance(body, dict):
        return Report(source, api, "ERROR", error="a request body must be a JSON object")
    chosen = api or detect_api(body)
    if chosen is None:
        return Report(source, None, "ERROR", error="cannot tell which API this body is for")
    try:
        adapter = get_adapter(chosen)
    except ImportError:
        return Report(source, chosen, "ERROR", error=f"no adapter for {chosen} in this build")
    try:
        route = gemini_route if chosen == "gemini" and gemini_route else info or RouteInfo()
        seq = adapter.parse_request(body, route)
    except TurngateError as exc:
        bad = Violation(rule=exc.rule, message=exc.message)
        return Report(source, chosen, "REJECTED", violations=[bad])
    verdict = validate(seq, adapter.capabilities)
    return Report(
        source,
        chosen,
        verdict.status,
        messages=len(seq.messages),
        revision=seq.conversation_revision,
        violations=list(verdict.violations),
        findings=list(verdict.findings),
    )


def print_reports(reports: list[Report], *, as_json: bool, out: TextIO) -> None:
    if as_json:
        out.write(orjson.dumps([r.to_json() for r in reports], option=orjson.OPT_INDENT_2).decode())
        out.write("\n")
        return
    for report in reports:
        if report.status == "ERROR":
            out.write(f"{report.source}: ERROR {report.error}\n")
            continue
        out.write(
            f"{report.source}: {report.status} ({report.api}, {report.messages} messages, "
            f"revision {report.revision})\n"
        )
        for v in report.violations:
            out.write(f"  {v.rule:<22} {_where(v)}  {v.message}\n")
        for v in report.findings:
            out.write(f"  finding {v.rule:<14} {_where(v)}  {v.message}\n")


def _where(v: Violation) -> str:
    parts = [v.location or "-"]
    if v.block_id:
        parts.append(f"block {v.block_id}")
    if v.call_id:
        parts.append(f"call {v.call_id}")
    return " ".join(parts)

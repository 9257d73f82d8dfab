"""The dispatch log line (JSON, one per dispatch, level by outcome and by config) and the
redaction filter on every record."""

from __future__ import annotations

import io
import logging

import orjson
import pytest

from tests.telemetry.helpers import (
    ANTHROPIC_KEY,
    CREDENTIAL_SECRET,
    GEMINI_KEY,
    OPENAI_KEY,
    SECRETS,
    dispatch_log,
)
from turngate.telemetry.logs import DispatchLine, RedactionFilter, log_dispatch
from turngate.telemetry.redaction import REDACTED, Redactor

BASIC = "dXNlcjpwYXNzd29yZA=="
COMMITTED = DispatchLine(
    route="/openai/v1/chat/completions",
    api="openai_chat",
    verdict="READY",
    duration_ms=812.4444,
    operation_id="op_1",
    state="COMMITTED",
    attempt=1,
    upstream_status=200,
    ttfb_ms=301.25,
    upstream_ms=790.0,
    mode="enforce",
)


def test_one_json_line_with_every_field() -> None:
    with dispatch_log() as log:
        log_dispatch(COMMITTED)
    (line,) = log.lines
    assert log.raw.count("\n") == 1
    assert set(line) == {"ts", "level", "logger", "msg"} | set(COMMITTED.to_json())
    assert line["logger"] == "turngate.dispatch"
    assert line["level"] == "info"
    assert line["duration_ms"] == 812.4
    assert line["ttfb_ms"] == 301.2
    assert (line["operation_id"], line["state"], line["upstream_status"]) == (
        "op_1",
        "COMMITTED",
        200,
    )
    assert line["ts"].endswith("Z")


@pytest.mark.parametrize(
    ("state", "upstream_status", "level"),
    [
        ("COMMITTED", 200, "info"),
        (None, None, "info"),  # refused before the claim
        ("FAILED", 400, "info"),  # the provider refused the client's request
        ("FAILED", 503, "warning"),
        ("FAILED", None, "warning"),  # never connected
        ("UNKNOWN", 200, "warning"),
    ],
)
def test_the_level_follows_the_outcome(
    state: str | None, upstream_status: int | None, level: str
) -> None:
    line = DispatchLine(
        route="r",
        api="gemini",
        verdict="READY",
        duration_ms=1.0,
        state=state,
        upstream_status=upstream_status,
    )
    with dispatch_log() as log:
        log_dispatch(line)
    assert [entry["level"] for entry in log.lines] == [level]


def test_the_configured_level_keeps_only_what_it_asks_for() -> None:
    unknown = DispatchLine(
        route="r", api="anthropic", verdict="READY", duration_ms=1.0, state="UNKNOWN"
    )
    with dispatch_log("warning") as log:
        log_dispatch(COMMITTED)
        log_dispatch(unknown)
    assert [entry["state"] for entry in log.lines] == ["UNKNOWN"]


def test_the_filter_masks_credentials_in_every_part_of_a_record() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    handler.addFilter(RedactionFilter(Redactor(SECRETS)))
    logger = logging.getLogger("turngate.test.redaction")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("headers: Authorization: Bearer %s", OPENAI_KEY)
        logger.warning("x-api-key=%s and x-goog-api-key: %s", ANTHROPIC_KEY, GEMINI_KEY)
        logger.warning("relay of /gemini/v1beta/models?alt=sse&key=%s failed", GEMINI_KEY)
        logger.warning("secret in the clear: %s", CREDENTIAL_SECRET)
        logger.warning("Authorization: Basic %s", BASIC)
        logger.warning("dict %s", {"authorization": f"Bearer {OPENAI_KEY}"})
        try:
            raise ValueError(f"upstream said: Incorrect API key provided: {OPENAI_KEY}")
        except ValueError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    text = stream.getvalue()
    for secret in (*SECRETS, BASIC):
        assert secret not in text
    assert text.count(REDACTED) >= 8
    assert "relay of /gemini/v1beta/models?alt=sse&key=[REDACTED] failed" in text
    assert "Incorrect API key provided: [REDACTED]" in text


def test_the_filter_masks_dispatch_fields() -> None:
    line = DispatchLine(
        route=f"/gemini/v1beta/models/m:generateContent?key={GEMINI_KEY}",
        api="gemini",
        verdict="READY",
        duration_ms=1.0,
        rule_codes=[f"odd {CREDENTIAL_SECRET}"],
    )
    with dispatch_log() as log:
        log_dispatch(line)
    assert GEMINI_KEY not in log.raw
    assert CREDENTIAL_SECRET not in log.raw
    assert orjson.loads(log.raw)["route"].endswith("?key=[REDACTED]")


def test_short_configured_values_are_not_masked_everywhere() -> None:
    redactor = Redactor(["abc", CREDENTIAL_SECRET])
    assert redactor.scrub("abc def") == "abc def"
    assert redactor.scrub(f"x{CREDENTIAL_SECRET}y") == f"x{REDACTED}y"

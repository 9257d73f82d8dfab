"""A retry that loses its claim to the revision's canonical turn is a CAS conflict in the
metrics when its answer is no longer kept (a replay is an answer, not a conflict), never a
refusal."""

from __future__ import annotations

import orjson

from tests.clock import Clock
from tests.proxy.helpers import CHAT_ANSWER
from tests.telemetry.helpers import labels, nonzero, points
from tests.telemetry.proxy_stack import TracedStackFactory, traced_stack

CHAT = "/openai/v1/chat/completions"
BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "What changed?"}]}
HEADERS = {"Authorization": "Bearer sk-test", "Turngate-Conversation-Id": "conv-kept"}
KEPT = 60.0

__all__ = ["traced_stack"]


async def test_a_retry_after_the_answer_expired_counts_as_a_commit_cas_conflict(
    traced_stack: TracedStackFactory,
) -> None:
    clock = Clock()
    stack = await traced_stack(tracing=False, clock=clock, replay_ttl=KEPT)
    stack.upstream.reply(CHAT_ANSWER, path="/v1/chat/completions")
    assert (await stack.post(CHAT, BODY, HEADERS))[0] == 200
    assert (await stack.post(CHAT, BODY, HEADERS))[0] == 200  # replayed, kept

    clock.now += KEPT + 3600
    status, body = await stack.post(CHAT, BODY, HEADERS)
    assert status == 409
    assert orjson.loads(body)["error"]["code"] == "dispatch_conflict"
    assert "no longer" in orjson.loads(body)["error"]["message"]

    metrics = points(stack.capture.reader)
    assert nonzero(metrics["turngate.cas.conflicts"]) == {
        labels(api="openai_chat", stage="claim"): 1
    }
    assert "turngate.validator.rejections" not in metrics
    assert len(stack.upstream.received) == 1

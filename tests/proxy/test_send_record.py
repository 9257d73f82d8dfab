"""When an attempt's SEND is written: on its own while a slow upstream thinks, or in the
same store write as the COMMIT of an answer quicker than ``SEND_GRACE``. Either way the
operation's history holds every step, in order. Each test sets the grace far from its
upstream's delay, so a loaded machine does not change which case it is."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tests.proxy.helpers import CHAT_ANSWER, post
from tests.proxy.serve_process import eventually
from tests.proxy.stack import OPENAI_KEY, Stack
from turngate.proxy import attempt
from turngate.state.machine import DispatchState, Transition
from turngate.state.store import OperationRecord

S, T = DispatchState, Transition
CHAT = "/openai/v1/chat/completions"
QUESTION: dict[str, Any] = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}]}
STEPS = [(S.PREPARED, None), (S.DISPATCHING, T.CLAIM), (S.SENT, T.SEND), (S.COMMITTED, T.COMMIT)]


def headers(conversation: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {OPENAI_KEY}", "Turngate-Conversation-Id": conversation}


async def stack_on(make_stack: Any, tmp_path: Path, state: str) -> Stack:
    if state == "sqlite":
        stack: Stack = await make_stack(state=f"sqlite://{tmp_path / 'state.db'}")
    else:
        stack = await make_stack()
    return stack


async def record_of(stack: Stack, operation_id: str) -> OperationRecord:
    record = await stack.store.get(operation_id)
    assert record is not None
    return record


@pytest.mark.parametrize("state", ["memory", "sqlite"])
async def test_a_slow_upstream_shows_sent_while_it_thinks(
    make_stack: Any, tmp_path: Path, state: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(attempt, "SEND_GRACE", 0.01)
    stack = await stack_on(make_stack, tmp_path, state)
    stack.upstream.reply(dataclasses.replace(CHAT_ANSWER, delay=4.0))
    answer = asyncio.ensure_future(post(stack, CHAT, QUESTION, headers("conv-slow")))

    async def sent() -> bool:
        found = await stack.store.conversation_operations("conv-slow", limit=5)
        return [r.state for r in found] == [S.SENT]

    await eventually(sent, timeout=3.0)
    assert not answer.done()  # SENT while the upstream still thinks
    status, got, _body = await answer
    assert status == 200
    record = await record_of(stack, got["Turngate-Operation-Id"])
    assert [(c.state, c.transition) for c in record.history] == STEPS
    assert record.history[2].at < record.history[3].at  # two writes


@pytest.mark.parametrize("state", ["memory", "sqlite"])
async def test_a_quick_answer_writes_send_with_its_commit(
    make_stack: Any, tmp_path: Path, state: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(attempt, "SEND_GRACE", 60.0)
    stack = await stack_on(make_stack, tmp_path, state)
    stack.upstream.reply(CHAT_ANSWER)
    status, got, body = await post(stack, CHAT, QUESTION, headers("conv-quick"))
    assert (status, body) == (200, CHAT_ANSWER.body)
    record = await record_of(stack, got["Turngate-Operation-Id"])
    assert [(c.state, c.transition) for c in record.history] == STEPS
    assert record.history[2].at == record.history[3].at  # one write

"""A batch's results: each answer's tool calls checked, as a non-streamed answer's are,
before the application reads them.

    anthropic  POST /v1/messages/batches         every request checked (proxy/batches.py);
                                                 the tools each one declares kept by the
                                                 batch's id
               GET  /v1/messages/batches/{id}/results      its results, checked
    openai     POST /v1/files (purpose "batch"), or an Uploads API completion
                                                 every line checked; the tools kept by the
                                                 input file's id
               POST /v1/batches, GET /v1/batches[/{id}]    read whole: each batch's output
                                                 file is tied to its input file
               GET  /v1/files/{output file}/content        its results, checked
    gemini     POST /{v}/models/{m}:batchGenerateContent (inlined requests), or an
               upload of a batch input file     every request checked; the tools kept by
                                                the batch's name, or the file's
               GET  /{v}/batches/{id}           read whole: its inlined responses
                                                checked, its responses file tied to its
                                                input file
               GET  /{v}/files/{responses file}:download   its results, checked

    a result that succeeded     its calls checked against its request's tools: kept, or
                                answered as the API's failed result naming the call and
                                the rule (``invalid_tool_call``)
    any other line              relayed as the provider wrote it

A batch's answers are read hours after it was sent, and an agent platform runs their tool
calls as it would a chat answer's: a call whose input breaks its tool's schema must not be
run. The tools are kept in this process and in the state store's logs (proxy/batch_tools.py),
for a restart or another replica; the results of a batch turngate did not see created are
relayed unchecked.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from typing import Any, Literal

import aiohttp
import orjson
from aiohttp import web

from turngate.adapters import get_adapter
from turngate.adapters.batches import ANTHROPIC_BATCHES, json_path
from turngate.errors import TurngateError
from turngate.graph.model import ApiName
from turngate.graph.schema_check import ToolSchemas
from turngate.proxy.batch_tools import BatchToolsets, Expected, learn, recalled
from turngate.proxy.errors import name_the_rule
from turngate.proxy.routes import RouteMatch
from turngate.proxy.turn_check import check_turn
from turngate.proxy.upstream import (
    abort,
    answer_object,
    exchange,
    inbound_headers,
    outbound_headers,
)
from turngate.state.store import StateStore
from turngate.telemetry.prometheus import TELEMETRY

log = logging.getLogger("turngate.proxy")
Form = Literal["anthropic", "openai", "gemini"]
OPENAI_BATCH_OBJECTS = re.compile(r"/v1/batches(?:/[^/]+(?:/cancel)?)?")
GEMINI_BATCH_OBJECT = re.compile(r"/(?:v1|v1beta|v1alpha)/(?P<batch>batches/[^/:]+)")
GEMINI_DOWNLOAD = re.compile(
    r"(?:/download)?/(?:v1|v1beta|v1alpha)/(?P<file>files/[^/:]+):download"
)
# google.rpc.Code INTERNAL: the provider's answer, not the request, is at fault.
INTERNAL = 13
OPENAI_FILE_CONTENT = re.compile(r"/v1/files/(?P<file>[^/]+)/content")


def results_of(route: RouteMatch, method: str) -> tuple[Form, str] | None:
    """The results ``route`` reads (their form, and the batch or file they are of)."""
    if method != "GET":
        return None
    if route.provider == "anthropic":
        path = route.upstream_path
        head, _, batch = path.removesuffix("/results").rpartition("/")
        if path.endswith("/results") and head == ANTHROPIC_BATCHES and batch:
            return "anthropic", batch
        return None
    if route.provider == "gemini":
        found = GEMINI_DOWNLOAD.fullmatch(route.upstream_path)
        return ("gemini", found["file"]) if found is not None else None
    found = OPENAI_FILE_CONTENT.fullmatch(route.openai_path or "")
    return ("openai", found["file"]) if found is not None else None


def gemini_batch(route: RouteMatch, method: str) -> str | None:
    """The Gemini batch (``batches/...``) a GET of ``route`` retrieves, or None."""
    if route.provider != "gemini" or method != "GET":
        return None
    found = GEMINI_BATCH_OBJECT.fullmatch(route.upstream_path)
    return found["batch"] if found is not None else None


def checked_inline(batch: dict[str, Any], expected: dict[str, Expected]) -> list[str]:
    """Check a Gemini batch's inlined responses in place (each found by its request's
    ``metadata.key``, or its place): one whose calls its tools refuse becomes an error.
    The names of those withheld."""
    withheld: list[str] = []
    for output in (json_path(batch, "metadata", "output"), json_path(batch, "response")):
        answers = json_path(output, "inlinedResponses", "inlinedResponses")
        for index, entry in enumerate(answers if isinstance(answers, list) else []):
            if not isinstance(entry, dict) or not isinstance(entry.get("response"), dict):
                continue
            key = json_path(entry, "metadata", "key")
            name = key if isinstance(key, str) else f"#{index}"
            found = expected.get(name)
            refusal = None if found is None else _refused(entry["response"], *found)
            if refusal is not None:
                del entry["response"]
                entry["error"] = {"code": INTERNAL, "message": refusal}
                withheld.append(name)
    return withheld


def _refused(answer: dict[str, Any], api: ApiName, tools: ToolSchemas) -> str | None:
    """The message refusing ``answer``'s calls, or None."""
    adapter = get_adapter(api)
    try:
        check_turn(adapter.parse_response(answer), tools, adapter.capabilities)
    except TurngateError as exc:
        name_the_rule(exc)
        return exc.message
    return None


def names_batches(route: RouteMatch) -> bool:
    """Whether ``route`` answers OpenAI batch objects (created, retrieved, listed,
    cancelled), each naming its input and output files."""
    return OPENAI_BATCH_OBJECTS.fullmatch(route.openai_path or "") is not None


class ResultLines:
    """A results JSONL stream, fed in any pieces; out come whole lines, each result that
    succeeded with a call its tools refuse replaced by the API's failed result."""

    def __init__(self, form: Form, expected: dict[str, Expected]) -> None:
        self.form = form
        self.expected = expected
        # The name and API of each result withheld.
        self.withheld: list[tuple[str, ApiName]] = []
        self._partial = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self._partial + chunk
        whole, ended, self._partial = data.rpartition(b"\n")
        if not ended:
            self._partial = data
            return b""
        return b"".join(self._line(line) + b"\n" for line in whole.split(b"\n"))

    def finish(self) -> bytes:
        rest, self._partial = self._partial, b""
        return self._line(rest) if rest else b""

    def _line(self, line: bytes) -> bytes:
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            return line
        named = "key" if self.form == "gemini" else "custom_id"
        name = value.get(named) if isinstance(value, dict) else None
        expected = self.expected.get(name) if isinstance(name, str) else None
        if expected is None:
            return line
        refusal = self._refusal(value, *expected)
        if refusal is None:
            return line
        self.withheld.append((str(name), expected[0]))
        return orjson.dumps(self._failed(value, refusal))

    def _refusal(self, value: dict[str, Any], api: ApiName, tools: ToolSchemas) -> str | None:
        answer = self._answer(value)
        return None if answer is None else _refused(answer, api, tools)

    def _answer(self, value: dict[str, Any]) -> dict[str, Any] | None:
        """The answer of a result that succeeded, or None."""
        if self.form == "anthropic":
            result = value.get("result")
            if isinstance(result, dict) and result.get("type") == "succeeded":
                message = result.get("message")
                return message if isinstance(message, dict) else None
            return None
        response = value.get("response")
        if self.form == "gemini":
            return response if isinstance(response, dict) else None
        if isinstance(response, dict) and response.get("status_code") == 200:
            body = response.get("body")
            return body if isinstance(body, dict) else None
        return None

    def _failed(self, value: dict[str, Any], message: str) -> dict[str, Any]:
        if self.form == "gemini":
            # As a request of the batch that failed: an error instead of the response.
            kept = {key: item for key, item in value.items() if key != "response"}
            return {**kept, "error": {"code": INTERNAL, "message": message}}
        if self.form == "anthropic":
            error = {"type": "api_error", "message": message}
            return {
                **value,
                "result": {"type": "errored", "error": {"type": "error", "error": error}},
            }
        # The form of a line of a batch's error file.
        return {
            **value,
            "response": None,
            "error": {"code": "invalid_tool_call", "message": message},
        }


async def checked_results(
    request: web.Request,
    route: RouteMatch,
    session: aiohttp.ClientSession,
    form: Form,
    expected: dict[str, Expected],
) -> web.StreamResponse:
    lines = ResultLines(form, expected)
    async with session.request(
        "GET",
        route.upstream_url,
        headers=outbound_headers(request.headers, keep_length=False),
        allow_redirects=False,
        proxy=route.prefix.proxy,
    ) as upstream:
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        response.headers.extend(inbound_headers(upstream.headers))
        await response.prepare(request)
        try:
            async for chunk in upstream.content.iter_any():
                out = lines.feed(chunk) if upstream.status == 200 else chunk
                if out:
                    await response.write(out)
        except (TimeoutError, aiohttp.ClientError):
            # Cut off, never ended cleanly: a truncated results file must not look whole.
            abort(request)
            return response
    if upstream.status == 200:
        await response.write(lines.finish())
    if lines.withheld:
        _count_withheld(request, lines.withheld)
    await response.write_eof()
    return response


async def learned_batches(
    request: web.Request,
    route: RouteMatch,
    session: aiohttp.ClientSession,
    *,
    toolsets: BatchToolsets,
    store: StateStore,
    now: float,
) -> web.StreamResponse:
    """Relay an OpenAI batch object (or a page of them), read whole to tie each batch's
    output file to its input file."""
    raw = await request.read() if request.body_exists else b""
    response = await exchange(request, route, session, raw)
    answer = answer_object(response)
    batches = answer.get("data") if answer.get("object") == "list" else [answer]
    for batch in batches if isinstance(batches, list) else []:
        await learn(toolsets, store, batch, now=now)
    return response


async def checked_gemini_batch(
    request: web.Request,
    route: RouteMatch,
    session: aiohttp.ClientSession,
    name: str,
    *,
    toolsets: BatchToolsets,
    store: StateStore,
    now: float,
) -> web.StreamResponse:
    """A Gemini batch retrieved, read whole: its responses file tied to its input file,
    its inlined responses checked (``checked_inline``)."""
    response = await exchange(request, route, session, b"")
    batch = answer_object(response)
    await learn(toolsets, store, batch, now=now)
    expected = await recalled(toolsets, store, name)
    withheld = [] if expected is None else checked_inline(batch, expected)
    if not withheld:
        return response
    _count_withheld(request, [(name, "gemini") for name in withheld])
    response.body = orjson.dumps(batch)
    return response


def _count_withheld(request: web.Request, withheld: list[tuple[str, ApiName]]) -> None:
    telemetry = request.app.get(TELEMETRY)
    if telemetry is not None:
        for api, count in Counter(api for _name, api in withheld).items():
            telemetry.metrics.results_withheld(api, count)
    log.warning(
        "withheld %d results of a batch, their tool calls refused: %s",
        len(withheld),
        ", ".join(name for name, _api in withheld[:5]),
    )

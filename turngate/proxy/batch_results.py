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
run. The tools are kept in this process (the last ``REMEMBERED`` batches) and in the state
store's logs, for a restart or another replica; the results of a batch turngate did not see
created are relayed unchecked.
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from typing import Any, Literal, cast, get_args

import aiohttp
import orjson
from aiohttp import web

from turngate.adapters import get_adapter
from turngate.adapters.batches import ANTHROPIC_BATCHES
from turngate.errors import TurngateError
from turngate.graph.model import ApiName
from turngate.graph.schema_check import OpenToolset, ToolSchemas
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
# Batches whose requests' tools are kept, and their requests in all (a few hundred bytes
# each); the least recently created forgotten first.
REMEMBERED = 64
REMEMBERED_REQUESTS = 100_000
# What a request's answer is checked against: its API, and the tools it declared.
Expected = tuple[ApiName, ToolSchemas]
Form = Literal["anthropic", "openai", "gemini"]
OPENAI_BATCH_OBJECTS = re.compile(r"/v1/batches(?:/[^/]+(?:/cancel)?)?")
GEMINI_BATCH_OBJECT = re.compile(r"/(?:v1|v1beta|v1alpha)/(?P<batch>batches/[^/:]+)")
GEMINI_DOWNLOAD = re.compile(
    r"(?:/download)?/(?:v1|v1beta|v1alpha)/(?P<file>files/[^/:]+):download"
)
# google.rpc.Code INTERNAL: the provider's answer, not the request, is at fault.
INTERNAL = 13
OPENAI_FILE_CONTENT = re.compile(r"/v1/files/(?P<file>[^/]+)/content")


class BatchToolsets:
    """By batch (Anthropic: the batch's id; OpenAI: its input file's and then its output
    file's), what each request's answer is checked against, by the request's name."""

    def __init__(self, remembered: int = REMEMBERED, requests: int = REMEMBERED_REQUESTS) -> None:
        self.remembered = remembered
        self.requests = requests
        self._batches: OrderedDict[str, dict[str, Expected]] = OrderedDict()
        self._kept = 0
        # An OpenAI batch's output file -> its input file.
        self._outputs: OrderedDict[str, str] = OrderedDict()

    def keep(self, key: str, expected: dict[str, Expected]) -> None:
        self._kept -= len(self._batches.pop(key, {}))
        self._batches[key] = expected
        self._kept += len(expected)
        # The newest batch is kept whatever its size (the body limit bounds it).
        while len(self._batches) > 1 and (
            len(self._batches) > self.remembered or self._kept > self.requests
        ):
            _oldest, forgotten = self._batches.popitem(last=False)
            self._kept -= len(forgotten)

    def get(self, key: str) -> dict[str, Expected] | None:
        return self._batches.get(key) or self._batches.get(self._outputs.get(key, ""))

    def tied(self, output: str) -> bool:
        return output in self._outputs

    def tie(self, output: str, source: str) -> None:
        """Read ``output``'s results against ``source``'s requests."""
        self._outputs[output] = source
        self._outputs.move_to_end(output)
        while len(self._outputs) > self.remembered:
            self._outputs.popitem(last=False)


def ties(batch: Any) -> tuple[str, str] | None:
    """A batch's output file and its input file, when it names both: an OpenAI batch
    object, or a Gemini batch (its operation, the batch in its metadata)."""
    if not isinstance(batch, dict):
        return None
    output, source = batch.get("output_file_id"), batch.get("input_file_id")
    if "output_file_id" not in batch:
        source = _path(batch, "metadata", "inputConfig", "fileName")
        output = _path(batch, "metadata", "output", "responsesFile")
        output = output or _path(batch, "response", "responsesFile")
    if isinstance(output, str) and isinstance(source, str):
        return output, source
    return None


# -- kept in the state store too, for the results read after a restart ----------------------

TOOLS_LOG = "batch-tools:"
OUTPUT_LOG = "batch-output:"
_APIS = frozenset(get_args(ApiName))


async def remember(
    toolsets: BatchToolsets,
    store: StateStore,
    key: str,
    expected: dict[str, Expected],
    *,
    now: float,
) -> None:
    """Keep ``expected`` for the batch ``key``: in the process, and in the store."""
    toolsets.keep(key, expected)
    try:
        await store.append_log(TOOLS_LOG + key, stored(expected), now=now, keep=1)
    except Exception as exc:
        log.warning("state store: a batch's tools not kept: %s", type(exc).__name__)


async def recalled(
    toolsets: BatchToolsets, store: StateStore, key: str
) -> dict[str, Expected] | None:
    """What the results of ``key`` (a batch, or an output file) are checked against: kept
    in the process, or else in the store (written by this process before a restart, or by
    another replica)."""
    found = toolsets.get(key)
    if found is not None:
        return found
    try:
        tied = await store.read_log(OUTPUT_LOG + key, limit=1)
        source = tied[0].get("input") if tied else key
        entries = await store.read_log(TOOLS_LOG + str(source), limit=1)
    except Exception as exc:
        log.warning("state store: a batch's tools not read: %s", type(exc).__name__)
        return None
    expected = restored(entries[0]) if entries else None
    if expected is not None:
        toolsets.keep(str(source), expected)
        if source != key:
            toolsets.tie(key, str(source))
    return expected


async def learn(toolsets: BatchToolsets, store: StateStore, batch: Any, *, now: float) -> None:
    """Tie a batch's output file to its input file's requests, once, in the store too."""
    found = ties(batch)
    if found is None or toolsets.tied(found[0]):
        return
    output, source = found
    if await recalled(toolsets, store, source) is None:
        return
    toolsets.tie(output, source)
    try:
        await store.append_log(OUTPUT_LOG + output, {"input": source}, now=now, keep=1)
    except Exception as exc:
        log.warning("state store: a batch's output file not tied: %s", type(exc).__name__)


def stored(expected: dict[str, Expected]) -> dict[str, Any]:
    """``expected`` as JSON, each distinct toolset once (a batch's requests mostly share
    theirs)."""
    toolsets: list[dict[str, Any]] = []
    seen: dict[bytes, int] = {}
    requests: dict[str, list[Any]] = {}
    for name, (api, tools) in expected.items():
        form = {"open": isinstance(tools, OpenToolset), "tools": dict(tools)}
        blob = orjson.dumps(form, option=orjson.OPT_SORT_KEYS)
        if blob not in seen:
            seen[blob] = len(toolsets)
            toolsets.append(form)
        requests[name] = [api, seen[blob]]
    return {"toolsets": toolsets, "requests": requests}


def restored(entry: dict[str, Any]) -> dict[str, Expected] | None:
    """``stored``'s inverse; None for an entry that is not one."""
    forms, requests = entry.get("toolsets"), entry.get("requests")
    if not isinstance(forms, list) or not isinstance(requests, dict):
        return None
    toolsets: list[ToolSchemas] = []
    for form in forms:
        tools = form.get("tools") if isinstance(form, dict) else None
        if not isinstance(tools, dict):
            return None
        toolsets.append(OpenToolset(tools) if form.get("open") else tools)
    expected: dict[str, Expected] = {}
    for name, pair in requests.items():
        api, position = pair if isinstance(pair, list) and len(pair) == 2 else (None, None)
        if api not in _APIS or not isinstance(position, int) or not 0 <= position < len(toolsets):
            return None
        expected[name] = (cast(ApiName, api), toolsets[position])
    return expected


def results_of(route: RouteMatch, method: str) -> tuple[Form, str] | None:
    """The results ``route`` reads (their form, and the batch or file they are of)."""
    if method != "GET":
        return None
    if route.provider == "anthropic":
        path = route.upstream_path_qs.split("?", 1)[0]
        head, _, batch = path.removesuffix("/results").rpartition("/")
        if path.endswith("/results") and head == ANTHROPIC_BATCHES and batch:
            return "anthropic", batch
        return None
    if route.provider == "gemini":
        found = GEMINI_DOWNLOAD.fullmatch(route.upstream_path_qs.split("?", 1)[0])
        return ("gemini", found["file"]) if found is not None else None
    found = OPENAI_FILE_CONTENT.fullmatch(route.openai_path or "")
    return ("openai", found["file"]) if found is not None else None


def gemini_batch(route: RouteMatch, method: str) -> str | None:
    """The Gemini batch (``batches/...``) a GET of ``route`` retrieves, or None."""
    if route.provider != "gemini" or method != "GET":
        return None
    found = GEMINI_BATCH_OBJECT.fullmatch(route.upstream_path_qs.split("?", 1)[0])
    return found["batch"] if found is not None else None


def checked_inline(batch: dict[str, Any], expected: dict[str, Expected]) -> list[str]:
    """Check a Gemini batch's inlined responses in place (each found by its request's
    ``metadata.key``, or its place): one whose calls its tools refuse becomes an error.
    The names of those withheld."""
    withheld: list[str] = []
    for output in (_path(batch, "metadata", "output"), _path(batch, "response")):
        answers = _path(output, "inlinedResponses", "inlinedResponses")
        for index, entry in enumerate(answers if isinstance(answers, list) else []):
            if not isinstance(entry, dict) or not isinstance(entry.get("response"), dict):
                continue
            key = _path(entry, "metadata", "key")
            name = key if isinstance(key, str) else f"#{index}"
            found = expected.get(name)
            refusal = None if found is None else _refused(entry["response"], *found)
            if refusal is not None:
                del entry["response"]
                entry["error"] = {"code": INTERNAL, "message": refusal}
                withheld.append(name)
    return withheld


def _path(value: Any, *keys: str) -> Any:
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


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
    for api in dict.fromkeys(api for _name, api in withheld):
        if telemetry is not None:
            count = sum(1 for _name, each in withheld if each == api)
            telemetry.metrics.results_withheld(api, count)
    log.warning(
        "withheld %d results of a batch, their tool calls refused: %s",
        len(withheld),
        ", ".join(name for name, _api in withheld[:5]),
    )

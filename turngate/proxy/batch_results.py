"""A message batch's results: each answer's tool calls checked, as a non-streamed answer's
are, before the application reads them.

    POST /v1/messages/batches            every request checked (proxy/batches.py); the
                                         tools each one declares kept by the batch's id
    GET  /v1/messages/batches/{id}/results
        a result that succeeded           its calls checked against its request's tools:
                                          kept, or answered as an errored result naming
                                          the call and the rule (``invalid_tool_call``)
        any other line                    relayed as the provider wrote it

A batch's answers are read hours after it was sent, and an agent platform runs their tool
calls as it would a chat answer's: a call whose input breaks its tool's schema must not be
run. The tools are kept in this process (the last ``REMEMBERED`` batches): the results of
a batch it did not create, or created before a restart, are relayed unchecked and logged.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from turngate.adapters import get_adapter
from turngate.adapters.batches import ANTHROPIC_BATCHES
from turngate.errors import TurngateError
from turngate.graph.schema_check import ToolSchemas
from turngate.proxy.errors import name_the_rule
from turngate.proxy.routes import RouteMatch
from turngate.proxy.turn_check import check_turn
from turngate.proxy.upstream import abort, inbound_headers, outbound_headers
from turngate.telemetry.prometheus import TELEMETRY

log = logging.getLogger("turngate.proxy")
# Batches whose requests' tools are kept; the least recently created forgotten first.
REMEMBERED = 64


class BatchToolsets:
    """The tools each request of a batch declared (by its ``custom_id``), by batch id."""

    def __init__(self, remembered: int = REMEMBERED) -> None:
        self.remembered = remembered
        self._batches: OrderedDict[str, dict[str, ToolSchemas]] = OrderedDict()

    def keep(self, batch: str, toolsets: dict[str, ToolSchemas]) -> None:
        self._batches[batch] = toolsets
        self._batches.move_to_end(batch)
        while len(self._batches) > self.remembered:
            self._batches.popitem(last=False)

    def get(self, batch: str) -> dict[str, ToolSchemas] | None:
        return self._batches.get(batch)


def results_of(route: RouteMatch, method: str) -> str | None:
    """The batch whose results ``route`` reads, or None."""
    if route.provider != "anthropic" or method != "GET":
        return None
    path = route.upstream_path_qs.split("?", 1)[0]
    head, _, batch = path.removesuffix("/results").rpartition("/")
    if not path.endswith("/results") or head != ANTHROPIC_BATCHES or not batch:
        return None
    return batch


class ResultLines:
    """A results JSONL stream, fed in any pieces; out come whole lines, each result that
    succeeded with a call its tools refuse replaced by an errored result."""

    def __init__(self, toolsets: dict[str, ToolSchemas]) -> None:
        self.toolsets = toolsets
        self.withheld: list[str] = []
        self._partial = b""
        self._adapter = get_adapter("anthropic")

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
        refusal = self._refusal(value) if isinstance(value, dict) else None
        if refusal is None:
            return line
        self.withheld.append(str(value.get("custom_id")))
        error = {"type": "api_error", "message": refusal}
        errored = {"type": "errored", "error": {"type": "error", "error": error}}
        return orjson.dumps({**value, "result": errored})

    def _refusal(self, value: dict[str, Any]) -> str | None:
        result = value.get("result")
        name = value.get("custom_id")
        tools = self.toolsets.get(name) if isinstance(name, str) else None
        if not isinstance(result, dict) or result.get("type") != "succeeded" or tools is None:
            return None
        message = result.get("message")
        try:
            turn = self._adapter.parse_response(message if isinstance(message, dict) else {})
            check_turn(turn, tools, self._adapter.capabilities)
        except TurngateError as exc:
            name_the_rule(exc)
            return exc.message
        return None


async def checked_results(
    request: web.Request,
    route: RouteMatch,
    session: aiohttp.ClientSession,
    toolsets: dict[str, ToolSchemas],
) -> web.StreamResponse:
    lines = ResultLines(toolsets)
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
        telemetry = request.app.get(TELEMETRY)
        if telemetry is not None:
            telemetry.metrics.results_withheld("anthropic", len(lines.withheld))
        log.warning(
            "withheld %d results of a batch, their tool calls refused: %s",
            len(lines.withheld),
            ", ".join(lines.withheld[:5]),
        )
    await response.write_eof()
    return response

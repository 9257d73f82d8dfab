"""What a batch's results are checked against, kept from its creation until they are read:
by batch (Anthropic: the batch's id; OpenAI and Gemini: the input file's, or a Gemini
batch's name), each request's API and the tools it declared, by the request's name.

Kept in the process (``BatchToolsets``, bounded) and in the state store's logs
(``batch-tools:{id}``, each distinct toolset once; ``batch-output:{file}`` ties an output
file to its input), so a restart or another replica finds them; the store forgets them
after ``--operation-ttl``, as it forgets operations.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any, cast, get_args

import orjson

from turngate.adapters.batches import json_path
from turngate.graph.model import ApiName
from turngate.graph.schema_check import OpenToolset, ToolSchemas
from turngate.state.store import StateStore

log = logging.getLogger("turngate.proxy")
# Batches whose requests' tools are kept, and their requests in all (a few hundred bytes
# each); the least recently created forgotten first.
REMEMBERED = 64
REMEMBERED_REQUESTS = 100_000
# What a request's answer is checked against: its API, and the tools it declared.
Expected = tuple[ApiName, ToolSchemas]


class BatchToolsets:
    """The batches' ``Expected`` kept in the process; an output file read through the
    input file it is tied to."""

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
        source = json_path(batch, "metadata", "inputConfig", "fileName")
        output = json_path(batch, "metadata", "output", "responsesFile")
        output = output or json_path(batch, "response", "responsesFile")
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
        source = source if isinstance(source, str) else key
        entries = await store.read_log(TOOLS_LOG + source, limit=1)
    except Exception as exc:
        log.warning("state store: a batch's tools not read: %s", type(exc).__name__)
        return None
    expected = restored(entries[0]) if entries else None
    if expected is not None:
        toolsets.keep(source, expected)
        if source != key:
            toolsets.tie(key, source)
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

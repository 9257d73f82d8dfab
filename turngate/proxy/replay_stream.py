"""A finished OpenAI Responses object as the API's own event stream, for a streamed replay.

A turn recovered by querying its handle (``GET /v1/responses/{id}``) is stored as the JSON
object the provider returned; a retry that asked for a stream gets it as the events a live
stream ends with: ``response.created`` (no output yet), ``response.output_item.added`` and
``.done`` for each output item (whole, as committed blocks are relayed), then
``response.completed`` with the object itself. The SDK's raw iterator and its
``responses.stream()`` helper both read it (tests/proxy/test_replay_sdk.py).
"""

from __future__ import annotations

from typing import Any

import orjson

from turngate.adapters.sse import encode_frame


def responses_events(response: dict[str, Any]) -> bytes:
    started = {**response, "status": "in_progress", "output": []}
    events: list[tuple[str, dict[str, Any]]] = [("response.created", {"response": started})]
    for index, item in enumerate(response.get("output") or []):
        events.append(("response.output_item.added", {"output_index": index, "item": item}))
        events.append(("response.output_item.done", {"output_index": index, "item": item}))
    events.append(("response.completed", {"response": response}))
    return b"".join(
        encode_frame(name, orjson.dumps({"type": name, "sequence_number": n, **fields}))
        for n, (name, fields) in enumerate(events)
    )

"""Redis records and settings: how an operation is stored, and what a server config loses.

Pure helpers of the Redis store (redis.py): encoding and checking stored records, the
claim's client-key arguments, the durability check of a server's config, pool options.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from typing import Any
from urllib.parse import urlsplit

import orjson
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from turngate.errors import StoreUnavailable
from turngate.graph.codec import canonical_json
from turngate.state.conversations import ClientKey, KeyHold
from turngate.state.machine import DispatchState, Transition
from turngate.state.manifest import DispatchManifest
from turngate.state.store import OperationRecord, StateChange

log = logging.getLogger("turngate.state")

RECORD_VERSION = 1


def key_args(client_key: ClientKey | None, operation_id: str, now: float) -> list[str | int]:
    """The claim's client key arguments: the hold it stores, and for how long (ms)."""
    if client_key is None:
        return ["", 0]
    hold = KeyHold(operation_id, client_key.body_digest, client_key.expires_at)
    ttl = max(1, int((client_key.expires_at - now) * 1000))
    return [canonical_json(hold.to_json()).decode(), ttl]


def encode_record(record: OperationRecord) -> str:
    return canonical_json({"v": RECORD_VERSION, **record.to_json()}).decode()


def decode_record(text: str, operation_id: str) -> OperationRecord:
    """A stored record, checked: its version, and its manifest against the stored digest."""
    try:
        data: Any = orjson.loads(text)
        if data.get("v") != RECORD_VERSION:
            raise ValueError(f"record version {data.get('v')!r}, this turngate reads v1")
        manifest = DispatchManifest.from_json(data["manifest"])
        if manifest.digest != data["manifestDigest"]:
            raise ValueError("its manifest does not match the digest stored with it")
        return OperationRecord(
            manifest=manifest,
            state=DispatchState(data["state"]),
            handle=data["handle"],
            history=tuple(
                StateChange(
                    DispatchState(c["state"]),
                    None if c["transition"] is None else Transition(c["transition"]),
                    float(c["at"]),
                    c["detail"],
                )
                for c in data["history"]
            ),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StoreUnavailable(f"operation {operation_id} in Redis cannot be read: {exc}") from exc


def durability_warnings(config: dict[str, str]) -> list[str]:
    """What these server settings would lose: acknowledged writes, or whole keys."""
    warnings = []
    if config.get("appendonly") != "yes":
        warnings.append(
            "no append-only file: a Redis restart loses every operation written since the "
            "last snapshot, or all of them. Set appendonly yes, appendfsync always."
        )
    elif config.get("appendfsync") != "always":
        warnings.append(
            f"appendfsync {config.get('appendfsync')!r}: a crash of the Redis host (not only "
            "of its process) can lose acknowledged writes. Set appendfsync always."
        )
    if config.get("maxmemory-policy", "noeviction") != "noeviction":
        warnings.append(
            f"maxmemory-policy {config['maxmemory-policy']!r} may evict operations and slots, "
            "and an evicted slot admits a second attempt. Set maxmemory-policy noeviction."
        )
    return warnings


async def warn_unless_durable(client: Redis, where: str) -> None:
    try:
        config = {
            **await client.config_get("append*"),
            **await client.config_get("maxmemory-policy"),
        }
    except ResponseError:
        return  # CONFIG is disabled (managed Redis): the operator must check by other means
    for warning in durability_warnings({str(k): str(v) for k, v in config.items()}):
        log.warning("state store %s: %s", where, warning)


def pool_options() -> dict[str, Any]:
    try:
        from redis.maint_notifications import MaintNotificationsConfig
    except ImportError:  # a redis-py without maintenance notifications: nothing to turn off
        return {}
    # redis-py 8 takes their default "auto" for "on" and then no longer replaces a pooled
    # connection that the server closed: after a Redis restart, each idle connection would
    # fail one call with a needless 503.
    return {"maint_notifications_config": MaintNotificationsConfig(enabled=False)}


def as_text(value: object) -> str:
    """A reply's member or value as text (the client decodes replies; bytes are decoded)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def new_owner() -> str:
    return f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:12]}"


def redacted(url: str) -> str:
    """The URL without its credentials, for messages and logs."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=host, query="").geturl()

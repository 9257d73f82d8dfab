"""Settings of `turngate serve`: each flag has an environment variable; flags win.

| flag                   | variable                     | default                               |
|------------------------|------------------------------|---------------------------------------|
| --host / --port        | TURNGATE_HOST / TURNGATE_PORT| 127.0.0.1 / 8787                      |
| --config FILE          | TURNGATE_CONFIG              | none (built-in policy)                |
| --state URL            | TURNGATE_STATE               | sqlite:///./turngate.db               |
| --mode                 | TURNGATE_MODE                | enforce                               |
| --upstream-openai      | TURNGATE_UPSTREAM_OPENAI     | https://api.openai.com                |
| --upstream-anthropic   | TURNGATE_UPSTREAM_ANTHROPIC  | https://api.anthropic.com             |
| --upstream-gemini      | TURNGATE_UPSTREAM_GEMINI     | https://generativelanguage.googleapis.com|
| --max-body-bytes       | TURNGATE_MAX_BODY_BYTES      | 33554432 (32 MiB)                     |
| --log-level            | TURNGATE_LOG_LEVEL           | info                                  |
| --header-timeout       | TURNGATE_HEADER_TIMEOUT      | 30 (s: request line + headers; idle)  |
| --body-timeout         | TURNGATE_BODY_TIMEOUT        | 60 (s: whole body; relays: idle)      |
| --upstream-read-timeout| TURNGATE_UPSTREAM_READ_TIMEOUT| 600 (s between two upstream reads)   |
| --replay-ttl           | TURNGATE_REPLAY_TTL          | 86400 (s a committed answer is replayed)|
| --unknown-deadline     | TURNGATE_UNKNOWN_DEADLINE    | 600 (s from its start to settle UNKNOWN)|
| --operation-ttl        | TURNGATE_OPERATION_TTL       | 604800 (s an operation is kept: 7 days)|
| --replay-max-bytes     | TURNGATE_REPLAY_MAX_BYTES    | 268435456 (answers kept; 0: no limit)  |
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Mode = Literal["shadow", "enforce-no-tools", "enforce"]
MODES: tuple[Mode, ...] = ("shadow", "enforce-no-tools", "enforce")


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8787
    config: str | None = None
    state: str = "sqlite:///./turngate.db"
    mode: Mode = "enforce"
    upstream_openai: str = "https://api.openai.com"
    upstream_anthropic: str = "https://api.anthropic.com"
    upstream_gemini: str = "https://generativelanguage.googleapis.com"
    # An Azure OpenAI resource (https://NAME.openai.azure.com), served under /azure; "" for none.
    upstream_azure: str = ""
    max_body_bytes: int = 32 * 1024 * 1024
    log_level: str = "info"
    # Seconds a connection may take to send a request line and headers (also the idle
    # keep-alive limit), to send a whole body, and an upstream may stay silent.
    header_timeout: float = 30.0
    body_timeout: float = 60.0
    upstream_read_timeout: float = 600.0
    # Seconds a committed answer (and a client's Idempotency-Key) is kept for replay.
    replay_ttl: float = 24 * 3600.0
    # Seconds after its manifest was created that an UNKNOWN attempt is taken to be over
    # (SETTLE), so its revision may be answered again.
    unknown_deadline: float = 600.0
    # Seconds an operation (manifest, history) is kept after its claim, once not in flight;
    # a conversation unchanged that long with no operation left goes too (every store).
    operation_ttl: float = 7 * 24 * 3600.0
    # Bytes of answers kept for replay (every replica's together on Redis); past it the ones
    # that expire first go (0: no limit).
    replay_max_bytes: int = 256 * 1024 * 1024


# (flag, variable, attribute, type)
_OPTIONS: tuple[tuple[str, str, str, type], ...] = (
    ("--host", "TURNGATE_HOST", "host", str),
    ("--port", "TURNGATE_PORT", "port", int),
    ("--config", "TURNGATE_CONFIG", "config", str),
    ("--state", "TURNGATE_STATE", "state", str),
    ("--mode", "TURNGATE_MODE", "mode", str),
    ("--upstream-openai", "TURNGATE_UPSTREAM_OPENAI", "upstream_openai", str),
    ("--upstream-anthropic", "TURNGATE_UPSTREAM_ANTHROPIC", "upstream_anthropic", str),
    ("--upstream-gemini", "TURNGATE_UPSTREAM_GEMINI", "upstream_gemini", str),
    ("--upstream-azure", "TURNGATE_UPSTREAM_AZURE", "upstream_azure", str),
    ("--max-body-bytes", "TURNGATE_MAX_BODY_BYTES", "max_body_bytes", int),
    ("--log-level", "TURNGATE_LOG_LEVEL", "log_level", str),
    ("--header-timeout", "TURNGATE_HEADER_TIMEOUT", "header_timeout", float),
    ("--body-timeout", "TURNGATE_BODY_TIMEOUT", "body_timeout", float),
    ("--upstream-read-timeout", "TURNGATE_UPSTREAM_READ_TIMEOUT", "upstream_read_timeout", float),
    ("--replay-ttl", "TURNGATE_REPLAY_TTL", "replay_ttl", float),
    ("--unknown-deadline", "TURNGATE_UNKNOWN_DEADLINE", "unknown_deadline", float),
    ("--operation-ttl", "TURNGATE_OPERATION_TTL", "operation_ttl", float),
    ("--replay-max-bytes", "TURNGATE_REPLAY_MAX_BYTES", "replay_max_bytes", int),
)


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = Settings()
    for flag, variable, attribute, kind in _OPTIONS:
        extra: dict[str, object] = {}
        if attribute == "mode":
            extra["choices"] = MODES
        parser.add_argument(
            flag,
            dest=attribute,
            type=kind,
            default=None,
            help=f"env {variable}; default {getattr(defaults, attribute)}",
            **extra,  # type: ignore[arg-type]
        )


class SettingsError(ValueError):
    pass


def settings_from_args(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> Settings:
    env = os.environ if environ is None else environ
    values: dict[str, object] = {}
    for _flag, variable, attribute, kind in _OPTIONS:
        given = getattr(args, attribute, None)
        if given is None and env.get(variable):
            try:
                given = kind(env[variable])
            except ValueError as exc:
                raise SettingsError(f"{variable}={env[variable]!r}: {exc}") from exc
        if given is not None:
            values[attribute] = given
    mode = values.get("mode", "enforce")
    if mode not in MODES:
        raise SettingsError(f"mode {mode!r} is not one of {', '.join(MODES)}")
    for attribute in ("replay_ttl", "unknown_deadline"):
        if float(values.get(attribute, 1.0)) <= 0:  # type: ignore[arg-type]
            raise SettingsError(f"{attribute} must be a positive number of seconds")
    settings = Settings(**values)  # type: ignore[arg-type]
    if settings.replay_max_bytes < 0:
        raise SettingsError("replay_max_bytes must be 0 (no limit) or a number of bytes")
    # A replayed answer, or an UNKNOWN attempt still blocking its revision, needs its operation.
    if settings.operation_ttl < max(settings.replay_ttl, settings.unknown_deadline):
        raise SettingsError(
            f"operation_ttl ({settings.operation_ttl:g} s) must be at least replay_ttl "
            f"({settings.replay_ttl:g} s) and unknown_deadline ({settings.unknown_deadline:g} s)"
        )
    return settings

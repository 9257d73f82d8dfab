"""The aiohttp Application: turngate's own endpoints and every provider prefix.

    GET /healthz                          the process is up
    GET /readyz                           the state store answers
    GET /turngate/v1/operations/{id}      an operation's manifest, state and history
    GET /turngate/v1/shadow               the shadow report (what enforcing would have done)
    GET /turngate/v1/conversations/{id}   revision, cancel generation, canonical turns, operations
    POST /turngate/v1/conversations/{id}/cancel    move the conversation's cancel generation on
    *   /openai/v1/… /anthropic/… /gemini/…   parsed routes are dispatched, the rest relayed
    anything else                         404

The shared ClientSession and the state store are opened in ``cleanup_ctx``; at start the
store moves operations a crash left in flight to UNKNOWN, and a background task
(proxy/recovery.py) settles UNKNOWN ones once their deadline has passed. The policy file is
loaded when the app is created, so a bad one refuses to start (``PolicyConfigError``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import orjson
from aiohttp import web

from turngate.adapters.azure_paths import AZURE_MOUNT
from turngate.errors import LocalError, TurngateError
from turngate.policies.config import PolicyFile
from turngate.policies.loading import load_serving_policy
from turngate.policies.pins import AdapterRegistry
from turngate.policies.report import report_json
from turngate.policies.tokens import load_encodings
from turngate.proxy import conversation
from turngate.proxy.background import retrieve, retrieved_handle
from turngate.proxy.batch_routes import batch_route
from turngate.proxy.body import BODY_TIMEOUT
from turngate.proxy.credentials import process_secret
from turngate.proxy.dispatch import dispatch
from turngate.proxy.errors import error_response, plain_error
from turngate.proxy.kept_uploads import KeptUploads
from turngate.proxy.observe import install_telemetry
from turngate.proxy.recovery import recovery_loop, unknown_at_start
from turngate.proxy.retrieved_stream import retrieve_stream, streamed_handle
from turngate.proxy.routes import ERROR_API, match, prefixes, with_anthropic_headers
from turngate.proxy.services import DEFAULT_ADAPTERS, Services
from turngate.proxy.shadow import read_report
from turngate.proxy.tool_calls import SchemaCache
from turngate.proxy.upstream import UpstreamTimeouts, new_session, relay, unavailable
from turngate.settings import Settings
from turngate.state.store import StateStore, open_store
from turngate.telemetry.setup import Telemetry, setup_telemetry

log = logging.getLogger("turngate.proxy")

SERVICES = web.AppKey("services", Services)


def create_app(
    settings: Settings,
    *,
    store: StateStore | None = None,
    clock: Callable[[], float] = time.time,
    credential_secret: str | None = None,
    timeouts: UpstreamTimeouts | None = None,
    policies: PolicyFile | None = None,
    adapters: AdapterRegistry = DEFAULT_ADAPTERS,
    telemetry: Telemetry | None = None,
) -> web.Application:
    """The app for ``settings``; ``store`` defaults to ``open_store(settings.state)``.

    ``policies`` defaults to the file ``settings.config`` (or the built-in policy) with the
    ``TURNGATE_POLICY__*`` variables, and ``settings.mode`` as its default mode; ``turngate
    serve`` resolves it itself, applying ``--mode`` only when given.

    ``telemetry`` defaults to ``setup_telemetry()`` from the ``OTEL_*`` variables; tests
    inject one with an in-memory span exporter and metric reader.
    """
    table = prefixes(settings, os.environ)
    for prefix in table:
        if prefix.egress is not None:
            log.info("%s upstream reached through proxy %s", prefix.provider, prefix.egress.shown)
    if policies is None:
        policies = load_serving_policy(
            settings.config, os.environ, mode=settings.mode, registry=adapters
        )
    resolved = policies
    app = web.Application(client_max_size=settings.max_body_bytes, middlewares=[refuse_connect])
    if telemetry is None:
        telemetry = setup_telemetry(secrets=[credential_secret] if credential_secret else [])
    # Before the catch-all route (GET /metrics); its cleanup runs after services_ctx's.
    operations = install_telemetry(app, telemetry, clock)
    app[BODY_TIMEOUT] = settings.body_timeout

    async def services_ctx(app: web.Application) -> AsyncIterator[None]:
        if any(policy.admission.enabled for policy in resolved.all_policies()):
            await asyncio.to_thread(load_encodings)
        chosen = (
            store
            if store is not None
            else open_store(
                settings.state,
                operation_ttl=settings.operation_ttl,
                replay_max_bytes=settings.replay_max_bytes or None,
            )
        )
        await chosen.open()
        recovered = await chosen.recover(now=clock())
        if recovered:
            log.warning("%d operations left in flight are now UNKNOWN", len(recovered))
        for record in await unknown_at_start(chosen, recovered):
            operations.lost(record)
        session = new_session(timeouts or UpstreamTimeouts(read=settings.upstream_read_timeout))
        app[SERVICES] = Services(
            settings=settings,
            prefixes=table,
            store=chosen,
            session=session,
            clock=clock,
            credential_secret=process_secret(credential_secret),
            schemas=SchemaCache(),
            policies=resolved,
            adapters=adapters,
            telemetry=operations,
            kept_pieces=KeptUploads(settings.max_body_bytes),
            kept_parts=KeptUploads(settings.max_body_bytes),
        )
        # Settles UNKNOWN attempts past their deadline, takes over stopped Redis replicas.
        recovering = asyncio.create_task(recovery_loop(app[SERVICES]), name="turngate-recovery")
        try:
            yield
        finally:
            recovering.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await recovering
            await app[SERVICES].drain()
            await session.close()
            await chosen.close()

    app.cleanup_ctx.append(services_ctx)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/turngate/v1/operations/{operation_id}", operation)
    app.router.add_get("/turngate/v1/shadow", shadow_report)
    app.router.add_get("/turngate/v1/conversations/{conversation_id}", show_conversation)
    app.router.add_post("/turngate/v1/conversations/{conversation_id}/cancel", cancel_conversation)
    app.router.add_route("*", "/{tail:.*}", provider_route)
    return app


def _json(value: object, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(value), content_type="application/json")


async def healthz(request: web.Request) -> web.Response:
    return _json({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    try:
        ready = await request.app[SERVICES].store.ping()
    except Exception as exc:
        log.warning("state store ping failed: %s", type(exc).__name__)
        ready = False
    return _json({"status": "ready" if ready else "store unavailable"}, 200 if ready else 503)


async def operation(request: web.Request) -> web.Response:
    operation_id = request.match_info["operation_id"]
    record = await request.app[SERVICES].store.get(operation_id)
    if record is None:
        return plain_error(404, f"turngate: no operation {operation_id!r}", "operation_not_found")
    return _json(record.to_json())


async def show_conversation(request: web.Request) -> web.Response:
    return await conversation.show(request, request.app[SERVICES].store)


async def cancel_conversation(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    return await conversation.cancel(
        request, services.store, now=services.clock(), resolved=services.telemetry.resolved
    )


async def shadow_report(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    try:
        limit = _count_param(request, "limit", services.policies.shadow_records)
        examples = _count_param(request, "examples", 3)
    except ValueError as exc:
        return plain_error(400, f"turngate: {exc}", "invalid_query")
    try:
        report = await read_report(services.store, limit=limit, examples=examples)
    except Exception as exc:
        log.warning("shadow report: state store read failed: %s", type(exc).__name__)
        unavailable = "turngate: the state store is unavailable"
        return plain_error(503, unavailable, "state_store_unavailable")
    return _json(report_json(report))


def _method_not_allowed(request: web.Request, allowed: str) -> web.Response:
    method = request.method[:16]
    response = plain_error(
        405,
        # A CONNECT target is an authority, not a path: aiohttp leaves ``path`` empty.
        f"turngate: {method!r} is not allowed on {(request.path or request.raw_path)[:200]!r}",
        "method_not_allowed",
    )
    response.headers["Allow"] = allowed
    return response


def _count_param(request: web.Request, name: str, default: int) -> int:
    text = request.query.get(name)
    if text is None:
        return default
    if not text.isdigit() or len(text) > 7:
        raise ValueError(f"{name} must be a whole number, not {text[:20]!r}")
    return int(text)


# What the providers' APIs use; TRACE, CONNECT and unknown methods are never relayed.
RELAYED_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_OWN_PATHS = ("/healthz", "/readyz")


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class WebSocketRefused(LocalError):
    """A WebSocket upgrade: turngate relays HTTP only."""

    rule = "websocket_not_relayed"
    status = 501


def websocket_refused(request: web.Request) -> WebSocketRefused:
    """What a socket carries (OpenAI Realtime, the Responses WebSocket mode's
    ``response.create`` events) would reach the provider unchecked, so none is opened."""
    return WebSocketRefused(
        f"turngate: {request.path[:200]!r} asks for a WebSocket; turngate relays HTTP only, "
        "and requests sent over a socket could not be checked. Use the HTTP API through "
        "turngate (responses.create, streamed or not)"
    )


@web.middleware
async def refuse_connect(request: web.Request, handler: Handler) -> web.StreamResponse:
    """CONNECT asks for a tunnel; turngate is a reverse proxy and opens none. aiohttp routes
    no CONNECT to a handler, so without this its answer would be a bare 404."""
    if request.method == "CONNECT":
        return _method_not_allowed(request, ", ".join(sorted(RELAYED_METHODS)))
    return await handler(request)


async def provider_route(request: web.Request) -> web.StreamResponse:
    services = request.app[SERVICES]
    if request.path in _OWN_PATHS or request.path.startswith("/turngate/"):
        return _method_not_allowed(request, "GET")
    if request.method not in RELAYED_METHODS:
        return _method_not_allowed(request, ", ".join(sorted(RELAYED_METHODS)))
    route = match(services.prefixes, request.method, request.path, request.raw_path)
    if route is None:
        mounts = [prefix.mount for prefix in services.prefixes]
        hint = (
            "; /azure needs an Azure OpenAI resource (--upstream-azure)"
            if request.path.startswith(AZURE_MOUNT + "/") and AZURE_MOUNT not in mounts
            else ""
        )
        return plain_error(
            404,
            f"turngate: no route for {request.path!r}; the prefixes are {', '.join(mounts)}{hint}",
            "no_route",
        )
    if request.headers.get("Upgrade", "").strip().lower() == "websocket":
        return error_response(ERROR_API[route.provider], websocket_refused(request))
    if "anthropic" in (route.api, route.batch):
        route = with_anthropic_headers(route, request.headers)
    if route.api is not None:
        return await dispatch(request, route, services)
    try:
        batched = await batch_route(request, route, services)
        if batched is not None:
            return batched
        handle = retrieved_handle(request, route)
        if handle is not None:
            return await retrieve(request, route, services, handle)
        handle = streamed_handle(request, route)
        if handle is not None:
            return await retrieve_stream(request, route, services, handle)
        return await relay(request, route, services.session)
    except TurngateError as exc:  # the client's body stalled: 408
        return error_response(ERROR_API[route.provider], exc)
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        error: TurngateError = unavailable(exc)
        log.warning("relay of %s failed: %s", request.path, error.rule)
        return error_response(ERROR_API[route.provider], error)

"""`create_app(settings)`: the ASGI app. Its lifespan owns every long-lived thing; no module globals.

Router            what one running proxy owns: settings, policy, upstream pools, store,
                  validator, judge-verdict cache, metrics, background tasks — reached as `request.app.state.router`
routes            api/chat.py (POST /v1/chat/completions), api/messages.py (POST /v1/messages, Anthropic),
                  api/responses.py (POST /v1/responses),
                  api/responses_ws.py (WebSocket mode on /v1/responses), api/admin.py (models,
                  health, stats, metrics)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import hmac
import logging
from collections.abc import AsyncIterator, Coroutine
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute

from router.adaptive import AdaptiveState
from router.api import admin, chat, error_response, messages, responses, responses_ws
from router.api.access import AccessLog
from router.api.open_calls import OpenCalls
from router.errors import Overloaded, Unauthorized, UnknownPath
from router.escalation import Trace
from router.lanes import Choice, Lanes
from router.metrics import Metrics
from router.policy.model import Policy
from router.policy.watch import PolicyHolder, watch
from router.responses.state import ResponseCache, ResponseState
from router.settings import Settings
from router.shadow import Shadower
from router.store import Store, StoreOptions, open_store
from router.store.base import LANE_PREFIX, Event
from router.tracing import Tracing
from router.upstream import Limits, Upstreams
from router.validate import Validator
from router.verify import VerdictCache

log = logging.getLogger("router")


class Router:
    def __init__(self, settings: Settings, policy: PolicyHolder, store: Store) -> None:
        self.settings = settings
        self.policy = policy
        self.store = store
        self.metrics = Metrics()
        self.open = OpenCalls(self.metrics, settings.shutdown_grace)  # ended when a client leaves, at shutdown
        limits = Limits(settings.upstream_max_body_bytes, settings.upstream_max_answer_chars, self.metrics.tripped)
        self.upstreams = Upstreams(warm=settings.warm_up, limits=limits)
        self.validator = Validator(
            max_schema_bytes=settings.max_schema_bytes, max_pattern_bytes=settings.max_pattern_bytes
        )
        self.verdicts = VerdictCache()  # judge verdicts by (call, context) hash, bounded LRU
        self.tracing = Tracing(settings)  # OpenTelemetry spans; off unless OTEL_* says otherwise
        self.shadow = Shadower(settings, self.metrics)  # a route's `shadow` option (router/shadow.py)
        self.adaptive = AdaptiveState(store, policy)
        self.lanes = Lanes(self._count_lane)  # calls in flight per lane, lane views of the policy
        cache = ResponseCache(settings.responses_cache_entries, settings.responses_cache_bytes)
        durable = settings.responses_store_ttl > 0 and store.backend != "memory"  # memory:// adds nothing
        self.responses = ResponseState(cache, store if durable else None, self.metrics)  # previous_response_id
        self.inflight = 0
        self.ready = False
        self._tasks: set[asyncio.Task[Any]] = set()

    def background(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run off the request path; failures are logged, never raised to a client."""
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.warning("background task failed: %s", type(exc).__name__)

    def authorize(self, request: HTTPConnection) -> None:
        keys = [k.get_secret_value() for k in self.policy.current.client_keys + self.settings.client_keys]
        if not keys:
            return
        auth = request.headers.get("authorization", "")
        given = auth[7:].strip() if auth[:7].lower() == "bearer " else request.headers.get("x-api-key", "")
        if not any(hmac.compare_digest(given.encode(), k.encode()) for k in keys):
            self.metrics.refused.labels("unauthorized").inc()
            raise Unauthorized("A valid API key is required (Authorization: Bearer <key>).")

    def _count_lane(self, lane: Choice) -> None:
        """A call that asked for a lane: metrics and the store (stats' `lanes`), refusals included."""
        asked = lane.asked or lane.name
        self.metrics.lanes.labels(asked, lane.outcome).inc()
        self.store.record([Event("", asked, kind=LANE_PREFIX + lane.outcome)])

    def admit(self) -> None:
        """Refuse (503, Retry-After) when too many calls are in flight."""
        if self.inflight >= self.settings.max_concurrency:
            self.metrics.refused.labels("overloaded").inc()
            raise Overloaded("Too many calls in flight; retry shortly.")

    def observe(self, trace: Trace, ttft: float | None) -> None:
        """Count a served call: its final tier and route, time to first byte and in total."""
        elapsed = asyncio.get_running_loop().time() - trace.started
        self.metrics.observe_call(trace.tier, trace.route, trace.escalated, ttft or elapsed, elapsed)

    async def apply(self, policy: Policy) -> None:
        await self.upstreams.apply(policy)
        self.metrics.reloads.labels("applied").inc()

    async def start(self) -> None:
        await self.store.start()
        if self.store.unusable and self.policy.current.store_required:
            await self.store.close()
            raise StoreUnusable(self.store.backend, self.store.unusable)
        if self.store.unusable:
            log.error("%s store unusable (%s); serving degraded", self.store.backend, self.store.unusable)
        self.tracing.open()
        await self.upstreams.apply(self.policy.current)
        if self.settings.reload_policy and self.policy.path is not None:
            self.background(watch(self.policy, self.policy.path, on_change=self.apply))
        self.background(self.adaptive.run())
        self.background(self.responses.run())
        gc.freeze()  # start-up objects (policy, pools, imports) leave the collector's scans: shorter pauses
        self.ready = True

    async def close(self) -> None:
        self.ready = False
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.responses.close()  # what is still queued for the store
        await self.upstreams.close()
        await self.store.close()
        await self.tracing.close()  # the spans still queued are exported (bounded by the exporter's timeout)


class StoreUnusable(Exception):
    """The store cannot be used at start-up and the policy requires it (`store_required`)."""

    def __init__(self, backend: str, reason: str) -> None:
        super().__init__(f"the {backend} store cannot be used: {reason} (or set store_required: false in the policy)")


async def store_problem(settings: Settings, policy: Policy) -> str | None:
    """Why the store cannot be used, tried before serving (None: it can); `serve` exits on it unless
    the policy says `store_required: false`."""
    if not policy.store_required:
        return None
    url = settings.store or policy.store
    redis = url.lower().startswith(("redis://", "rediss://"))
    store = open_store(url, store_options(settings), **({"prefix": settings.store_prefix} if redis else {}))
    await store.start()
    try:
        return str(StoreUnusable(store.backend, store.unusable)) if store.unusable else None
    finally:
        await store.close()


def store_options(settings: Settings) -> StoreOptions:
    """The store's bounds that are process settings (the others keep their StoreOptions defaults)."""
    options = StoreOptions(
        responses_max_entry_bytes=settings.responses_store_max_entry_bytes,
        responses_max_rows=settings.responses_store_max_rows,
    )
    ttl = settings.responses_store_ttl  # 0: responses are not stored (ResponseState gets no store)
    return dataclasses.replace(options, responses_ttl=ttl) if ttl > 0 else options


async def _http_error(request: Request, exc: Exception) -> Response:
    """Unknown paths and methods, in the OpenAI error shape."""
    assert isinstance(exc, HTTPException)
    err = UnknownPath(f"{request.method} {request.url.path}: {exc.detail}", status=exc.status_code)
    return error_response(err)


def create_app(settings: Settings, policy: PolicyHolder | None = None) -> Starlette:
    holder = policy or PolicyHolder.from_file(settings.policy)
    url = settings.store or holder.current.store
    redis = url.lower().startswith(("redis://", "rediss://"))
    store = open_store(url, store_options(settings), **({"prefix": settings.store_prefix} if redis else {}))
    router = Router(settings, holder, store)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Router]]:
        await router.start()
        try:
            yield {"router": router}  # the lifespan state: how router/connections.py finds the router
        finally:
            await router.close()

    routes = [
        Route("/v1/chat/completions", chat.completions, methods=["POST"]),
        Route("/chat/completions", chat.completions, methods=["POST"]),
        Route("/v1/messages", messages.create, methods=["POST"]),
        Route("/v1/messages/count_tokens", messages.count_tokens, methods=["POST"]),
        Route("/v1/responses", responses.create, methods=["POST"]),
        Route("/responses", responses.create, methods=["POST"]),
        WebSocketRoute("/v1/responses", responses_ws.connect),
        WebSocketRoute("/responses", responses_ws.connect),
        *admin.routes,
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: _http_error},
        middleware=[Middleware(AccessLog)] if settings.access_log else [],
    )
    app.state.router = router
    return app

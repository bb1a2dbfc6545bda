"""`create_app(settings)`: the ASGI app. Its lifespan owns every long-lived thing; no module globals.

Runtime           what one running proxy owns (router/runtime.py) — reached as `request.app.state.runtime`
Lifecycle         starts the router once: from the server's lifespan, or on the first call when the
                  app is mounted in another (whose lifespan never reaches it); `lifespan_of(app)`
                  gives that app a lifespan to start and close it cleanly
routes            api/chat.py (POST /v1/chat/completions), api/messages.py (POST /v1/messages, Anthropic),
                  api/responses.py (POST /v1/responses),
                  api/responses_ws.py (WebSocket mode on /v1/responses), api/admin.py (models,
                  health, stats, metrics)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from router import log_output
from router.api import admin, chat, error_response, messages, responses, responses_ws
from router.api.access import AccessLog
from router.console import routes as console
from router.errors import NotStarted, RouterError, ShuttingDown, UnknownPath
from router.policy.model import Policy
from router.policy.watch import PolicyHolder
from router.runtime import Runtime, StoreUnusable
from router.settings import Settings
from router.store import Store, StoreOptions, open_store
from router.upstream import Upstream, build_upstream, serving

log = logging.getLogger("router")


class Lifecycle:
    """The router's start and close, each once. Mounted in another app (whose lifespan never reaches
    a mounted one), the first call starts it: calls meanwhile wait for that start, a failed start is
    a 503 (`NotStarted`) and the next call tries again. Once closed it stays closed."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._lock = asyncio.Lock()
        self._started = False
        self._closed = False

    async def start(self) -> None:
        async with self._lock:
            if self._closed:
                raise ShuttingDown("The router is shutting down.")
            if self._started:
                return
            try:
                await self.runtime.start()
            except BaseException:
                with contextlib.suppress(Exception):
                    await self.runtime.close()  # what did start (the store, tiers) is released
                raise
            self._started = True

    async def close(self) -> None:
        async with self._lock:
            self._closed = True
            if self._started:
                self._started = False
                await self.runtime.close()

    @contextlib.asynccontextmanager
    async def lifespan(self, app: object = None) -> AsyncIterator[dict[str, Runtime]]:
        await self.start()
        try:
            yield {"runtime": self.runtime}  # the lifespan state: how router/connections.py finds the Runtime
        finally:
            await self.close()
            log_output.stop()  # the log's lines waiting are written: the process may end by a signal next


class StartOnFirstCall:
    """ASGI middleware: a call that finds the router not started starts it (`Lifecycle.start`)."""

    def __init__(self, app: ASGIApp, lifecycle: Lifecycle) -> None:
        self.app = app
        self.lifecycle = lifecycle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.lifecycle.runtime.ready and scope["type"] in ("http", "websocket"):
            try:
                await self.lifecycle.start()
            except RouterError as exc:
                return await _refuse(exc, scope, receive, send)
            except Exception as exc:  # the reason goes to the log, never to the client
                reason = exc if isinstance(exc, StoreUnusable) else type(exc).__name__
                log.error("the router could not start: %s", reason)
                return await _refuse(NotStarted("The router could not start; retry shortly."), scope, receive, send)
        await self.app(scope, receive, send)


class App(Starlette):
    """Starlette with the router's own layers (`outer`: the access log, the start on a first call,
    `Direct`) outside its stack rather than inside its server-error layer: a call `Direct` sends to
    its handler, which renders every error itself, does not pass that layer (a wrapper of `send` and
    a frame per message). Requests for everything else go through Starlette's stack as before; an
    exception that escapes every layer is logged and answered 500 by the server."""

    def __init__(self, *, outer: Sequence[Middleware], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.outer = list(outer)

    # private API: starlette-middleware-stack, see docs/architecture.md
    def build_middleware_stack(self) -> ASGIApp:
        app = super().build_middleware_stack()
        for cls, args, kwargs in reversed(self.outer):
            app = cls(app, *args, **kwargs)
        return app


class Direct:
    """ASGI middleware, the innermost: a POST to one of the API's call paths goes straight to its
    handler, without Starlette's routing and exception layers (a route match per route, and three
    wrappers of `send`, on every call). The handlers render every error themselves
    (`router.api.endpoint`), so those layers have nothing to do for them; any other request (other
    paths and methods: 404, 405) goes through them."""

    def __init__(self, app: ASGIApp, calls: Mapping[str, Callable[[Request], Awaitable[Response]]]) -> None:
        self.app = app
        self.calls = dict(calls)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            handler = self.calls.get(_route_path(scope))
            if handler is not None:
                response = await handler(Request(scope, receive, send))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _route_path(scope: Scope) -> str:
    """The request's path within the app (mounted in another: without the mount's prefix), as
    Starlette's routing reads it."""
    # private API: starlette-route-path, see docs/architecture.md (starlette._utils.get_route_path)
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and path != root and path[len(root)] == "/":
        return path[len(root) :]
    return path


async def _refuse(exc: RouterError, scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1013, "reason": exc.message[:120]})  # 1013: try again later
    else:
        await error_response(exc)(scope, receive, send)


def lifespan_of(app: Starlette) -> Callable[[Any], AbstractAsyncContextManager[dict[str, Runtime]]]:
    """The lifespan of an app made by `create_app`, for the app it is mounted in:
    `FastAPI(lifespan=lifespan_of(proxy))` starts the router with it and closes it cleanly."""
    lifecycle: Lifecycle = app.state.lifecycle
    return lifecycle.lifespan


async def store_problem(settings: Settings, policy: Policy) -> str | None:
    """Why the store cannot be used, tried before serving (None: it can); `serve` exits on it unless
    the policy says `store_required: false`."""
    if not policy.store_required:
        return None
    store = store_of(settings, policy)
    await store.start()
    try:
        return str(StoreUnusable(store.backend, store.unusable)) if store.unusable else None
    finally:
        await store.close()


def store_of(settings: Settings, policy: Policy) -> Store:
    """The store the settings (else the policy) name, with the process's bounds, not started."""
    url = settings.store or policy.store
    redis = url.lower().startswith(("redis://", "rediss://"))
    return open_store(url, store_options(settings), **({"prefix": settings.store_prefix} if redis else {}))


def store_options(settings: Settings) -> StoreOptions:
    """The store's bounds that are process settings (the others keep their StoreOptions defaults)."""
    options = StoreOptions(
        responses_max_entry_bytes=settings.responses_store_max_entry_bytes,
        responses_max_rows=settings.responses_store_max_rows,
        write_wait=settings.store_write_wait,
    )
    ttl = settings.responses_store_ttl  # 0: responses are not stored (ResponseState gets no store)
    return dataclasses.replace(options, responses_ttl=ttl) if ttl > 0 else options


async def _http_error(request: Request, exc: Exception) -> Response:
    """Unknown paths and methods, in the OpenAI error shape."""
    assert isinstance(exc, HTTPException)
    err = UnknownPath(f"{request.method} {request.url.path}: {exc.detail}", status=exc.status_code)
    return error_response(err)


def create_app(
    settings: Settings, policy: PolicyHolder | None = None, upstreams: Mapping[str, Upstream] | None = None
) -> Starlette:
    """The proxy. `upstreams` serves the tiers it names with those objects (router/upstream/__init__.py)."""
    holder = policy or PolicyHolder.from_file(settings.policy)
    store = store_of(settings, holder.current)
    runtime = Runtime(settings, holder, store, serving(upstreams) if upstreams else build_upstream)
    lifecycle = Lifecycle(runtime)

    calls: dict[str, Callable[[Request], Awaitable[Response]]] = {  # POST only
        "/v1/chat/completions": chat.completions,
        "/chat/completions": chat.completions,
        "/v1/messages": messages.create,
        "/v1/messages/count_tokens": messages.count_tokens,
        "/v1/responses": responses.create,
        "/responses": responses.create,
    }
    routes = [
        *(Route(path, handler, methods=["POST"]) for path, handler in calls.items()),
        WebSocketRoute("/v1/responses", responses_ws.connect),
        WebSocketRoute("/responses", responses_ws.connect),
        *admin.routes,
        console.mount(runtime),
    ]
    app = App(
        routes=routes,
        lifespan=lifecycle.lifespan,
        exception_handlers={HTTPException: _http_error},
        outer=[
            *([Middleware(AccessLog)] if settings.access_log else []),
            Middleware(StartOnFirstCall, lifecycle=lifecycle),
            Middleware(Direct, calls=calls),
        ],
    )
    app.state.runtime = runtime
    app.state.lifecycle = lifecycle
    return app

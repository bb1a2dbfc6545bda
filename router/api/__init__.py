"""Transports: thin web handlers that parse, hand the call to the pipeline, and frame the answer.

`endpoint` wraps every handler: the one place where errors become OpenAI-shaped responses, and
where nothing unexpected escapes to the server's logger with a traceback.

`authorize` checks a client's key, `Admission` is one place among the calls in flight, `observe`
counts a served call. `admitted` is a call's admission: authorize, read the body (within
`body_timeout`), and only then take a place in flight; while the call runs, a client that goes
away cancels it (and so its upstream call) at once (router/core/live/open_calls.py): the router's server
protocol says so (`ConnectionCalls`), or under another server a task watching for `http.disconnect`.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, NoReturn

from starlette.requests import HTTPConnection, Request
from starlette.responses import Response
from starlette.types import Scope

from router.api import access
from router.constants import BODY_IN
from router.core.live.open_calls import ConnectionCalls
from router.errors import BodyTooLarge, ClientGone, Overloaded, RequestTimeout, RouterError, Unauthorized
from router.flow.summary import error_headers
from router.upstream.base import Chunk

if TYPE_CHECKING:
    from router.flow.outcome import Outcome
    from router.runtime import Runtime

log = logging.getLogger("router.api")

Handler = Callable[[Request], Awaitable[Response]]


def error_response(exc: RouterError) -> Response:
    return Response(exc.to_json(), exc.http_status, error_headers(exc), media_type="application/json")


def endpoint(handler: Handler, render: Callable[[RouterError], Response] = error_response) -> Handler:
    """`handler` with every error rendered by `render` (the OpenAI shape unless the API has its own)."""

    @functools.wraps(handler)
    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except RouterError as exc:
            access.note_failure(request.scope, exc)
            if exc.outcome is not None:  # a routed call that ended in an error: what it cost, logged too
                runtime_of(request).finished(exc.outcome, error=exc.code)
            return render(exc)
        except asyncio.CancelledError:
            if (reason := runtime_of(request).open.ended()) is None:
                raise
            return render(reason)  # the client left (nothing is sent), or the server is shutting down
        except Exception as exc:  # no traceback: it could carry request data or upstream details
            log.error("unexpected %s in %s %s", type(exc).__name__, request.method, request.url.path)
            return render(RouterError("The router failed unexpectedly; the error was logged."))

    return wrapped


def runtime_of(request: Request) -> Runtime:
    return request.app.state.runtime  # type: ignore[no-any-return]


def authorize(runtime: Runtime, connection: HTTPConnection) -> None:
    """401 unless the call carries one of the client keys (the policy's and the settings'), if any."""
    keys = [k.get_secret_value() for k in runtime.policy.current.client_keys + runtime.settings.client_keys]
    if not keys:
        return
    auth = connection.headers.get("authorization", "")
    given = auth[7:].strip() if auth[:7].lower() == "bearer " else connection.headers.get("x-api-key", "")
    if not any(hmac.compare_digest(given.encode(), k.encode()) for k in keys):
        runtime.metrics.refused.labels("unauthorized").inc()
        raise Unauthorized("A valid API key is required (Authorization: Bearer <key>).")


def observe(runtime: Runtime, outcome: Outcome, ttft: float | None) -> None:
    """Count a served call: its final tier and route, time to first byte and in total."""
    elapsed = outcome.took
    runtime.metrics.observe_call(outcome.tier, outcome.route, outcome.escalated, ttft or elapsed, elapsed)
    runtime.finished(outcome)


class Admission:
    """One place among the calls in flight (`runtime.inflight`, which changes only here): taken when
    made, given back by the first `release()` (later ones do nothing). `served()` counts the call and
    gives its access log line (`scope`: the request's) the final decision."""

    __slots__ = ("_held", "runtime", "scope")

    def __init__(self, runtime: Runtime, scope: Scope | None = None) -> None:
        if runtime.inflight >= runtime.settings.max_concurrency:
            runtime.metrics.refused.labels("overloaded").inc()
            raise Overloaded("Too many calls in flight; retry shortly.")
        runtime.inflight += 1
        self.runtime = runtime
        self.scope = scope
        self._held = True

    def served(self, outcome: Outcome, ttft: float | None) -> None:
        observe(self.runtime, outcome, ttft)
        if self.scope is not None:
            access.note(self.scope, outcome)

    def release(self) -> None:
        if self._held:
            self._held = False
            self.runtime.inflight -= 1


class Admitted(Admission):
    """An admitted client call with its body, and the watch for its client leaving (`watching`). The
    `admitted()` block gives its place back and ends the watch when it ends, unless `to_stream()`
    handed both to a stream, whose framer releases them when it ends."""

    __slots__ = ("body", "connection", "streaming", "task", "watch")

    def __init__(self, runtime: Runtime, body: bytes, scope: Scope | None = None) -> None:
        super().__init__(runtime, scope)
        self.body = body
        self.streaming = False
        self.task: asyncio.Task[object] | None = None
        self.connection: ConnectionCalls | None = None
        self.watch: asyncio.Task[None] | None = None

    def watching(self, request: Request, task: asyncio.Task[object]) -> None:
        """`task` (the call's) is ended when its client goes away: told by the connection, or seen
        by a task of its own when the server is not the router's (the connection's calls not in scope)."""
        self.task = task
        self.connection = request.scope.get(ConnectionCalls.KEY)
        if self.connection is not None:
            self.connection.add(task, self.runtime.open)
        else:
            self.watch = asyncio.create_task(_until_gone(request, self.runtime, task))

    def release(self) -> None:
        super().release()
        if self.connection is not None and self.task is not None:
            self.connection.discard(self.task)
        if self.watch is not None:
            self.watch.cancel()

    def to_stream(self, chunks: AsyncIterator[Chunk]) -> AsyncIterator[Chunk]:
        """`chunks` as an open stream (ended in the transport's shape at shutdown, or when the client
        leaves while it is written: the watch goes on)."""
        self.streaming = True
        return self.runtime.open.stream(chunks)


def admitted(request: Request) -> Admitting:
    """`async with admitted(request) as call`: authorize (401), read the body (413, 408), admit (503
    when too many calls are in flight) and count one call; a client that goes away meanwhile cancels
    the call. The block's end gives the place back unless the call became a stream."""
    return Admitting(request)


class Admitting:
    """The `admitted()` block (a class: no generator and its wrapper per call, as with
    `contextlib.asynccontextmanager`). While it runs, its task is one of the calls in progress
    (`OpenCalls.tasks`, as `OpenCalls.running()`)."""

    __slots__ = ("call", "request", "task")

    def __init__(self, request: Request) -> None:
        self.request = request
        self.call: Admitted | None = None
        self.task: asyncio.Task[object] | None = None

    async def __aenter__(self) -> Admitted:
        request = self.request
        runtime = runtime_of(request)
        authorize(runtime, request)
        body = await read_body(request, runtime)  # before a place is taken: a slow body holds none
        call = self.call = Admitted(runtime, body, request.scope)  # 503 when too many calls are in flight
        task = self.task = asyncio.current_task()
        assert task is not None
        runtime.open.tasks.add(task)
        call.watching(request, task)
        return call

    async def __aexit__(self, *exc: object) -> None:
        call, task = self.call, self.task
        assert call is not None and task is not None
        try:
            if not call.streaming:
                call.release()
        finally:
            call.runtime.open.tasks.discard(task)


async def _until_gone(request: Request, runtime: Runtime, task: asyncio.Task[object]) -> None:
    """Once the body is in, the next message is `http.disconnect`: the client left (the watch is
    ended before a response completes, after which the server says so too)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    runtime.open.end(task, ClientGone("The client closed the connection."), "client_gone")


def lower_headers(connection: HTTPConnection) -> dict[str, str]:
    """A request's or WebSocket upgrade's headers, names lower-cased."""
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in connection.scope["headers"]}


async def read_body(request: Request, runtime: Runtime) -> bytes:
    """The request body, refusing (413) anything over the limit without reading it all, and (408)
    a body that takes longer than `body_timeout`."""
    limit = runtime.settings.max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        _too_large(runtime, limit)
    if request.scope.get(BODY_IN):  # all of it is buffered (the router's server says so): no wait, no timer
        return await _body(request, runtime, limit)
    timeout = runtime.settings.body_timeout
    try:
        async with asyncio.timeout(timeout):
            return await _body(request, runtime, limit)
    except TimeoutError:
        runtime.metrics.tripped("body_timeout")
        raise RequestTimeout(f"The request body did not arrive within {timeout:g} s.") from None


async def _body(request: Request, runtime: Runtime, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            _too_large(runtime, limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(runtime: Runtime, limit: int) -> NoReturn:
    runtime.metrics.refused.labels("body_too_large").inc()
    raise BodyTooLarge(f"The request body exceeds the limit of {limit} bytes.")

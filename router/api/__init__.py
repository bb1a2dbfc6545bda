"""Transports: thin web handlers that parse, hand the call to the pipeline, and frame the answer.

`endpoint` wraps every handler: the one place where errors become OpenAI-shaped responses, and
where nothing unexpected escapes to the server's logger with a traceback.

`admitted` is a call's admission: authorize, read the body (within `body_timeout`), and only then
take a place in flight; while the call runs, a client that goes away cancels it (and so its
upstream call) at once (router/api/open_calls.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, NoReturn

from starlette.requests import Request
from starlette.responses import Response

from router.errors import BodyTooLarge, ClientGone, RequestTimeout, RouterError
from router.upstream.base import Chunk

if TYPE_CHECKING:
    from router.app import Router

log = logging.getLogger("router.api")

Handler = Callable[[Request], Awaitable[Response]]
SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}  # no proxy may buffer a stream


def error_response(exc: RouterError) -> Response:
    return Response(exc.to_json(), exc.http_status, exc.headers(), media_type="application/json")


def endpoint(handler: Handler, render: Callable[[RouterError], Response] = error_response) -> Handler:
    """`handler` with every error rendered by `render` (the OpenAI shape unless the API has its own)."""

    @functools.wraps(handler)
    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except RouterError as exc:
            return render(exc)
        except asyncio.CancelledError:
            if (reason := router_of(request).open.ended()) is None:
                raise
            return render(reason)  # the client left (nothing is sent), or the server is shutting down
        except Exception as exc:  # no traceback: it could carry request data or upstream details
            log.error("unexpected %s in %s %s", type(exc).__name__, request.method, request.url.path)
            return render(RouterError("The router failed unexpectedly; the error was logged."))

    return wrapped


def router_of(request: Request) -> Router:
    return request.app.state.router  # type: ignore[no-any-return]


class Admitted:
    """A client call holding a place in `router.inflight`, with its body. The `admitted()` block
    gives the place back when it ends, unless `to_stream()` handed it to a stream, which gives it
    back when it ends."""

    def __init__(self, router: Router, body: bytes) -> None:
        self.router = router
        self.body = body
        self.streaming = False

    def to_stream(self, chunks: AsyncIterator[Chunk]) -> AsyncIterator[Chunk]:
        """`chunks` as an open stream (ended in the transport's shape at shutdown)."""
        self.streaming = True
        return self.router.open.stream(chunks)


@contextlib.asynccontextmanager
async def admitted(request: Request) -> AsyncIterator[Admitted]:
    """Authorize (401), read the body (413, 408), admit (503 when too many calls are in flight) and
    count one call; a client that goes away meanwhile cancels the call."""
    router = router_of(request)
    router.authorize(request)
    body = await read_body(request, router)  # before a place is taken: a slow body holds none
    router.admit()
    router.inflight += 1
    call = Admitted(router, body)
    with router.open.running() as task:
        watch = asyncio.create_task(_until_gone(request, router, task))
        try:
            yield call
        finally:
            watch.cancel()
            if not call.streaming:
                router.inflight -= 1


async def _until_gone(request: Request, router: Router, task: asyncio.Task[object]) -> None:
    """Once the body is in, the next message is `http.disconnect`: the client left."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    router.open.end(task, ClientGone("The client closed the connection."), "client_gone")


def lower_headers(request: Request) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in request.scope["headers"]}


async def read_body(request: Request, router: Router) -> bytes:
    """The request body, refusing (413) anything over the limit without reading it all, and (408)
    a body that takes longer than `body_timeout`."""
    limit = router.settings.max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        _too_large(router, limit)
    chunks: list[bytes] = []
    size = 0
    timeout = router.settings.body_timeout
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    _too_large(router, limit)
                chunks.append(chunk)
    except TimeoutError:
        router.metrics.tripped("body_timeout")
        raise RequestTimeout(f"The request body did not arrive within {timeout:g} s.") from None
    return b"".join(chunks)


def _too_large(router: Router, limit: int) -> NoReturn:
    router.metrics.refused.labels("body_too_large").inc()
    raise BodyTooLarge(f"The request body exceeds the limit of {limit} bytes.")

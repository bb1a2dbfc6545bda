"""Transports: thin web handlers that parse, hand the call to the pipeline, and frame the answer.

`endpoint` wraps every handler: the one place where errors become OpenAI-shaped responses, and
where nothing unexpected escapes to the server's logger with a traceback.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from router.errors import BodyTooLarge, RouterError

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
        except Exception as exc:  # no traceback: it could carry request data or upstream details
            log.error("unexpected %s in %s %s", type(exc).__name__, request.method, request.url.path)
            return render(RouterError("The router failed unexpectedly; the error was logged."))

    return wrapped


def router_of(request: Request) -> Router:
    return request.app.state.router  # type: ignore[no-any-return]


class Admitted:
    """A client call holding a place in `router.inflight`. The `admitted()` block gives the place
    back when it ends, unless `to_stream()` handed it to a stream, which gives it back when it ends."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self.streaming = False

    def to_stream(self) -> None:
        self.streaming = True


@contextlib.contextmanager
def admitted(request: Request) -> Iterator[Admitted]:
    """Authorize (401), admit (503 when too many calls are in flight) and count one call."""
    router = router_of(request)
    router.authorize(request)
    router.admit()
    router.inflight += 1
    call = Admitted(router)
    try:
        yield call
    finally:
        if not call.streaming:
            router.inflight -= 1


def lower_headers(request: Request) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in request.scope["headers"]}


async def read_body(request: Request, router: Router) -> bytes:
    """The request body, refusing (413) anything over the limit without reading it all."""
    limit = router.settings.max_body_bytes
    declared = request.headers.get("content-length")
    too_large = BodyTooLarge(f"The request body exceeds the limit of {limit} bytes.")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        router.metrics.refused.labels("body_too_large").inc()
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            router.metrics.refused.labels("body_too_large").inc()
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)

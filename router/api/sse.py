"""Server-sent events of a streamed answer, for every HTTP transport (chat, Messages, Responses).

    framed(admission, attempts, items, frame, fail=..., close=..., done=...)

turns the pipeline's items (chunks, or a transport's events) into SSE bytes: `frame(item)` for
each, items that arrived together (`Chunk.more`) in one write; an error after the first byte becomes
`fail(error)`, and the stream ends with `close()`, the `: router {json}` comment (the call's final
decision) and `done`. However it ends, the call's place in flight is released, the call counted (its
access log line given the final decision), and `items` closed (an abandoned stream's upstream call
ends at once).

    SSEResponse(admission, frames, headers)

writes them, in the task that made the call: a client that leaves meanwhile is seen by the call's
own watch (router/api's `admitted`), which ends the stream as it ends a call not yet answered
(Starlette's `StreamingResponse` would start a task group and a second watching task per stream).
WebSocket mode sends events as messages instead (router/api/responses_ws.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from router.api import Admission
from router.errors import RouterError
from router.flow.summary import summary

if TYPE_CHECKING:
    from router.flow.attempts import Attempts
    from router.flow.outcome import Outcome

T = TypeVar("T")

SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}  # no proxy may buffer a stream


def sse_frame(event: Mapping[str, Any]) -> bytes:
    """One server-sent event named by its `type` (the Messages and Responses streams)."""
    return b"event: " + str(event["type"]).encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


def _nothing() -> bytes:
    return b""


async def framed(
    admission: Admission,
    attempts: Attempts,
    items: AsyncIterator[T],
    frame: Callable[[T], bytes],
    *,
    fail: Callable[[RouterError], bytes] | None = None,
    close: Callable[[], bytes] = _nothing,
    done: bytes = b"",
) -> AsyncIterator[bytes]:
    """The SSE bytes of `items` (see the module's docstring); without `fail`, an error is raised."""
    ttft = asyncio.get_running_loop().time() - attempts.started
    pending: list[bytes] = []  # frames of items that arrived together go out in one write
    outcome: Outcome | None = None  # the call's, taken once it ended
    try:
        try:
            async for item in items:
                pending.append(frame(item))
                if not getattr(item, "more", False):
                    yield b"".join(pending)
                    pending.clear()
        except RouterError as exc:
            if fail is None:
                raise
            outcome = attempts.outcome()
            yield b"".join((*pending, fail(exc), b": router ", summary(outcome), b"\n\n"))
            return
        outcome = attempts.outcome()
        yield b"".join((*pending, close(), b": router ", summary(outcome), b"\n\n", done))
    finally:
        try:
            if isinstance(items, AsyncGenerator):
                await items.aclose()
        finally:
            admission.release()
            admission.served(outcome or attempts.outcome(), ttft)


class SSEResponse(StreamingResponse):
    """`frames` (from `framed`) as a `text/event-stream` response (see the module's docstring)."""

    def __init__(self, admission: Admission, frames: AsyncIterator[bytes], headers: Mapping[str, str]) -> None:
        super().__init__(frames, media_type="text/event-stream", headers={**SSE_HEADERS, **headers})
        self.admission = admission

    # private API: starlette-stream-response, see docs/architecture.md
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.stream_response(send)
        except asyncio.CancelledError:
            # the watch ended the call while a write waited for the client: the frames end here
            if self.admission.runtime.open.ended() is None:
                raise
        finally:
            if isinstance(self.body_iterator, AsyncGenerator):
                await self.body_iterator.aclose()  # frames left unread: the call is released and counted

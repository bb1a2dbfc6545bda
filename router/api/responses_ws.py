"""WebSocket mode on GET /v1/responses: one connection, many sequential responses.

Protocol (OpenAI's Responses WebSocket mode, as the `openai` SDK's `responses.connect()` speaks it):
the client sends JSON text frames `{"type": "response.create", ...the POST body...}` (`stream` is
implicit and ignored); the server answers each with the same events as the SSE stream, one JSON text
frame per event, ending in `response.completed` (or `response.incomplete`, or `error`): like there,
`response.created` goes out with the answer's first chunk (it names the model that answers), and a
failure before it is one `error` event — but a prompt no tier's context takes, which is
`response.created`, `.in_progress` and `response.failed` (`context_length_exceeded`), as OpenAI sends it.
The final decision rides on `response.completed` and on an `error` event of a routed call
(`"router": {...}`: tier, route, mistakes, `repeat`, ...).
`generate: false` stores the input as a response without calling a model (warm-up).
`previous_response_id` is looked up on this connection first, then in the process cache, then in the
store (router/core/response_state.py); a miss is an `error` event and the socket stays open.

Limits and liveness
  auth          on the upgrade, from its headers (Authorization: Bearer / x-api-key): refused with
                HTTP 401 (the server's denial-response extension), else closed with 1008
  size          a message over `ws_max_message_bytes` closes the socket with 1009
  idle          no message for `ws_idle_timeout` seconds while no response runs: closed with 1000
  queue         `response.create` messages wait in a bounded queue behind the running one
                (`ws_max_pending`); beyond it the socket is closed with 1008
  state         the last `ws_max_responses` responses of the connection, at most `ws_max_state_bytes`
                of history (the oldest are evicted first)
  backpressure  each event is awaited on `send_text` (the server pauses while the client is slow)
  disconnect    the running response is cancelled, which closes its upstream stream
  ping/pong     the server's own keepalive (uvicorn: `ws_ping_interval`, `ws_ping_timeout`)

The access log has a line per turn (router/api/access.py's `turn`: 200, or its `error` event's status,
with the tier, route and escalation of a routed one) and one for the connection when it closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from contextlib import aclosing
from typing import TYPE_CHECKING

import orjson
from starlette.websockets import WebSocket, WebSocketDisconnect

from router.api import Admission, access, authorize, error_response, lower_headers, observe
from router.api.headers import summary
from router.core import pipeline
from router.core.call import check_depth
from router.core.response_state import ResponseCache, Stored
from router.errors import BadRequest, ContextExceeded, InvalidJSON, RouterError, Unauthorized
from router.responses import turn as turns
from router.responses.events import Event, error_event

if TYPE_CHECKING:
    from router.core.escalation import Trace
    from router.runtime import Runtime

Turn = tuple[int, "Trace | None"]  # how a turn ended, for its access log line: status, the routed call

log = logging.getLogger("router.api.ws")

# Fields of `response.create` that belong to the socket, not to the response (never sent upstream).
# `stream_id` (OpenAI's lanes) is accepted and ignored: responses on a connection run one at a time.
# `generate` stays in the body (the translation lets a warm-up's input be empty); no tier is sent it.
_ENVELOPE = ("type", "stream", "stream_id")


class UnknownEvent(BadRequest):
    code = "unknown_event"


async def connect(websocket: WebSocket) -> None:
    router: Runtime = websocket.app.state.router
    try:
        authorize(router, websocket)
    except Unauthorized as exc:
        if "websocket.http.response" in websocket.scope.get("extensions", {}):
            await websocket.send_denial_response(error_response(exc))
        else:
            await websocket.close(code=1008, reason="unauthorized")
        return
    await websocket.accept()
    await Connection(router, websocket).run()


class Connection:
    def __init__(self, router: Runtime, websocket: WebSocket) -> None:
        s = router.settings
        self.router = router
        self.ws = websocket
        self.cache = ResponseCache(s.ws_max_responses, s.ws_max_state_bytes)
        self.shared = router.responses
        self.headers = lower_headers(websocket)
        self.pending: asyncio.Queue[str] = asyncio.Queue(maxsize=s.ws_max_pending)
        self.close_with: tuple[int, str] | None = None

    async def run(self) -> None:
        reader = asyncio.create_task(self._read())
        worker = asyncio.create_task(self._work())
        try:
            await asyncio.wait({reader, worker}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (reader, worker):
                task.cancel()
            for task in (reader, worker):
                with contextlib.suppress(BaseException):
                    await task
        exc = worker.exception() if worker.done() and not worker.cancelled() else None
        if exc is not None and not isinstance(exc, WebSocketDisconnect | OSError):  # those: the client left
            log.error("websocket worker failed: %s", type(exc).__name__)
            self.close_with = self.close_with or (1011, "internal error")
        if self.close_with is not None:
            with contextlib.suppress(Exception):
                await self.ws.close(*self.close_with)

    async def _read(self) -> None:
        """Receive until the client leaves or breaks a limit; never blocks on the worker."""
        limit = self.router.settings.ws_max_message_bytes
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            text = message.get("text")
            if text is None:
                data = message.get("bytes") or b""
                size = len(data)
                text = data.decode("utf-8", "replace")
            else:
                size = len(text.encode())
            if size > limit:
                self.router.metrics.refused.labels("ws_message_too_big").inc()
                self.close_with = (1009, f"message over {limit} bytes")
                return
            try:
                self.pending.put_nowait(text)
            except asyncio.QueueFull:
                self.router.metrics.refused.labels("ws_too_many_pending").inc()
                self.close_with = (1008, "too many response.create messages waiting")
                return

    async def _work(self) -> None:
        idle = self.router.settings.ws_idle_timeout
        while True:
            try:
                async with asyncio.timeout(idle):
                    text = await self.pending.get()
            except TimeoutError:
                self.close_with = (1000, "idle timeout")
                return
            started = time.perf_counter()
            try:
                status, trace = await self._handle(text)
            except (WebSocketDisconnect, OSError):
                raise  # the client left: nothing to answer
            except Exception as exc:  # a bug must not end the connection; no traceback (request data)
                log.error("unexpected %s handling a websocket message", type(exc).__name__)
                failure = RouterError("The router failed unexpectedly; the error was logged.")
                await self.send(error_event(failure))
                status, trace = failure.http_status, None
            access.turn(self.ws.scope, status, trace, started)

    async def send(self, event: Event) -> None:
        await self.ws.send_text(orjson.dumps(event).decode())

    async def failed(self, exc: RouterError) -> Turn:
        """A turn that ends with an `error` event (with the call's routing, once it was routed)."""
        event = error_event(exc)
        if exc.trace is not None:
            event["router"] = orjson.loads(summary(exc.trace))
        await self.send(event)
        return exc.http_status, exc.trace

    async def _handle(self, text: str) -> Turn:
        try:
            event = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            return await self.failed(InvalidJSON(f"The message is not valid JSON ({exc.msg} at {exc.pos})."))
        kind = event.get("type") if isinstance(event, dict) else None
        try:
            check_depth(event)
        except RouterError as exc:
            return await self.failed(exc)
        if kind != "response.create":
            return await self.failed(
                UnknownEvent(f"Unknown event type {kind!r}; expected 'response.create'.", param="type")
            )
        body = {k: v for k, v in event.items() if k not in _ENVELOPE}
        try:
            prev = await turns.previous(body, self.cache, self.shared)
            native = turns.passes_through(self.router.policy.current)
            turn = turns.prepare(body, self.headers, prev, stream=True, native=native)
        except RouterError as exc:
            return await self.failed(exc)

        def save(entry: Stored) -> None:
            self.cache.put(turn.id, entry)
            if turn.store:
                self.shared.put(turn.id, entry)

        if event.get("generate") is False:
            for ev in turns.warm_up(turn, save):
                await self.send(ev)
            return 200, None
        return await self._respond(turn, save)

    async def _respond(self, turn: turns.Turn, save: turns.Save) -> Turn:
        router = self.router
        try:
            admission = Admission(router)
        except RouterError as exc:
            return await self.failed(exc)
        try:
            # created + in_progress go out with the first chunk, as on SSE, so that they name the model
            # that answers; a failure before it is one `error` event (nothing of a response was sent).
            try:
                with router.open.running():  # ended, in this API's shape, at shutdown
                    trace, chunks = await pipeline.stream(router, turn.call)
            except asyncio.CancelledError:
                if (reason := router.open.ended()) is None:
                    raise
                return await self.failed(reason)
            except ContextExceeded as exc:  # as OpenAI sends it: a failed response (Codex compacts)
                for event in turns.failed(turn, exc):
                    await self.send(event)
                return exc.http_status, exc.trace
            except RouterError as exc:
                return await self.failed(exc)
            except Exception as exc:  # no traceback: it could carry request data or upstream details
                log.error("unexpected %s in response %s", type(exc).__name__, turn.id)
                return await self.failed(RouterError("The router failed unexpectedly; the error was logged."))
            ttft = asyncio.get_running_loop().time() - trace.started
            turns.left_out(router, turn, trace)  # counted as on HTTP (no header to name it in)
            status = 200
            try:
                async with aclosing(turns.events(turn, trace, router.open.stream(chunks), save)) as stream:
                    async for ev in stream:
                        if ev["type"] == "error":
                            status = ev["status"]
                        await self.send(ev)
            finally:
                observe(router, trace, ttft)
            return status, trace
        finally:
            admission.release()

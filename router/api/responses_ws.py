"""WebSocket mode on GET /v1/responses: one connection, many responses (one at a time per stream).

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
store (router/core/live/response_state.py); a miss is an `error` event and the socket stays open.
When the tier it would go to keeps a WebSocket of its own (router/upstream/responses_ws.py), a
warm-up is passed on to it (`generate: false`), so the next turn sends only what it adds.

Streams: a `response.create` with a `stream_id` runs on that stream (OpenAI's multiplexing): each
stream runs its responses one at a time, in order, and streams run side by side; every event of a
response on a stream carries its `stream_id` (those without one run on the connection's own stream,
their events without it). A `previous_response_id` resolves on any stream of the connection (a fork).
`response.processed` (Codex's acknowledgement of a response it has handled) is taken, nothing answered.
Codex's `x-codex-turn-state` header on the upgrade is sent back on the upgrade's answer (Codex
replays it on its turn's requests: a sticky-routing token; the router keeps nothing of it).

Limits and liveness
  auth          on the upgrade, from its headers (Authorization: Bearer / x-api-key): refused with
                HTTP 401 (the server's denial-response extension), else closed with 1008
  mode off      with `ws_enabled` false every upgrade is refused with HTTP 426 (Codex then sends its
                turn over HTTP at once; any other failure it retries first), else closed with 1008
  size          a message over `ws_max_message_bytes` closes the socket with 1009
  idle          no message for `ws_idle_timeout` seconds while no response runs or waits: closed with 1000
  queue         `response.create` messages wait behind their stream's running one, `ws_max_pending` at
                most on all streams; beyond it the socket is closed with 1008; so it is on more
                than `ws_max_streams` streams
  state         the last `ws_max_responses` responses of the connection, at most `ws_max_state_bytes`
                of history (the oldest are evicted first)
  backpressure  each event is awaited on `send_text` (the server pauses while the client is slow)
  disconnect    the running response is cancelled, which closes its upstream stream
  shutdown      from SIGTERM on, a `response.create` is answered at once with an `error` event (503
                `shutting_down`); the socket is closed with 1012 once none of its responses runs or
                waits — an idle one at once; one still running at 80% of `shutdown_grace` ends with
                that `error` event (router/core/live/open_calls.py)
  ping/pong     the server's own keepalive (uvicorn: `ws_ping_interval`, `ws_ping_timeout`)

The access log has a line per turn (router/api/access.py's `turn`: 200, or its `error` event's status,
with the tier, route and escalation of a routed one) and one for the connection when it closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Coroutine
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

import orjson
from starlette.websockets import WebSocket, WebSocketDisconnect

from router.api import Admission, access, authorize, error_response, lower_headers, observe
from router.core.call import check_depth
from router.core.live.response_state import ResponseCache, Stored
from router.errors import (
    BadRequest,
    ContextExceeded,
    InvalidJSON,
    RouterError,
    ShuttingDown,
    Unauthorized,
    UpgradeRequired,
)
from router.flow import pipeline
from router.flow.summary import summary
from router.responses import turn as turns
from router.responses.events import Event, error_event

if TYPE_CHECKING:
    from router.flow.outcome import Outcome
    from router.runtime import Runtime

Turn = tuple[int, "Outcome | None"]  # how a turn ended, for its access log line: status, the routed call

log = logging.getLogger("router.api.ws")

# Fields of `response.create` that belong to the socket, not to the response (never sent upstream):
# `stream_id` names the stream it runs on. `generate` stays in the body (the translation lets a warm-up's
# input be empty); no tier is sent it, but a tier's own socket is warmed with it (`turns.prewarm`).
_ENVELOPE = ("type", "stream", "stream_id")
_PROCESSED = "response.processed"
_MAX_STREAM_ID = 256  # characters


class UnknownEvent(BadRequest):
    code = "unknown_event"


async def connect(websocket: WebSocket) -> None:
    runtime: Runtime = websocket.app.state.runtime
    try:
        authorize(runtime, websocket)
        if not runtime.settings.ws_enabled:
            raise UpgradeRequired("WebSocket mode is off here: send the request over HTTP (POST /v1/responses).")
    except (Unauthorized, UpgradeRequired) as exc:
        if "websocket.http.response" in websocket.scope.get("extensions", {}):
            await websocket.send_denial_response(error_response(exc))
        else:
            await websocket.close(code=1008, reason=exc.code or "refused")
        return
    headers = lower_headers(websocket)
    echoed = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in turns.turn_state(headers).items()]
    await websocket.accept(headers=echoed)
    await Connection(runtime, websocket, headers).run()


class Connection:
    def __init__(self, runtime: Runtime, websocket: WebSocket, headers: dict[str, str]) -> None:
        s = runtime.settings
        self.runtime = runtime
        self.ws = websocket
        self.cache = ResponseCache(s.ws_max_responses, s.ws_max_state_bytes)
        self.shared = runtime.responses
        self.headers = headers
        self.streams: dict[str, asyncio.Queue[Any]] = {}  # stream id ("": none) → its messages, in order
        self.waiting = 0  # messages queued on all streams
        self.running = 0  # responses running
        self.seen = time.monotonic()  # a message came or a response ended
        self.close_with: tuple[int, str] | None = None
        self._sending = asyncio.Lock()  # one event at a time on the socket, whichever stream it is of
        self._tasks: set[asyncio.Task[None]] = set()
        self._over: asyncio.Future[None] | None = None

    async def run(self) -> None:
        self._over = asyncio.get_running_loop().create_future()
        self._start(self._read())
        self._start(self._watch())
        forget = self.runtime.open.on_drain(self._quiet)
        try:
            await self._over
        finally:
            forget()
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(BaseException):
                    await task
        self._tasks.clear()  # no cycle: a task's failure holds frames that hold this connection
        failed = [t.exception() for t in tasks if t.done() and not t.cancelled()]
        bugs = [e for e in failed if e is not None and not isinstance(e, WebSocketDisconnect | OSError)]
        if bugs:  # not the client leaving
            log.error("websocket worker failed: %s", type(bugs[0]).__name__)
            self.close_with = self.close_with or (1011, "internal error")
        if self.close_with is not None:
            with contextlib.suppress(Exception):
                await self.ws.close(*self.close_with)

    def _start(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None] | None = None) -> None:
        """The reader or the watch ended, or a stream's worker failed: the connection ends."""
        if self._over is not None and not self._over.done():
            self._over.set_result(None)

    def _quiet(self) -> None:
        """While the server drains, the connection closes (1012, service restart) once no response
        runs or waits on it — an idle one at once: it does not hold the process's exit."""
        if self.runtime.open.draining and not self.running and not self.waiting:
            self.close_with = self.close_with or (1012, "shutting down")
            self._ended()

    async def _read(self) -> None:
        """Receive until the client leaves or breaks a limit; never blocks on a response."""
        s = self.runtime.settings
        limit = s.ws_max_message_bytes
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            self.seen = time.monotonic()
            text = message.get("text")
            if text is None:
                data = message.get("bytes") or b""
                size = len(data)
                text = data.decode("utf-8", "replace")
            else:
                size = len(text.encode())
            if size > limit:
                self.runtime.metrics.refused.labels("ws_message_too_big").inc()
                self.close_with = (1009, f"message over {limit} bytes")
                return
            try:
                event: Any = orjson.loads(text)
            except orjson.JSONDecodeError as exc:  # answered in order, on the connection's own stream
                event = InvalidJSON(f"The message is not valid JSON ({exc.msg} at {exc.pos}).")
            kind = event.get("type") if isinstance(event, dict) else None
            if kind == _PROCESSED:  # the client handled a response: nothing to answer
                continue
            stream = event.get("stream_id") if isinstance(event, dict) else None
            stream = stream if isinstance(stream, str) and 0 < len(stream) <= _MAX_STREAM_ID else ""
            if self.waiting >= s.ws_max_pending:
                self.runtime.metrics.refused.labels("ws_too_many_pending").inc()
                self.close_with = (1008, "too many response.create messages waiting")
                return
            queue = self.streams.get(stream)
            if queue is None:
                if len(self.streams) >= s.ws_max_streams:
                    self.runtime.metrics.refused.labels("ws_too_many_streams").inc()
                    self.close_with = (1008, f"more than {s.ws_max_streams} streams")
                    return
                queue = self.streams[stream] = asyncio.Queue()
                self._start(self._work(stream, queue))
            self.waiting += 1
            queue.put_nowait(event)

    async def _watch(self) -> None:
        """Close the connection once it has been idle `ws_idle_timeout` seconds: no message, nothing running."""
        idle = self.runtime.settings.ws_idle_timeout
        while True:
            await asyncio.sleep(max(0.0, self.seen + idle - time.monotonic()))
            if not self.running and not self.waiting and time.monotonic() - self.seen >= idle:
                self.close_with = (1000, "idle timeout")
                return
            if self.running or self.waiting:
                await asyncio.sleep(min(idle, 1.0))

    async def _work(self, stream: str, queue: asyncio.Queue[Any]) -> None:
        """One stream's responses, in order. Only the client leaving ends it early (the connection ends)."""
        while True:
            event = await queue.get()
            self.waiting -= 1
            self.running += 1
            started = time.perf_counter()
            try:
                status, outcome = await self._handle(event, stream)
            except (WebSocketDisconnect, OSError):
                raise  # the client left: nothing to answer
            except Exception as exc:  # a bug must not end the connection; no traceback (request data)
                log.error("unexpected %s handling a websocket message", type(exc).__name__)
                failure = RouterError("The router failed unexpectedly; the error was logged.")
                await self.send(error_event(failure), stream)
                status, outcome = failure.http_status, None
            finally:
                self.running -= 1
                self.seen = time.monotonic()
            access.turn(self.ws.scope, status, outcome, started)
            self._quiet()

    async def send(self, event: Event, stream: str = "") -> None:
        if stream:
            event["stream_id"] = stream
        text = orjson.dumps(event).decode()
        async with self._sending:
            await self.ws.send_text(text)

    async def failed(self, exc: RouterError, stream: str = "") -> Turn:
        """A turn that ends with an `error` event (with the call's routing, once it was routed)."""
        event = error_event(exc)
        if exc.outcome is not None:
            event["router"] = orjson.loads(summary(exc.outcome))
        await self.send(event, stream)
        return exc.http_status, exc.outcome

    async def _handle(self, event: Any, stream: str) -> Turn:
        if isinstance(event, InvalidJSON):
            return await self.failed(event)
        kind = event.get("type") if isinstance(event, dict) else None
        try:
            check_depth(event)
        except RouterError as exc:
            return await self.failed(exc, stream)
        if kind != "response.create":
            return await self.failed(
                UnknownEvent(f"Unknown event type {kind!r}; expected 'response.create'.", param="type"), stream
            )
        if self.runtime.open.draining:  # refused at once; the socket closes (1012) once the others end
            return await self.failed(ShuttingDown("The router is shutting down; retry on another instance."), stream)
        if "stream_id" in event and not stream:
            why = f"'stream_id' must be a string of 1 to {_MAX_STREAM_ID} characters."
            return await self.failed(BadRequest(why, param="stream_id"))
        body = {k: v for k, v in event.items() if k not in _ENVELOPE}
        try:
            prev = await turns.previous(body, self.cache, self.shared)
            native = turns.passes_through(self.runtime.policy.current)
            turn = turns.prepare(body, self.headers, prev, stream=True, native=native)
        except RouterError as exc:
            return await self.failed(exc, stream)

        async def save(entry: Stored) -> None:
            self.cache.put(turn.id, entry)
            if turn.store:
                self.shared.put(turn.id, entry)
                await self.shared.written(turn.id)  # a follow-up sent at once to another replica finds it

        if event.get("generate") is False:
            upstream = await turns.prewarm(self.runtime, turn)  # a tier's own socket: warmed too
            for ev in await turns.warm_up(turn, save, upstream):
                await self.send(ev, stream)
            return 200, None
        return await self._respond(turn, save, stream)

    async def _respond(self, turn: turns.Turn, save: turns.Save, stream: str) -> Turn:
        runtime = self.runtime
        try:
            admission = Admission(runtime)
        except RouterError as exc:
            return await self.failed(exc, stream)
        try:
            # created + in_progress go out with the first chunk, as on SSE, so that they name the model
            # that answers; a failure before it is one `error` event (nothing of a response was sent).
            try:
                with runtime.open.running():  # ended, in this API's shape, at shutdown
                    attempts, chunks = await pipeline.stream(runtime, turn.call)
            except asyncio.CancelledError:
                if (reason := runtime.open.ended()) is None:
                    raise
                return await self.failed(reason, stream)
            except ContextExceeded as exc:  # as OpenAI sends it: a failed response (Codex compacts)
                for event in turns.failed(turn, exc):
                    await self.send(event, stream)
                return exc.http_status, exc.outcome
            except RouterError as exc:
                return await self.failed(exc, stream)
            except Exception as exc:  # no traceback: it could carry request data or upstream details
                log.error("unexpected %s in response %s", type(exc).__name__, turn.id)
                failure = RouterError("The router failed unexpectedly; the error was logged.")
                return await self.failed(failure, stream)
            ttft = asyncio.get_running_loop().time() - attempts.started
            status = 200
            try:
                # counted as on HTTP (no header to name it in)
                turns.left_out(runtime, turn, attempts.outcome(priced=False))
                async with aclosing(turns.events(turn, attempts, runtime.open.stream(chunks), save)) as events:
                    async for ev in events:
                        if ev["type"] == "error":
                            status = ev["status"]
                        await self.send(ev, stream)
            finally:
                # the upstream call ends here, whatever ended the turn: not when the collector frees
                # `chunks` (a write to a client that has gone raises, and its traceback holds this frame)
                if isinstance(chunks, AsyncGenerator):
                    await chunks.aclose()
                outcome = attempts.outcome()
                observe(runtime, outcome, ttft)
            return status, outcome
        finally:
            admission.release()

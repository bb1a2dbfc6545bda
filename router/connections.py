"""Client connections: uvicorn's protocols with the limits they lack, and the server's options.

    defer_accept        the listening socket hands a connection to the server only once its first
                        bytes arrive (Linux TCP_DEFER_ACCEPT, as nginx's `listen … deferred`): a
                        connection that sends nothing holds no descriptor and costs the server no
                        CPU; after about this many seconds (the kernel rounds up to its SYN-ACK
                        retries: 10 → 15 s) it is handed over anyway and `header_timeout` applies
    header_timeout      a connection that has not sent a whole request line and headers within this
                        many seconds of connecting (or of starting its next request) gets 408 and is
                        closed: silent and slow-header ("slowloris") connections do not pile up
    max_header_bytes    more request line and headers than this → 431, closed
    max_connections     at the cap, a new connection closes the idle connection that waited longest
                        (one that never sent a request first); when none is idle the new one gets
                        503 (Retry-After) and is closed — before descriptors run out (0: ¾ of the
                        open-file limit)
    keep_alive_timeout  an idle keep-alive connection is closed (uvicorn's own timer)
    shutdown            the listening sockets close with nothing queued (router/listening.py); one
                        waiting for a request stays `shutdown_idle_wait` (a close could cross one on its
                        way): a request then gets `connection: close`. uvicorn asks every other connection
                        to close: the router then ends the calls and
                        streams still open at 80% of `shutdown_grace` in their API's shape
                        (router/core/live/open_calls.py); a WebSocket-mode connection closes
                        itself (1012) once none of its responses runs — an idle one at once — and
                        is closed here (1012) just after that cut at the latest

A connection that is lost ends the calls in progress on it (`ConnectionCalls` in the request's
scope, router/core/live/open_calls.py): a client that goes away cancels its call and upstream call at
once, without a task per call watching for it.

Every limit that trips counts in `router_limits_tripped{limit}`. A response's head goes out with its
first body part, in one write (`OneWrite`). The protocols find the Runtime in the lifespan state
(`{"runtime": runtime}`, router/app.py), so they work in every worker process.

    server_options(settings)   the keyword arguments of `uvicorn.Config` for them
    Server                     uvicorn's server, its listening sockets set up as above
    serve(app, **options)      `uvicorn.run` with that server
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import resource
import socket
import sys
import weakref
from typing import TYPE_CHECKING, Any

# private API: uvicorn-protocol-limits, see docs/architecture.md (the *_impl protocols, subclassed below)
# private API: uvicorn-body-arrival, see docs/architecture.md (HIGH_WATER_LIMIT)
import uvicorn
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from router.constants import BODY_IN, CUT_AT, GC_YOUNG_THRESHOLD
from router.core.live.open_calls import ConnectionCalls
from router.errors import Overloaded
from router.listening import close_gently, defer_accept
from router.settings import Settings

if TYPE_CHECKING:
    from router.runtime import Runtime

_CLOSE = b"connection: close\r\ncontent-length: 0\r\n\r\n"
_TIMEOUT = b"HTTP/1.1 408 Request Timeout\r\n" + _CLOSE
_TOO_LARGE = b"HTTP/1.1 431 Request Header Fields Too Large\r\n" + _CLOSE


def _busy() -> bytes:
    body = Overloaded("Too many open connections; retry shortly.").to_json()
    head = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
    return head + b"connection: close\r\ncontent-length: %d\r\n\r\n" % len(body) + body


_BUSY = _busy()


def connection_cap(settings: Settings) -> int:
    if settings.max_connections:
        return settings.max_connections
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(16, soft * 3 // 4) if soft != resource.RLIM_INFINITY else 1 << 20


class Idle:
    """A server's connections waiting for a request, each kind oldest first: `fresh` ones never sent
    one, `kept` ones are kept alive after one. Insertion-ordered dicts: a victim is found in O(1),
    not by a scan of every connection at each new one (a flood of silent connections is one new
    connection per eviction)."""

    __slots__ = ("fresh", "kept")

    def __init__(self) -> None:
        self.fresh: dict[Any, None] = {}
        self.kept: dict[Any, None] = {}

    @staticmethod
    def of(protocol: Any) -> Idle:
        """The server's (kept in uvicorn's state, which all its connections share)."""
        # private API: uvicorn-protocol-limits, see docs/architecture.md (an attribute of ours on uvicorn's ServerState)
        state = protocol.server_state
        idle: Idle | None = getattr(state, "router_idle", None)
        if idle is None:
            idle = state.router_idle = Idle()
        return idle

    def waiting(self, conn: Any, served: bool) -> None:
        self.fresh.pop(conn, None)
        self.kept.pop(conn, None)
        (self.kept if served else self.fresh)[conn] = None

    def busy(self, conn: Any) -> None:
        self.fresh.pop(conn, None)
        self.kept.pop(conn, None)

    def victim(self) -> Any | None:
        """The connection that waited longest, never-served ones first; entries no longer waiting
        (closing, or answered before their body came) are dropped on the way."""
        for pool in (self.fresh, self.kept):
            while pool:
                conn = next(iter(pool))
                del pool[conn]
                if conn._waiting() and not conn.transport.is_closing():
                    return conn
        return None


def _runtime(state: Any) -> Runtime | None:  # the router in a lifespan state
    return state.get("runtime") if isinstance(state, dict) else None


class BodyArrival(asyncio.Event):
    """A request cycle's wake-up for its app (uvicorn sets it at each part of the body): held back
    while the body is still arriving in parts smaller than `HIGH_WATER_LIMIT` together, so a body
    sent a byte at a time wakes the app once when it is in, not once per byte (every route reads
    the whole body before it starts; its deadline, `body_timeout`, runs in the app meanwhile). The
    end of the body, a lost connection, an answer, and as much as uvicorn buffers before it pauses
    reading each wake it at once. The cycle is held weakly: it holds this event, and a reference
    cycle would leave every request's scope and headers to the garbage collector (pauses of 10 ms
    and more under load) instead of freeing them when the request ends."""

    # private API: uvicorn-body-arrival, see docs/architecture.md (the cycle's message_event, replaced)
    __slots__ = ("_cycle",)

    def __init__(self, cycle: Any) -> None:
        super().__init__()
        self._cycle = weakref.ref(cycle)

    def set(self) -> None:
        c = self._cycle()
        if c is None or not c.more_body or c.disconnected or c.response_complete or len(c.body) >= HIGH_WATER_LIMIT:
            super().set()


class OneWrite:
    """The transport a response is written through: its head (status line and headers) waits for
    its first body part, so that both go out in one write — one TCP segment and one wake-up of the
    client instead of two, measurably cheaper per call. A head with no body part by the end of this
    turn of the event loop (or at the response's end) goes out alone."""

    __slots__ = ("_head", "_loop", "_started", "transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self._loop = loop
        self._head: bytes | None = None
        self._started = False

    def write(self, data: bytes) -> None:
        if not self._started and not data.startswith(b"HTTP/1.1 100 "):  # an interim 100 Continue goes at once
            self._started = True
            self._head = data
            self._loop.call_soon(self.flush)
            return
        if self._head is not None:
            data, self._head = self._head + data, None
        self.transport.write(data)

    def flush(self) -> None:
        if self._head is not None:
            head, self._head = self._head, None
            if not self.transport.is_closing():
                self.transport.write(head)

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def is_closing(self) -> bool:
        return self.transport.is_closing()


def _guarded(base: type[Any], name: str) -> type[Any]:
    """`base` (an uvicorn HTTP protocol) with the limits above."""

    # private API: uvicorn-protocol-limits, see docs/architecture.md
    class Guarded(base):  # type: ignore[misc]
        _runtime: Runtime | None = None
        _calls: ConnectionCalls | None = None
        _idle: Idle | None = None
        _timer: asyncio.TimerHandle | None = None
        _header_bytes = 0

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            self._runtime = runtime = _runtime(getattr(self, "app_state", None))
            if runtime is None:
                return
            self._calls = ConnectionCalls()
            self._idle = Idle.of(self)
            if len(self.connections) > connection_cap(runtime.settings) and not self._evict_one():
                runtime.metrics.tripped("connections_refused")
                self._close(_BUSY)
                return
            self._idle.waiting(self, served=False)
            self._arm()

        def data_received(self, data: bytes) -> None:
            before = self.cycle
            super().data_received(data)
            runtime = self._runtime
            if runtime is None or self.transport.is_closing():
                return
            if self.cycle is not before or self.transport.get_protocol() is not self:  # headers in, or upgraded
                if runtime.open.draining and self.cycle is not before:
                    self.cycle.keep_alive = False  # shutting down: answered with `connection: close`
                self._disarm()
                self._header_bytes = 0
                if self._idle is not None:
                    self._idle.busy(self)
            elif self._waiting():
                self._header_bytes += len(data)
                if self._header_bytes > runtime.settings.max_header_bytes:
                    runtime.metrics.tripped("header_too_large")
                    self._close(_TOO_LARGE)
                elif self._timer is None:  # the first bytes of the next request on a kept-alive connection
                    self._arm()

        def on_headers_complete(self) -> None:  # httptools: a request's head is in, its cycle made
            super().on_headers_complete()
            if self.cycle is not None:
                # private API: uvicorn-one-write, see docs/architecture.md
                self.cycle.transport = OneWrite(self.transport, self.loop)
                # private API: uvicorn-body-arrival, see docs/architecture.md
                self.cycle.message_event = BodyArrival(self.cycle)
                # private API: uvicorn-scope-keys, see docs/architecture.md
                if self._calls is not None:  # the calls it admits end when the connection is lost
                    self.scope[ConnectionCalls.KEY] = self._calls

        def on_message_complete(self) -> None:  # httptools: the request's whole body is buffered
            super().on_message_complete()
            if self.cycle is not None and not self.cycle.response_complete:
                # private API: uvicorn-scope-keys, see docs/architecture.md
                self.scope[BODY_IN] = True

        def on_response_complete(self) -> None:
            if self.cycle is not None and isinstance(self.cycle.transport, OneWrite):
                self.cycle.transport.flush()  # a HEAD response has no body write
            if self._idle is not None:
                self._idle.waiting(self, served=True)
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._idle is not None:
                self._idle.busy(self)
            super().connection_lost(exc)
            if self._calls is not None:
                self._calls.lost()

        def timeout_keep_alive_handler(self) -> None:
            if not self._waiting():  # (at shutdown, `shutdown_idle_wait`) a request came meanwhile
                return
            if self._runtime is not None and not self.transport.is_closing():
                self._runtime.metrics.tripped("idle_closed")
            super().timeout_keep_alive_handler()

        def shutdown(self) -> None:
            if self._runtime is not None:
                self._runtime.drain()
                if self._waiting() and not self.transport.is_closing():  # a close could cross a request
                    self.loop.call_later(self._runtime.settings.shutdown_idle_wait, self.timeout_keep_alive_handler)
                    return
            super().shutdown()

        # -- limits --------------------------------------------------------------------------------
        def _waiting(self) -> bool:
            """No request in progress: waiting for one (silent, slow headers, or kept alive). A request
            answered before its whole body came (413) is still in progress while that body arrives."""
            return self.cycle is None or bool(self.cycle.response_complete and not self.cycle.more_body)

        def _arm(self) -> None:
            assert self._runtime is not None
            self._timer = self.loop.call_later(self._runtime.settings.header_timeout, self._header_timeout)

        def _disarm(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _header_timeout(self) -> None:
            self._timer = None
            if self._runtime is not None and self._waiting() and not self.transport.is_closing():
                self._runtime.metrics.tripped("header_timeout")
                self._close(_TIMEOUT)

        def _close(self, answer: bytes) -> None:
            self._disarm()
            if not self.transport.is_closing():
                self.transport.write(answer)
                self.transport.close()

        def _evict_one(self) -> bool:
            """Close the idle connection that waited longest — one that never sent a request first."""
            assert self._runtime is not None and self._idle is not None
            victim = self._idle.victim()
            if victim is None:
                return False
            self._runtime.metrics.tripped("connections_evicted")
            victim._close(_TIMEOUT)
            return True

    Guarded.__name__ = Guarded.__qualname__ = name  # picklable by reference (uvicorn's worker processes)
    return Guarded


# private API: uvicorn-protocol-limits, see docs/architecture.md
GuardedH11 = _guarded(H11Protocol, "GuardedH11")
try:
    # private API: uvicorn-protocol-limits, see docs/architecture.md
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - uvicorn[standard] brings httptools
    GuardedHTTP = GuardedH11
else:
    GuardedHttpTools = _guarded(HttpToolsProtocol, "GuardedHttpTools")
    GuardedHTTP = GuardedHttpTools


class GuardedWebSockets(WebSocketsSansIOProtocol):
    """At shutdown, a WebSocket is left to the router, which closes it (1012) once none of its
    responses runs (router/api/responses_ws.py: an idle one at once); one still open just after the
    cut of those running (an `error` event each) is closed here with 1012."""

    # private API: uvicorn-protocol-limits, see docs/architecture.md
    def shutdown(self) -> None:
        if (runtime := _runtime(getattr(self, "app_state", None))) is None:
            return super().shutdown()
        runtime.drain()
        self.loop.call_later(runtime.open.grace * CUT_AT + 0.2, super().shutdown)


def server_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's options for the protocols above and the settings it applies itself."""
    return {
        "http": GuardedHTTP,
        "ws": GuardedWebSockets,
        "timeout_keep_alive": settings.keep_alive_timeout,
        "timeout_graceful_shutdown": settings.shutdown_grace,
        "h11_max_incomplete_event_size": settings.max_header_bytes,
        "ws_max_size": settings.ws_max_message_bytes + 1,  # our own check answers 1009 with a reason
        "ws_ping_interval": settings.ws_ping_interval,
        "ws_ping_timeout": settings.ws_ping_interval,
    }


class Server(uvicorn.Server):
    """uvicorn's server: its sockets defer silent connections once the app has started, the GC is tuned for
    serving (here, where the router owns the process, not in an app a host mounts); at shutdown the sockets
    close gently unless `handed_over` (another process accepts from them)."""

    handed_over = False

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        # private API: uvicorn-server, see docs/architecture.md (here and in shutdown)
        runtime = _runtime(getattr(self.lifespan, "state", None))
        if runtime is None or not self.started:
            return
        for sock in (sock for server in self.servers for sock in server.sockets):
            defer_accept(sock, runtime.settings.defer_accept)
        gc.freeze()  # start-up objects (policy, pools, imports) leave the collector's scans: shorter pauses
        gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])  # fewer young collections (constants.py)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        runtime = _runtime(getattr(self.lifespan, "state", None))
        if runtime is not None and not self.handed_over:
            listening = [sock for server in self.servers for sock in server.sockets]
            await close_gently(listening, runtime.settings.accept_drain, runtime.settings.shutdown_grace)
        await super().shutdown(sockets)


def serve(app: Any, **options: Any) -> None:
    """`uvicorn.run(app, **options)` with the router's `Server`."""
    server = Server(uvicorn.Config(app, **options))
    with contextlib.suppress(KeyboardInterrupt):  # as uvicorn.run: a second Ctrl-C during shutdown
        server.run()
    if not server.started:
        sys.exit(3)  # uvicorn's STARTUP_FAILURE

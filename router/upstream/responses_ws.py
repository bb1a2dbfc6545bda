"""OpenAI's Responses WebSocket mode, upstream: a tier with `websocket: true` (router/policy/model.py)
keeps one WebSocket per client session (GET {api_base}/responses as ws:// or wss://) and sends each
turn on it as a `response.create` message, reading the answer's events (one JSON text message each,
the SSE stream's events) up to its end.

    ResponsesSocket      one connection (the `websockets` library): send a message, receive one
    SocketTurns          a tier's turns over its sessions' seats (router/sessions/sockets.py)
        stream(...)      a turn's chunks (responses_view.py's ResponsesEvents), or its HTTP stream when the
                         socket cannot serve it
        prewarm(...)     a warm-up: the socket opened, and (`generate`) `generate: false` sent on it: the
                         input taken upstream, nothing generated; the upstream's id

A turn whose router previous response was this tier's last answer on the session's socket
(`Native.previous` == (tier, the socket's last id)) sends only the request's own input items, with
`previous_response_id` set to that upstream id; any other turn sends the whole chain (the router's
history written out, as over HTTP), which starts the socket's chain again: the first turn, an
escalated turn, a turn after another tier answered, a fork.

When a socket is reopened, and when a session falls back to HTTP
  limit       an `error` event `websocket_connection_limit_reached` (OpenAI ends a socket at 60 min),
              and before that a socket `upstream_ws_max_age` s old: closed, a new one opened, the turn
              sent whole on it (once)
  lost state  `previous_response_not_found` on a continued turn: the turn sent again whole (once)
  closed      a kept socket that closes before the answer's first event (found closed on sending, or
              closed before the answer came: an upstream that closed it while it was idle cannot be
              told from one that dropped it on this turn): reopened, the turn sent whole (once)
  failure     a socket that cannot be opened (refused, an HTTP status instead of the upgrade, no
              upgrade within the tier's `connect` timeout) or a new one that breaks before its first
              event: this turn goes over HTTP, whole, and so do the session's turns with this tier for
              `upstream_ws_fallback` s; one that breaks after its first event is the tier's failure (an
              `UpstreamError`, escalated as any other) and also sends the session to HTTP a while
  HTTP        side calls (router/sessions/identity.py: they would move the socket's chain away from the
              conversation's), a second turn of a session while its socket is in a turn (a concurrent
              stream, a hedge), and turns when no socket may be opened (the process's budget)

Bounds: an event over `upstream_max_body_bytes` (the library's `max_size`; the socket is closed), the
answer's text and arguments within `upstream_max_answer_chars`, the upgrade within the tier's
`timeouts.connect`, the first event and each next one within its `first_token`, the whole within
`total` and the call's deadline. A turn left mid-answer (the client went, a hedge lost) closes its
socket: what is still on its way would be read as the next turn's. The library's frame log, which
would print the upgrade's headers, the key among them, is never on; errors name the tier only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import aclosing
from dataclasses import replace
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from router.errors import ContextExceeded, UpstreamError, UpstreamStatus, UpstreamTimeout, upstream_text
from router.policy.model import Tier
from router.sessions import Session
from router.sessions.sockets import Seat, Seats
from router.upstream.base import Chunk, Limits, Native
from router.upstream.context import exceeded
from router.upstream.http import answer_chars
from router.upstream.responses_view import ResponsesEvents

log = logging.getLogger("router.upstream")
_WIRE = logging.getLogger("router.upstream.ws.wire")
_WIRE.setLevel(logging.INFO)  # never DEBUG: the library writes the upgrade request's headers there

LIMIT_REACHED = "websocket_connection_limit_reached"
NOT_FOUND = "previous_response_not_found"
_ENDED = ("response.completed", "response.incomplete")
_TOO_BIG = 1009  # the close code of a message over `max_size`


def socket_url(api_base: str) -> str:
    """{api_base}/responses as a WebSocket URL: http → ws, https → wss."""
    scheme, rest = api_base.rstrip("/").split("://", 1)
    return ("wss" if scheme == "https" else "ws") + "://" + rest + "/responses"


class ResponsesSocket:
    """One upstream WebSocket in Responses WebSocket mode."""

    def __init__(self, conn: ClientConnection) -> None:
        self.conn = conn

    @classmethod
    async def open(cls, url: str, headers: Mapping[str, str], within: float, max_size: int) -> ResponsesSocket:
        """Connect and upgrade within `within` seconds; messages over `max_size` bytes close it."""
        conn = await connect(
            url, additional_headers=dict(headers), open_timeout=within, max_size=max_size, proxy=None,
            close_timeout=2, logger=_WIRE,
        )  # fmt: skip
        return cls(conn)

    async def send(self, message: bytes) -> None:
        await self.conn.send(message, text=True)

    async def recv(self) -> bytes:
        data = await self.conn.recv(decode=False)
        return data if isinstance(data, bytes) else data.encode()

    async def close(self) -> None:
        await self.conn.close()


class _Unusable(Exception):
    """The socket cannot serve this turn: HTTP instead (`mark`: and for the session's next turns a while)."""

    def __init__(self, mark: bool) -> None:
        super().__init__()
        self.mark = mark


Request = Callable[[dict[str, Any]], dict[str, Any]]  # a Responses body as the tier sends it (its defaults, ...)
Stream = Callable[[], AsyncIterator[Chunk]]


class SocketTurns:
    """A tier's Responses turns over one WebSocket per session (`OpenAICompatUpstream` with `websocket`)."""

    def __init__(
        self, tier: str, config: Tier, limits: Limits, headers: Mapping[str, str], secrets: tuple[str, ...],
        request: Request,
    ) -> None:  # fmt: skip
        self.tier = tier
        self.config = config
        self.limits = limits
        self.urls = [socket_url(base) for base in config.api_bases]
        self.headers = dict(headers)  # the upgrade's: the tier's key
        self.secrets = secrets
        self.request = request
        self.seats: Seats[ResponsesSocket] = Seats(limits.sockets)

    def serves(self, session: Session | None) -> bool:
        return session is not None and not session.side

    async def stream(
        self, native: Native, deadline: float, session: Session, replica: int, view: ResponsesEvents, http: Stream
    ) -> AsyncIterator[Chunk]:
        """The turn over the session's socket, else (busy, on HTTP a while, failed before its first
        event) `http()`'s stream, whole."""
        seat = self.seats.take(session.id)
        fallback = seat is None
        if seat is not None:
            try:
                async with aclosing(self._turn(seat, native, deadline, replica, view)) as chunks:
                    async for chunk in chunks:  # closed here if the caller leaves: the socket first, then the seat
                        yield chunk
            except _Unusable as exc:
                if exc.mark:
                    self.seats.failed(seat)
                fallback = True
            finally:
                self.seats.release(seat)
        if fallback:
            events = http()
            try:
                async for chunk in events:
                    yield chunk
            finally:
                await events.aclose()  # type: ignore[attr-defined]

    async def prewarm(
        self,
        native: Native,
        deadline: float,
        session: Session,
        replica: int,
        view: ResponsesEvents,
        generate: bool = True,
    ) -> str | None:
        """Open the session's socket (a warm-up: even a small tool-less one belongs to the conversation)
        and, with `generate`, send the request with `generate: false`: the upstream takes its input (the
        next turn sends only what it adds) and generates nothing. Its id, or None."""
        seat = self.seats.take(session.id)
        if seat is None:
            return None
        warm = replace(native, body={**native.body, "generate": False})
        try:
            if not generate:
                if seat.socket is None or self.seats.stale(seat):
                    self.seats.close(seat)
                    await self._open(seat, replica, deadline)
                return None
            async with aclosing(self._turn(seat, warm, deadline, replica, view)) as chunks:
                async for _ in chunks:
                    pass
            return seat.last
        except _Unusable as exc:
            if exc.mark:
                self.seats.failed(seat)
        except UpstreamError as exc:
            log.info("tier %s: a warm-up on its WebSocket failed (%s)", self.tier, exc.message)
        finally:
            self.seats.release(seat)
        return None

    async def _turn(
        self, seat: Seat[ResponsesSocket], native: Native, deadline: float, replica: int, view: ResponsesEvents
    ) -> AsyncGenerator[Chunk, None]:
        loop = asyncio.get_running_loop()
        end = min(loop.time() + self.config.timeouts.total, deadline)
        again = False  # the turn was sent a second time (reopened, or whole): never a third
        while True:
            reused = seat.socket is not None and not self.seats.stale(seat)
            if not reused:
                self.seats.close(seat)  # a stale one: reopened before the upstream ends it
                await self._open(seat, replica, end)
            socket = seat.socket
            assert socket is not None
            continued = seat.last is not None and native.previous == (self.tier, seat.last)
            try:
                async with asyncio.timeout(self._left(end)):
                    await socket.send(self._message(native, seat.last if continued else None))
                first = await self._recv(socket, end)
            except ConnectionClosed as exc:
                self.seats.close(seat)
                if reused and not again and not _too_big(exc):  # closed while it was kept: once more
                    again = True
                    continue
                raise self._broken(exc, before=True) from None
            except (TimeoutError, OSError) as exc:
                self.seats.close(seat)  # its answer may still come: not on a socket another turn reads
                raise self._broken(exc, before=True) from None
            except BaseException:  # no time left, the caller went: the answer is not read here
                self.seats.close(seat)
                raise
            error = _error_of(first)
            if error is not None and not again:
                code = error.get("code")
                if code == LIMIT_REACHED:  # the upstream's time limit: a new socket, the turn whole
                    self.seats.close(seat)
                    again = True
                    continue
                if code == NOT_FOUND and continued:  # the upstream no longer holds its last response
                    seat.last = None
                    again = True
                    continue
            if error is not None:
                seat.last = None
                raise self._refused(error)
            break
        async with aclosing(self._answer(seat, socket, first, end, view)) as chunks:
            async for chunk in chunks:
                yield chunk

    async def _answer(
        self, seat: Seat[ResponsesSocket], socket: ResponsesSocket, first: bytes, end: float, view: ResponsesEvents
    ) -> AsyncGenerator[Chunk, None]:
        """The answer's events, from `first` up to its end. Left before that (the consumer went, the
        tier failed mid-answer), the socket is closed."""
        clean = False
        chars, limit = 0, self.limits.max_answer_chars
        raw = first
        try:
            while True:
                try:
                    chunk = view.chunk(raw)
                except UpstreamError:
                    seat.last = None
                    clean = True  # an error event or `response.failed` ends the response: the socket is fine
                    raise
                except Exception as exc:
                    raise UpstreamError(f"tier {self.tier!r} sent a malformed event ({type(exc).__name__})",
                                        tier=self.tier) from None  # fmt: skip
                chars += answer_chars(chunk.data)
                if chars > limit:
                    self.limits.tripped("upstream_answer")
                    raise UpstreamError(f"tier {self.tier!r} sent a stream over the limit of {limit}", tier=self.tier)
                if chunk.native is not None and chunk.native.get("type") in _ENDED:
                    seat.last, clean = view.id or None, True
                    yield chunk
                    return
                yield chunk
                try:
                    raw = await self._recv(socket, end)
                except ConnectionClosed as exc:
                    self.seats.failed(seat)
                    raise self._broken(exc, before=False) from None
                except (TimeoutError, OSError) as exc:
                    raise self._broken(exc, before=False) from None
        finally:
            if not clean:
                self.seats.close(seat)

    async def _open(self, seat: Seat[ResponsesSocket], replica: int, end: float) -> None:
        if not self.seats.budget.admit(seat):
            raise _Unusable(mark=False)
        try:
            socket = await ResponsesSocket.open(
                self.urls[replica], self.headers, self._left(end, self.config.timeouts.connect),
                self.limits.max_body_bytes,
            )  # fmt: skip
        except (WebSocketException, OSError, TimeoutError) as exc:
            self.seats.close(seat)
            why = f"HTTP {exc.response.status_code}" if isinstance(exc, InvalidStatus) else type(exc).__name__
            log.warning("tier %s: no WebSocket (%s): this session's turns go over HTTP for %.0f s",
                        self.tier, why, self.seats.budget.fallback)  # fmt: skip
            raise _Unusable(mark=True) from None
        self.seats.opened(seat, socket)

    def _message(self, native: Native, previous: str | None) -> bytes:
        body = native.body
        if previous is not None:
            items = body.get("input")
            own = items[native.chain_items :] if isinstance(items, list) else items
            body = {**body, "input": own, "previous_response_id": previous}
        out = self.request(body)
        out.pop("stream", None)  # implicit on a socket
        out.pop("stream_options", None)
        return orjson.dumps({"type": "response.create", **out})

    def _left(self, end: float, bound: float | None = None) -> float:
        left = end - asyncio.get_running_loop().time()
        if left <= 0:
            raise UpstreamTimeout(f"tier {self.tier!r}: no time left before the call's deadline", tier=self.tier)
        return min(left, bound) if bound is not None else left

    async def _recv(self, socket: ResponsesSocket, end: float) -> bytes:
        async with asyncio.timeout(self._left(end, self.config.timeouts.first_token)):
            return await socket.recv()

    def _broken(self, exc: BaseException, *, before: bool) -> Exception:
        """What a failed socket raises: `_Unusable` before the answer's first event (HTTP takes the
        turn), the tier's `UpstreamError` after it."""
        if isinstance(exc, UpstreamError):
            return exc
        if isinstance(exc, ConnectionClosed) and _too_big(exc):
            self.limits.tripped("upstream_body")
            return UpstreamError(f"tier {self.tier!r} sent an event over the limit of {self.limits.max_body_bytes}",
                                 tier=self.tier)  # fmt: skip
        if isinstance(exc, TimeoutError):
            return UpstreamTimeout(f"tier {self.tier!r} timed out", tier=self.tier)
        if before:
            return _Unusable(mark=True)
        return UpstreamError(f"tier {self.tier!r} closed its WebSocket mid-answer", tier=self.tier)

    def _refused(self, error: Mapping[str, Any]) -> UpstreamError:
        """An `error` event before any answer, as the HTTP status it stands for would be."""
        status = error.get("status")
        message = upstream_text(str(error.get("message") or ""), self.secrets)
        if status in (400, None) and (too_long := exceeded(error)) is not None:
            return ContextExceeded(tier=self.tier, prompt_tokens=too_long[0], window=too_long[1])
        if isinstance(status, int) and 400 <= status < 600:
            return UpstreamStatus(f"tier {self.tier!r} answered {status}: {message}", tier=self.tier,
                                  upstream_status=status)  # fmt: skip
        return UpstreamError(f"tier {self.tier!r} sent an error event: {message}", tier=self.tier)


def _too_big(exc: ConnectionClosed) -> bool:
    return exc.sent is not None and exc.sent.code == _TOO_BIG


def _error_of(raw: bytes) -> dict[str, Any] | None:
    """The error an `error` event (or `response.failed`) carries, with its `status` when it has one."""
    if b"error" not in raw:
        return None
    try:
        event = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(event, dict) or event.get("type") not in ("error", "response.failed"):
        return None
    response = event.get("response")
    error = event.get("error") or (response.get("error") if isinstance(response, dict) else None) or event
    if not isinstance(error, dict):
        return None
    status = event.get("status", event.get("status_code"))
    return {**error, "status": status} if isinstance(status, int) else dict(error)

"""Upstream WebSockets per session: the socket a session's turns take on a tier with `websocket: true`
(router/upstream/responses_ws.py), what that socket's connection holds, and the process's bound on them.

    Budget        the process's sockets, all tiers: at most `upstream_ws_max_sockets` open (a new one
                  past it closes the least recently used idle one; none idle: the call goes over HTTP),
                  each closed after `upstream_ws_idle_timeout` s without a turn and reopened once it is
                  `upstream_ws_max_age` s old; a session whose socket failed stays on HTTP with that
                  tier for `upstream_ws_fallback` s
    Seats[T]      one tier's seats: session id → Seat, taken by one turn at a time (`take` / `release`)

What a seat keeps for its session and tier: the socket, and `last` — the upstream's own id of the
most recent response on that socket, which the upstream's connection-local cache holds, so that the
next turn may send only its new input after it (`previous_response_id`). The router's response ids
are never the upstream's: a turn continues from `last` only when the router's previous response was
that very upstream response (`Stored.upstream`, router/responses/turn.py). A socket lives in one
process: nothing of it is in the store.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from router.settings import default


class Closable(Protocol):
    async def close(self) -> None: ...


S = TypeVar("S", bound=Closable)
_MAX_SEATS_PER_SOCKET = 4  # seats kept per socket the budget allows (sessions on HTTP a while hold a seat too)


@dataclass(eq=False)
class Seat(Generic[S]):
    session: str
    socket: S | None = None
    opened: float = 0.0  # loop time its socket opened
    last: str | None = None  # the upstream's id of the last response completed on the socket
    http_until: float = 0.0  # loop time until which the session's turns go over HTTP (its socket failed)
    busy: bool = False  # a turn holds it
    timer: asyncio.TimerHandle | None = None  # the idle close, while nobody holds it


class Budget:
    """The process's upstream sockets, all tiers together (one instance per `Runtime`, in `Limits`)."""

    def __init__(
        self,
        max_sockets: int = default("upstream_ws_max_sockets"),
        idle: float = default("upstream_ws_idle_timeout"),
        max_age: float = default("upstream_ws_max_age"),
        fallback: float = default("upstream_ws_fallback"),
    ) -> None:
        self.max_sockets = max_sockets
        self.idle = idle
        self.max_age = max_age
        self.fallback = fallback
        self._open: OrderedDict[Seat[Any], None] = OrderedDict()  # seats with a socket, idlest first
        self._closing: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._open)

    def admit(self, seat: Seat[Any]) -> bool:
        """Room for `seat`'s new socket: another seat's idle socket is closed if the bound is reached.
        False: every socket is in a turn (the call goes over HTTP)."""
        if seat in self._open:
            return True
        if len(self._open) >= self.max_sockets:
            victim = next((s for s in self._open if not s.busy), None)
            if victim is None:
                return False
            self.drop(victim)
        self._open[seat] = None
        return True

    def used(self, seat: Seat[Any]) -> None:
        if seat in self._open:
            self._open.move_to_end(seat)

    def drop(self, seat: Seat[Any]) -> None:
        """Close `seat`'s socket (in the background) and forget it here."""
        self._open.pop(seat, None)
        if seat.timer is not None:
            seat.timer.cancel()
            seat.timer = None
        socket, seat.socket, seat.last = seat.socket, None, None
        if socket is not None:
            task = asyncio.get_running_loop().create_task(_quietly_closed(socket))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def settled(self) -> None:
        """Wait for the sockets being closed."""
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)


async def _quietly_closed(socket: Closable) -> None:
    with contextlib.suppress(Exception):
        await socket.close()


class Seats(Generic[S]):
    """A tier's seats, one per session (bounded: the least recently used free ones go first)."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self._seats: OrderedDict[str, Seat[S]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._seats)

    def take(self, session: str) -> Seat[S] | None:
        """The session's seat, held by the caller until `release`; None when a turn of the session
        holds it already, or the session is on HTTP a while (its socket failed), or no socket may be
        open at all."""
        if self.budget.max_sockets <= 0:
            return None
        seat = self._seats.get(session)
        now = asyncio.get_running_loop().time()
        if seat is None:
            seat = self._seats[session] = Seat(session)
            self._bound()
        else:
            self._seats.move_to_end(session)
        if seat.busy or now < seat.http_until:
            return None
        seat.busy = True
        if seat.timer is not None:
            seat.timer.cancel()
            seat.timer = None
        return seat

    def stale(self, seat: Seat[S]) -> bool:
        """Its socket is old enough to be reopened before the upstream ends it (OpenAI: 60 min)."""
        return seat.socket is not None and asyncio.get_running_loop().time() - seat.opened >= self.budget.max_age

    def opened(self, seat: Seat[S], socket: S) -> None:
        seat.socket, seat.opened, seat.last = socket, asyncio.get_running_loop().time(), None

    def close(self, seat: Seat[S]) -> None:
        """Close the seat's socket (a turn left it mid-answer, it broke, or it is reopened)."""
        self.budget.drop(seat)

    def failed(self, seat: Seat[S]) -> None:
        """Its socket failed: closed, and the session's turns go over HTTP for `fallback` seconds."""
        self.budget.drop(seat)
        seat.http_until = asyncio.get_running_loop().time() + self.budget.fallback

    def release(self, seat: Seat[S]) -> None:
        """The turn is over: the socket is kept for the session's next turn, until idle too long."""
        seat.busy = False
        if seat.socket is None:
            return
        self.budget.used(seat)
        seat.timer = asyncio.get_running_loop().call_later(self.budget.idle, self._idle, seat)

    def _idle(self, seat: Seat[S]) -> None:
        seat.timer = None
        if not seat.busy and seat.socket is not None:
            self.budget.drop(seat)

    def _bound(self) -> None:
        limit = max(64, self.budget.max_sockets * _MAX_SEATS_PER_SOCKET)
        if len(self._seats) <= limit:
            return
        for session, seat in list(self._seats.items()):
            if len(self._seats) <= limit:
                break
            if not seat.busy:
                self.budget.drop(seat)
                del self._seats[session]

    async def close_all(self) -> None:
        """Close every socket (the tier is closed: shutdown, or a policy change retired it)."""
        for seat in self._seats.values():
            self.budget.drop(seat)
        self._seats.clear()
        await self.budget.settled()

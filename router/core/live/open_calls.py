"""Calls and streams in progress, so that they can be ended on purpose and end cleanly.

    ClientGone     the client closed its connection while its call ran (its connection's
                   `ConnectionCalls`, told by the server's protocol, router/connections.py; or
                   router/api/__init__.py's watch once the body is in): the call's task is cancelled
                   at once, which cancels its upstream call; nothing is sent
    ShuttingDown   SIGTERM: calls and streams still open at 80% of `shutdown_grace` are ended — a
                   call not yet answered gets a 503 in its API's shape, a stream an `error` event or
                   frame and its terminator (the transports' own ending for errors); whoever keeps
                   a connection open between calls (WebSocket mode) is told at once (`on_drain`)

The task is cancelled with its reason recorded here; whoever catches the `CancelledError` asks
`ended()` for the reason (which also un-cancels the task) and ends the call in its API's shape.
A cancellation without a recorded reason is someone else's and is re-raised untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from typing import TypeVar

from router.constants import CUT_AT
from router.errors import ClientGone, RouterError, ShuttingDown
from router.metrics import Metrics

log = logging.getLogger("router.api")

T = TypeVar("T")


class OpenCalls:
    def __init__(self, metrics: Metrics, grace: float) -> None:
        self.metrics = metrics
        self.grace = grace
        self.tasks: set[asyncio.Task[object]] = set()  # tasks of calls and streams in progress
        self.draining = False
        self._ending: dict[asyncio.Task[object], RouterError] = {}
        self._on_drain: set[Callable[[], None]] = set()

    @contextlib.contextmanager
    def running(self) -> Iterator[asyncio.Task[object]]:
        """The current task runs a call (or writes a stream) until the block ends."""
        task: asyncio.Task[object] | None = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        try:
            yield task
        finally:
            self.tasks.discard(task)

    async def stream(self, items: AsyncIterator[T]) -> AsyncIterator[T]:
        """`items`, as an open stream: when it is ended on purpose, its reason is raised from here (a
        RouterError, which the transports frame as an error in their API's shape). Closing it closes
        `items` at once (the upstream call with it), not when the garbage collector frees it: a frame
        in a failure's traceback (a write to a client that has gone) may hold `items` for minutes."""
        with self.running():
            try:
                async for item in items:
                    yield item
            except asyncio.CancelledError:
                if (reason := self.ended()) is None:
                    raise
                raise reason from None
            finally:
                if isinstance(items, AsyncGenerator):
                    await items.aclose()

    def end(self, task: asyncio.Task[object], reason: RouterError, limit: str) -> None:
        """Cancel `task` for `reason`; `limit` is counted in router_limits_tripped."""
        if task.done() or task in self._ending:
            return
        self._ending[task] = reason
        self.metrics.tripped(limit)
        task.cancel()

    def ended(self) -> RouterError | None:
        """Why the current task was cancelled, if it was ended here (the task is then un-cancelled)."""
        task = asyncio.current_task()
        reason = self._ending.pop(task, None) if task is not None else None
        if reason is not None and task is not None:
            task.uncancel()
        return reason

    def on_drain(self, hook: Callable[[], None]) -> Callable[[], None]:
        """`hook()` when the server starts draining (soon, if it has); returns what forgets it. A
        WebSocket-mode connection closes then, at once when it is idle (router/api/responses_ws.py)."""
        if self.draining:
            asyncio.get_running_loop().call_soon(hook)
        else:
            self._on_drain.add(hook)
        return lambda: self._on_drain.discard(hook)

    def drain(self) -> None:
        """The server stops accepting calls: end those still open at `CUT_AT` of the grace."""
        if self.draining:
            return
        self.draining = True
        asyncio.get_running_loop().call_later(self.grace * CUT_AT, self._cut)
        hooks, self._on_drain = self._on_drain, set()
        for hook in hooks:
            hook()

    def _cut(self) -> None:
        if self.tasks:
            log.warning("shutting down: ending %d call(s) and stream(s) still open", len(self.tasks))
        for task in list(self.tasks):
            self.end(task, ShuttingDown("The router is shutting down; retry on another instance."), "shutdown_cut")


class ConnectionCalls:
    """The calls in progress on one client connection (`add`ed once admitted, `discard`ed when they
    end), each ended as ClientGone when the connection is `lost`: the router's server protocol
    (router/connections.py) tells it, in the request's scope under `KEY`, so that a call needs no
    task of its own watching for its client to leave."""

    KEY = "router.connection_calls"
    __slots__ = ("calls", "closed")

    def __init__(self) -> None:
        self.calls: dict[asyncio.Task[object], OpenCalls] = {}
        self.closed = False

    def add(self, task: asyncio.Task[object], calls: OpenCalls) -> None:
        if self.closed:
            calls.end(task, _gone(), "client_gone")
        else:
            self.calls[task] = calls

    def discard(self, task: asyncio.Task[object]) -> None:
        self.calls.pop(task, None)

    def lost(self) -> None:
        self.closed = True
        running, self.calls = self.calls, {}
        for task, calls in running.items():
            calls.end(task, _gone(), "client_gone")


def _gone() -> ClientGone:
    return ClientGone("The client closed the connection.")

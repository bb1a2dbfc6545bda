"""Coalesced writes: what arrives within `delay` of a first write, or while a write is in flight,
goes out together in one round trip (at most `max_items`), so the cost per call shrinks as the
rate grows; a lone write waits `delay` at most. `put()` returns once its item is written.

The caller whose write found no batch open leads: it waits `delay`, writes what gathered, then
what queued meanwhile, until the queue is empty; if it stops early (cancelled), the waiters it
leaves try again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")

__all__ = ["Coalescer"]


class Coalescer(Generic[T]):
    def __init__(self, write: Callable[[list[T]], Awaitable[None]], delay: float = 0.0, max_items: int = 256) -> None:
        self._write = write
        self._delay = delay
        self._max = max_items
        self._queue: list[tuple[T, asyncio.Future[bool]]] = []
        self._leading = False
        self.writes = 0  # round trips made
        self.items = 0  # items they carried

    async def put(self, item: T) -> None:
        while self._leading:
            waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            self._queue.append((item, waiter))
            if await waiter:  # written by the leader
                return
            # the leader stopped (cancelled, or its write raised): lead, or queue behind whoever does
        await self._lead(item)

    async def _lead(self, item: T) -> None:
        self._leading = True
        batch, waiters = [item], []
        try:
            if self._delay > 0:
                await asyncio.sleep(self._delay)
                taken, self._queue = self._queue[: self._max - 1], self._queue[self._max - 1 :]
                batch += [queued for queued, _ in taken]
                waiters = [waiter for _, waiter in taken]
            while True:
                await self._write(batch)
                self.writes += 1
                self.items += len(batch)
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(True)
                if not self._queue:
                    return
                taken, self._queue = self._queue[: self._max], self._queue[self._max :]
                batch = [item for item, _ in taken]
                waiters = [waiter for _, waiter in taken]
        finally:
            self._leading = False
            for waiter in [*waiters, *(w for _, w in self._queue)]:
                if not waiter.done():
                    waiter.set_result(False)  # not known to be written: its caller tries again
            self._queue = []

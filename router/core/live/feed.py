"""The live feed of finished calls: what the console's live tail is pushed (router/console/).

    feed.publish(record)        every routed call, once it is over (`Runtime.finished`); never blocks
    async with feed.watch() as calls:   one viewer: its calls as they come (`async for record in calls`)

Every viewer has its own queue of at most `VIEWER_QUEUE` calls; a viewer that falls that far behind
is dropped (its iteration ends; the console reconnects and reads the store to catch up), never
buffered without bound and never in a call's way. At most `MAX_VIEWERS` watch at once (one proxy's
console is for its operators). Other replicas' calls reach it from a Redis store's live channel
(`Store.calls_watch`, relayed by `Runtime`), so a console on any replica shows every replica's calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

log = logging.getLogger("router.feed")
VIEWER_QUEUE = 256
MAX_VIEWERS = 32
_GONE: Any = object()


class TooManyViewers(Exception):
    pass


class Viewer:
    """One viewer's calls; `dropped` once it fell behind."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue(VIEWER_QUEUE)
        self.dropped = False

    def __aiter__(self) -> Viewer:
        return self

    async def __anext__(self) -> dict[str, Any]:
        item = await self.queue.get()
        if item is _GONE:
            raise StopAsyncIteration
        return item  # type: ignore[no-any-return]


class Feed:
    def __init__(self) -> None:
        self._viewers: set[Viewer] = set()
        self.published = 0
        self.dropped = 0  # viewers dropped for falling behind

    @property
    def viewers(self) -> int:
        return len(self._viewers)

    def publish(self, record: dict[str, Any]) -> None:
        self.published += 1
        for viewer in list(self._viewers):
            try:
                viewer.queue.put_nowait(record)
            except asyncio.QueueFull:
                self._drop(viewer)

    def _drop(self, viewer: Viewer) -> None:
        self._viewers.discard(viewer)
        viewer.dropped = True
        self.dropped += 1
        while True:  # make room for the end, which ends its iteration
            try:
                viewer.queue.get_nowait()
            except asyncio.QueueEmpty:
                break
        viewer.queue.put_nowait(_GONE)
        log.info("a console viewer fell %d calls behind and was dropped", VIEWER_QUEUE)

    @contextlib.asynccontextmanager
    async def watch(self) -> AsyncIterator[Viewer]:
        if len(self._viewers) >= MAX_VIEWERS:
            raise TooManyViewers(f"{MAX_VIEWERS} viewers already watch this proxy's calls")
        viewer = Viewer()
        self._viewers.add(viewer)
        try:
            yield viewer
        finally:
            self._viewers.discard(viewer)

    def close(self) -> None:
        """Every viewer's iteration ends (shutdown)."""
        for viewer in list(self._viewers):
            self._drop(viewer)

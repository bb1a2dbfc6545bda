"""Buffered counter writing shared by the SQLite and Redis stores.

`record()` only adds to a bounded local buffer. Increments for the same (bucket, tier, route,
tool, kind) add up in place, so the buffer grows with the number of distinct keys, not events: a
burst of 100k events usually occupies a few dozen entries. When `max_pending` distinct keys are
held, events for new keys are dropped and counted (`dropped`, in events).

A background task seals the buffer into batches and writes them. A sealed batch never changes:
it is written, or retried *identically* (same id, same counts) until a write succeeds, and only
then released — so a backend may use the id to make a retried write idempotent. New events keep
aggregating in `pending` meanwhile, so an outage costs one entry per distinct key, not per event.
Flushes run as their own tasks: a cancelled caller never abandons a write half-way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from router.constants import BATCH_KEYS, HOUSEKEEP_SECONDS
from router.store.base import BucketKey, Event, bucket_key, store_info
from router.store.options import StoreOptions

log = logging.getLogger("router.store")


class Batch:
    __slots__ = ("counts", "events", "id")

    def __init__(self, counts: dict[BucketKey, int]) -> None:
        self.id = uuid.uuid4().hex
        self.counts = counts
        self.events = sum(counts.values())


class CounterBuffer:
    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("buffer limit must be >= 1")
        self.limit = limit
        self.dropped = 0  # events lost to overflow or unusable, ever
        self.pending: dict[BucketKey, int] = {}
        self.pending_events = 0
        self.sealed: list[Batch] = []  # taken for writing, not yet confirmed written
        self._sealed_keys = 0

    @property
    def keys(self) -> int:
        return len(self.pending) + self._sealed_keys

    @property
    def events(self) -> int:
        """Events recorded and not yet confirmed written."""
        return self.pending_events + sum(b.events for b in self.sealed)

    def add(self, events: Sequence[Event]) -> None:
        pending = self.pending
        for ev in events:
            try:
                key = bucket_key(ev)
            except Exception:  # not an Event of strings: count it, never raise into a request
                self.dropped += 1
                continue
            n = pending.get(key)
            if n is not None:
                pending[key] = n + ev.n
            elif len(pending) + self._sealed_keys < self.limit:
                pending[key] = ev.n
            else:
                self.dropped += 1
                continue
            self.pending_events += 1

    def seal(self, chunk: int = BATCH_KEYS) -> list[Batch]:
        """Move `pending` into new sealed batches of at most `chunk` keys and return them."""
        items = list(self.pending.items())
        new = [Batch(dict(items[i : i + chunk])) for i in range(0, len(items), chunk)]
        self.sealed.extend(new)
        self._sealed_keys += len(items)
        self.pending, self.pending_events = {}, 0
        return new

    def done(self, batch: Batch) -> None:
        """`batch` is written: release it."""
        if batch in self.sealed:
            self.sealed.remove(batch)
            self._sealed_keys -= len(batch.counts)


class BufferedStore(ABC):
    """record/flush/close/start and health bookkeeping; subclasses write batches and sessions."""

    backend = "buffered"

    def __init__(self, options: StoreOptions | None = None) -> None:
        self.options = options or StoreOptions()
        self._buf = CounterBuffer(self.options.max_pending)
        self._healthy = True
        self.unusable: str | None = None  # why it could not be opened, until it has been (Store.unusable)
        self._error = ""  # the last failure, while unhealthy (stats' "store": {"error"})
        self._since = 0.0  # unix time it became unhealthy (stats' "store": {"since"})
        self._retry_at = 0.0  # while unhealthy, session calls give up at once until this time
        self._closing = False
        self._flusher: asyncio.Task[None] | None = None
        self._flushes: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._housekept = time.monotonic()

    # -- what subclasses provide -------------------------------------------------------------

    async def _open(self) -> None:
        """Connect / create the schema (may fail: the store then starts unhealthy)."""
        return None

    @abstractmethod
    async def _write(self, batch: Batch) -> None:
        """Apply the batch atomically, or raise. Retried with the same batch after a failure."""

    async def _probe(self) -> None:
        """Raise when the backend is still unreachable."""
        return None

    async def _housekeep(self) -> None:
        """Periodic clean-up (expired rows, old buckets)."""
        return None

    async def _release(self) -> None:
        """Free connections and threads."""
        return None

    def _describe(self, exc: BaseException) -> str:
        return f"{type(exc).__name__}: {exc}"

    # -- public surface ------------------------------------------------------------------------

    @property
    def dropped(self) -> int:
        return self._buf.dropped

    @property
    def pending(self) -> int:
        return self._buf.events

    @property
    def healthy(self) -> bool:
        return self._healthy

    def store_info(self) -> dict[str, Any]:
        info = store_info(self.backend, pending=self.pending, dropped=self.dropped, healthy=self._healthy)
        info.update(buffer_keys=self._buf.keys, buffer_limit=self._buf.limit)
        if not self._healthy:
            info.update(since=round(self._since, 3), error=self._error)
        return info

    def health(self) -> dict[str, Any]:
        """What /readyz and /healthz say of the store while it is degraded: since when, why, what waits."""
        return {"backend": self.backend, "healthy": False, "since": round(self._since, 3), "error": self._error,
                "pending": self.pending, "dropped": self.dropped}  # fmt: skip

    def record(self, events: Sequence[Event]) -> None:
        try:
            self._buf.add(events)
            if self._buf.pending_events >= self.options.flush_events and self._healthy:
                self._wake.set()  # not while down: the flusher tries again on its own time, never in a spin
        except Exception:  # never raise into the request path
            log.debug("store.record failed", exc_info=True)

    async def start(self) -> None:
        try:
            await self._open()
        except Exception as exc:
            self._mark_down(exc, "open")
            self.unusable = self._error
        if self._flusher is None and not self._closing:
            self._flusher = asyncio.create_task(self._flush_loop(), name=f"agent-router {self.backend} flush")

    async def flush(self) -> None:
        await asyncio.shield(self._spawn_flush())

    async def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._wake.set()
        if self._flusher is not None:
            await self._flusher
        await self.flush()
        if self._flushes:
            await asyncio.gather(*self._flushes, return_exceptions=True)
        if self._buf.events:
            log.warning("%s store closed with %d events not written", self.backend, self._buf.events)
        await self._release()

    # -- machinery -------------------------------------------------------------------------

    def _session_ok(self) -> bool:
        """False while the backend is known down and not yet due for another try."""
        return self._healthy or time.monotonic() >= self._retry_at

    def _mark_down(self, exc: BaseException, what: str) -> None:
        self._retry_at = time.monotonic() + min(1.0, 2 * self.options.flush_interval)
        self._error = f"{what} failed: {self._describe(exc)}"
        if self._healthy:
            self._healthy = False
            self._since = time.time()
            log.warning(
                "%s store unavailable (%s: %s); serving on, buffering counters (%d pending)",
                self.backend,
                what,
                self._describe(exc),
                self._buf.events,
            )

    def _mark_up(self) -> None:
        self.unusable = None
        if not self._healthy:
            self._healthy = True
            log.warning("%s store reachable again after %.1f s (%d events to write)", self.backend,
                        time.time() - self._since, self._buf.events)  # fmt: skip

    def _spawn_flush(self) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(self._flush_now())
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)
        return task

    async def _flush_now(self) -> None:
        async with self._lock:
            # Old sealed batches go first, unchanged; only then is `pending` sealed anew.
            for batches in (list(self._buf.sealed), None):
                for batch in self._buf.seal() if batches is None else batches:
                    try:
                        await self._write(batch)
                    except Exception as exc:
                        raise_if_cancelled()
                        self._mark_down(exc, "write")
                        return
                    self._buf.done(batch)
            if not self._healthy:
                try:
                    await self._probe()
                except Exception as exc:
                    self._mark_down(exc, "probe")
                    return
            self._mark_up()

    async def _flush_loop(self) -> None:
        while not self._closing:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.options.flush_interval)
            self._wake.clear()
            if self._closing:
                return
            try:
                await asyncio.shield(self._spawn_flush())
            except Exception:  # a bug must not stop the flusher for good
                log.exception("%s store flush failed", self.backend)
            if time.monotonic() - self._housekept >= HOUSEKEEP_SECONDS and self._healthy:
                self._housekept = time.monotonic()
                try:
                    await self._housekeep()
                except Exception as exc:
                    log.warning("%s store clean-up failed: %s", self.backend, self._describe(exc))


def raise_if_cancelled() -> None:
    """A cancellation of the running task that came as a failure (a timeout: redis-py's, or
    asyncio.timeout's while both fired) is raised as what it is, so a loop that catches failures
    still ends when cancelled (a shutdown waits for such loops)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError

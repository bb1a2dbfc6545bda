"""In-process store (`memory://`): for tests and single-process runs that need no history.

Counters live in per-bucket dicts (pruned after `retention`) plus all-time totals, so windowed
stats read only the buckets of the window. Sessions are an LRU of at most `max_sessions`
entries, each expiring `session_ttl` seconds after its last write (`Sessions`, shared with the
SQLite store).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from router.constants import BUCKET_SECONDS
from router.store import calls, responses
from router.store.base import (
    CounterKey,
    Event,
    RoutedCall,
    Sample,
    SeriesRow,
    aggregate,
    bucket_key,
    bucket_of,
    rebucket,
    store_info,
    window_start,
)
from router.store.calls import CallRecord, MemoryCalls
from router.store.options import StoreOptions
from router.store.responses import MemoryTable, Outcome, ResponseChain, ResponseRecord
from router.store.samples import MemorySamples


@dataclass(slots=True)
class _Session:
    expires: float
    sticky_tier: str = ""
    sticky_left: int = 0
    routed: OrderedDict[str, RoutedCall] = field(default_factory=OrderedDict)


class Sessions:
    """Session state in process memory: an LRU of at most `max_sessions` sessions, each expiring
    `session_ttl` seconds after its last write. Answers without awaiting anything, which is why the
    embedded SQLite store keeps its sessions here too; Redis shares them between processes."""

    def __init__(self, options: StoreOptions) -> None:
        self.options = options
        self._sessions: OrderedDict[str, _Session] = OrderedDict()

    def _get(self, session: str) -> _Session | None:
        s = self._sessions.get(session)
        if s is not None and s.expires <= time.monotonic():
            del self._sessions[session]
            return None
        return s

    def _touch(self, session: str) -> _Session:
        now = time.monotonic()
        # Writes move a session to the end with the latest expiry, so expired ones sit in front.
        while self._sessions and next(iter(self._sessions.values())).expires <= now:
            self._sessions.popitem(last=False)
        s = self._get(session)
        if s is None:
            s = self._sessions[session] = _Session(expires=0.0)
            while len(self._sessions) > self.options.max_sessions:
                self._sessions.popitem(last=False)
        self._sessions.move_to_end(session)
        s.expires = now + self.options.session_ttl
        return s

    async def sticky_set(self, session: str, tier: str, calls: int) -> None:
        if calls <= 0:
            s = self._get(session)
            if s is not None:
                s.sticky_tier, s.sticky_left = "", 0
            return
        s = self._touch(session)
        s.sticky_tier, s.sticky_left = tier, calls

    async def sticky_take(self, session: str) -> str | None:
        s = self._get(session)
        if s is None or s.sticky_left <= 0:
            return None
        s.sticky_left -= 1
        return s.sticky_tier

    async def routed_put(self, session: str, calls: Sequence[RoutedCall]) -> None:
        if not calls:
            return
        routed = self._touch(session).routed
        for c in calls:
            routed.pop(c.call_id, None)
            routed[c.call_id] = c
        while len(routed) > self.options.max_routed_per_session:
            routed.popitem(last=False)

    async def routed_get(self, session: str, call_id: str) -> RoutedCall | None:
        s = self._get(session)
        return None if s is None else s.routed.get(call_id)

    async def routed_take(self, session: str, call_id: str) -> RoutedCall | None:
        s = self._get(session)
        return None if s is None else s.routed.pop(call_id, None)


class MemoryStore(Sessions):
    backend = "memory"

    def __init__(self, options: StoreOptions | None = None) -> None:
        super().__init__(options or StoreOptions())
        self._buckets: dict[int, dict[CounterKey, int]] = {}
        self._totals: dict[CounterKey, int] = {}
        self._pruned_at = 0
        self._dropped = 0
        self._samples = MemorySamples(self.options)  # shadow samples
        self._calls = MemoryCalls(self.options)  # the call log
        self._responses = MemoryTable(self.options.responses_max_rows)  # response state

    unusable: str | None = None  # nothing to open
    healthy = True  # nothing to lose

    def health(self) -> dict[str, Any]:
        return store_info(self.backend)

    @property
    def dropped(self) -> int:
        return self._dropped

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def flush(self) -> None:
        return None

    # -- counters ---------------------------------------------------------------------------

    def record(self, events: Sequence[Event]) -> None:
        self._prune()
        oldest, totals, buckets = self._oldest_bucket(), self._totals, self._buckets
        for ev in events:
            try:
                b, tier, route, tool, kind = bucket_key(ev)
            except Exception:  # not an Event of strings: count it, never raise into a request
                self._dropped += 1
                continue
            key: CounterKey = (tier, route, tool, kind)
            totals[key] = totals.get(key, 0) + ev.n
            if b >= oldest:
                counts = buckets.get(b)
                if counts is None:
                    counts = buckets[b] = {}
                counts[key] = counts.get(key, 0) + ev.n

    def _oldest_bucket(self) -> int:
        return bucket_of(time.time() - self.options.retention)

    def _prune(self) -> None:
        now_bucket = bucket_of(time.time())
        if now_bucket == self._pruned_at:
            return
        self._pruned_at = now_bucket
        oldest = self._oldest_bucket()
        for b in [b for b in self._buckets if b < oldest]:
            del self._buckets[b]

    async def stats(self, window_seconds: float | None = None) -> dict[str, Any]:
        if window_seconds is None:
            rows = [(*k, n) for k, n in self._totals.items()]
        else:
            first = window_start(window_seconds)
            rows = [(*k, n) for b, d in self._buckets.items() if b >= first for k, n in d.items()]
        return {**aggregate(rows), "store": store_info(self.backend, dropped=self._dropped)}

    async def series(self, since: float, bucket: int = BUCKET_SECONDS) -> list[SeriesRow]:
        first = bucket_of(since)
        rows = [(b, *k, n) for b, d in self._buckets.items() if b >= first for k, n in d.items()]
        return rebucket(rows, bucket)

    # -- the call log (router/store/calls.py) ---------------------------------------------------

    async def calls_put(self, records: Sequence[CallRecord], origin: str = "") -> None:
        await self._calls.put(records)

    async def calls_get(self, session: str, limit: int) -> list[CallRecord]:
        return await self._calls.get(session, limit)

    def calls_watch(self, origin: str) -> AsyncIterator[CallRecord]:
        return calls.nothing()

    async def call_sessions(self, limit: int) -> list[str]:
        return await self._calls.sessions(limit)

    # -- shadow samples (router/store/samples.py) -----------------------------------------------

    async def samples_put(self, sample: Sample) -> None:
        await self._samples.put(sample)

    async def samples_get(self, route: str, limit: int) -> list[Sample]:
        return await self._samples.get(route, limit)

    async def samples_routes(self) -> list[str]:
        return await self._samples.routes()

    # -- response state (router/store/responses.py) ---------------------------------------------

    async def responses_put(self, records: Sequence[ResponseRecord]) -> list[Outcome]:
        return responses.put_all(self._responses, records, self.options, time.time())

    async def responses_get(self, response_id: str) -> ResponseChain | None:
        return responses.get(self._responses, response_id, self.options, time.time())

"""What the router remembers: counters of answers and mistakes, and per-session state.

Counters are events aggregated into time buckets, keyed (tier, route, tool, kind):

* an answer from a tier is `Event(tier, route)` (tool "", kind ""), plus one
  `Event(tier, route, tool=name)` per tool it called;
* a mistake is `Event(tier, route, tool=name-or-"", kind=<mistake kind>)`.

`record()` never blocks and never raises: implementations queue events and write them off the
request path. Session state (sticky escalation, which tier made which tool call) is small and
read on the request path, so its methods are async and must answer fast or give up.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

BUCKET_SECONDS = 60

CounterKey = tuple[str, str, str, str]  # (tier, route, tool, kind)
BucketKey = tuple[int, str, str, str, str]  # (bucket start, tier, route, tool, kind)
SeriesRow = tuple[float, str, str, str, str, int]  # (bucket start, tier, route, tool, kind, count)
MAX_NAME_CHARS = 200  # tier/route/tool/kind names are cut here: a model can invent any tool name


def bucket_of(ts: float, size: int = BUCKET_SECONDS) -> int:
    """Start (unix seconds) of the `size`-second bucket holding `ts`."""
    return int(ts // size) * size


def window_start(window_seconds: float, now: float | None = None) -> int:
    """First bucket of the last `window_seconds` (the bucket holding `now - window` is included)."""
    return bucket_of((time.time() if now is None else now) - window_seconds)


def bucket_key(ev: Event) -> BucketKey:
    cut = MAX_NAME_CHARS
    return (bucket_of(ev.ts), ev.tier[:cut], ev.route[:cut], ev.tool[:cut], ev.kind[:cut])


def rebucket(rows: Iterable[tuple[int, str, str, str, str, int]], bucket: int) -> list[SeriesRow]:
    """Stored (bucket, tier, route, tool, kind, n) rows → `series()` rows at `bucket` granularity,
    rounded down to a multiple of BUCKET_SECONDS (at least one bucket)."""
    if bucket <= 0:
        raise ValueError(f"series bucket must be > 0 seconds, got {bucket}")
    bucket = max(BUCKET_SECONDS, bucket - bucket % BUCKET_SECONDS)
    out: dict[tuple[int, str, str, str, str], int] = {}
    for b, tier, route, tool, kind, n in rows:
        k = (bucket_of(b, bucket), tier, route, tool, kind)
        out[k] = out.get(k, 0) + n
    return [(float(k[0]), k[1], k[2], k[3], k[4], n) for k, n in sorted(out.items()) if n]


@dataclass(frozen=True, slots=True)
class StoreOptions:
    """Bounds shared by every store; each one is a memory (or disk) ceiling, not a tuning knob."""

    session_ttl: float = 24 * 3600.0  # sticky / routed state of a session expires after this idle time
    max_routed_per_session: int = 256  # most recent routed tool calls remembered per session
    retention: float = 8 * 24 * 3600.0  # time buckets older than this are dropped (all-time totals stay)
    max_sessions: int = 100_000  # MemoryStore only: least recently used sessions are evicted beyond it
    max_pending: int = 100_000  # distinct buffered counter keys before new ones are dropped (and counted)
    flush_interval: float = 0.5  # seconds between background flushes
    flush_events: int = 5_000  # a flush starts early once this many events are queued

    def __post_init__(self) -> None:
        for name in ("session_ttl", "retention", "flush_interval"):
            if getattr(self, name) <= 0:
                raise ValueError(f"store option {name} must be > 0")
        for name in ("max_routed_per_session", "max_sessions", "max_pending", "flush_events"):
            if getattr(self, name) < 1:
                raise ValueError(f"store option {name} must be >= 1")


def store_info(backend: str, *, pending: int = 0, dropped: int = 0, healthy: bool = True) -> dict[str, Any]:
    """The `"store"` key every `stats()` adds next to the DESIGN.md counters."""
    return {"backend": backend, "pending": pending, "dropped": dropped, "healthy": healthy}


@dataclass(frozen=True, slots=True)
class Event:
    tier: str
    route: str
    tool: str = ""
    kind: str = ""  # "" counts an answer; anything else is a mistake kind
    session: str = ""
    ts: float = field(default_factory=time.time)


@dataclass(frozen=True, slots=True)
class RoutedCall:
    """A tool call the router delivered, remembered to attribute agent-reported errors."""

    call_id: str
    tier: str
    route: str
    tool: str
    arguments: str = ""


@dataclass(slots=True)
class Counts:
    calls: int = 0
    mistakes: dict[str, int] = field(default_factory=dict)
    escalations: int = 0

    def to_json(self) -> dict[str, Any]:
        total = sum(self.mistakes.values())
        rate = round(total / self.calls, 4) if self.calls else (1.0 if total else 0.0)
        return {
            "calls": self.calls,
            "mistakes": dict(sorted(self.mistakes.items())),
            "mistake_rate": rate,
            "escalations": self.escalations,
        }


# Not a mistake: counts a call that left this tier for a stronger one (`escalations` in stats).
ESCALATED = "escalated"


def aggregate(rows: Iterable[tuple[str, str, str, str, int]]) -> dict[str, Any]:
    """(tier, route, tool, kind, count) rows → the stats shape of DESIGN.md."""
    tiers: dict[str, Counts] = {}
    routes: dict[str, Counts] = {}
    tools: dict[str, dict[str, Counts]] = {}
    for tier, route, tool, kind, n in rows:
        targets = [tools.setdefault(tier, {}).setdefault(tool, Counts())] if tool else []
        if not tool or kind:
            targets += [tiers.setdefault(tier, Counts()), routes.setdefault(route, Counts())]
        for c in targets:
            if kind == ESCALATED:
                c.escalations += n
            elif kind:
                c.mistakes[kind] = c.mistakes.get(kind, 0) + n
            else:
                c.calls += n
    return {
        "tiers": {k: v.to_json() for k, v in sorted(tiers.items())},
        "routes": {k: v.to_json() for k, v in sorted(routes.items())},
        "tools": {t: {k: v.to_json() for k, v in sorted(d.items())} for t, d in sorted(tools.items())},
    }


class Store(Protocol):
    backend: str  # "memory" | "sqlite" | "redis"

    @property
    def dropped(self) -> int:
        """Events lost because the local buffer was full (the store was down or too slow)."""

    async def start(self) -> None: ...

    async def close(self) -> None:
        """Flush what is queued, then release connections."""

    def record(self, events: Sequence[Event]) -> None:
        """Queue events; never blocks, never raises. Call it on the event loop's thread."""

    async def flush(self) -> None:
        """Write everything queued so far (tests and shutdown)."""

    async def stats(self, window_seconds: float | None = None) -> dict[str, Any]:
        """Counters in the DESIGN.md shape, over the last `window_seconds` (whole buckets) or all
        time, plus `"store": {"backend", "pending", "dropped", "healthy"}`. Never raises: when the
        backend is unreachable the counters are empty and `healthy` is false."""

    async def series(self, since: float, bucket: int = BUCKET_SECONDS) -> list[SeriesRow]:
        """(bucket start, tier, route, tool, kind, count) rows from `since` on, oldest first, for
        plots of rates over time; `bucket` is rounded down to a multiple of BUCKET_SECONDS (min one).
        Empty when the backend is unreachable."""

    async def sticky_set(self, session: str, tier: str, calls: int) -> None: ...

    async def sticky_take(self, session: str) -> str | None:
        """If the session is sticky, use up one of its calls and return the tier (atomic)."""

    async def routed_put(self, session: str, calls: Sequence[RoutedCall]) -> None:
        """Remember calls (the last `max_routed_per_session` per session; a re-put call is newest)."""

    async def routed_get(self, session: str, call_id: str) -> RoutedCall | None: ...

"""What the router remembers: counters of answers and mistakes, and per-session state.

Counters are events aggregated into time buckets, keyed (tier, route, tool, kind):

* an answer from a tier is `Event(tier, route)` (tool "", kind ""), plus one
  `Event(tier, route, tool=name)` per tool it called;
* a mistake is `Event(tier, route, tool=name-or-"", kind=<mistake kind>)`.

`record()` never blocks and never raises: implementations queue events and write them off the
request path. Session state (sticky escalation, which tier made which tool call) is small and
read on the request path, so its methods are async and must answer fast or give up.

Response state (`responses_put` / `responses_get`, router/store/responses.py) keeps the histories
`previous_response_id` names, for other connections, replicas, and restarts.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from router.constants import BUCKET_SECONDS, MAX_NAME_CHARS

if TYPE_CHECKING:
    from router.store.calls import CallRecord
    from router.store.responses import Outcome, ResponseChain, ResponseRecord

CounterKey = tuple[str, str, str, str]  # (tier, route, tool, kind)
BucketKey = tuple[int, str, str, str, str]  # (bucket start, tier, route, tool, kind)
SeriesRow = tuple[float, str, str, str, str, int]  # (bucket start, tier, route, tool, kind, count)


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


def store_info(backend: str, *, pending: int = 0, dropped: int = 0, healthy: bool = True) -> dict[str, Any]:
    """The `"store"` key every `stats()` adds next to the counters."""
    return {"backend": backend, "pending": pending, "dropped": dropped, "healthy": healthy}


@dataclass(frozen=True, slots=True)
class Event:
    tier: str
    route: str
    tool: str = ""
    kind: str = ""  # "" counts an answer; anything else is a mistake kind
    session: str = ""
    ts: float = field(default_factory=time.time)
    n: int = 1  # what it adds to its counter (prompt tokens count by the token)


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
    mistakes: dict[str, int] = field(default_factory=dict)  # by kind: one call may count under several
    escalations: int = 0
    mistaken: int = 0  # calls with at least one mistake
    salvaged: int = 0
    cancelled: int = 0  # calls sent and then cut off, unanswered: the client left, the router stopped, a hedge lost
    evaluated: int = 0  # prompt tokens the server evaluated
    reused: int = 0  # prompt tokens it reused from its cache
    speeds: dict[str, int] = field(default_factory=dict)  # answers by the speed they were served at
    fallbacks: dict[str, int] = field(default_factory=dict)  # fast-mode requests served at standard, by reason

    def to_json(self) -> dict[str, Any]:
        rate = min(1.0, round(self.mistaken / self.calls, 4)) if self.calls else (1.0 if self.mistaken else 0.0)
        prompt = {"prompt_tokens": {"evaluated": self.evaluated, "reused": self.reused}}
        return {
            "calls": self.calls,
            "mistakes": dict(sorted(self.mistakes.items())),
            "mistake_rate": rate,
            "escalations": self.escalations,
            "salvaged": self.salvaged,
            **({"cancelled": self.cancelled} if self.cancelled else {}),
            **(prompt if self.evaluated or self.reused else {}),
            **({"speeds": dict(sorted(self.speeds.items()))} if self.speeds else {}),
            **({"fast_mode_fallbacks": dict(sorted(self.fallbacks.items()))} if self.fallbacks else {}),
        }


# Not a mistake: counts a call that left this tier for a stronger one (`escalations` in stats).
ESCALATED = "escalated"
# Not a kind either: counts a call (and each tool it fumbled) once when it had any mistake, however
# many kinds; `mistake_rate` in stats is these over calls.
MISTAKEN = "mistaken"
# Not a mistake either: an answer whose tool call, written as text, was made structured (router/flow/salvage.py).
SALVAGED = "salvaged"
# Not a call's answer either: a call sent to the tier and cut off unanswered (the client left, the router
# stopped, a hedge lost); `cancelled` in stats: a tier's calls plus these are the requests it got.
CANCELLED = "cancelled"

# Not mistakes either: prompt tokens a tier's server evaluated, and reused from its cache (a session's
# kept prefix, router/sessions/affinity.py), by the server's own count (`prompt_tokens` in stats).
PROMPT_EVALUATED = "prompt_evaluated"
PROMPT_REUSED = "prompt_reused"

# Not mistakes either: an answer's speed as its provider said it (`speeds` in stats: fast, standard,
# OpenAI's service_tier), and a fast-mode request answered at standard speed, by reason
# (`fast_mode_fallbacks`: unavailable, rate_limited). router/upstream/speed.py
SPEED_PREFIX = "speed_"
FALLBACK_PREFIX = "fast_fallback_"

# -- shadow samples -------------------------------------------------------------------------------
# Not mistakes nor answers either: the outcome of one shadow comparison of a route's answer
# (router/core/live/shadow.py), counted per route under the `"shadow"` key of stats.
SHADOW_PREFIX = "shadow_"
SHADOW_AGREE, SHADOW_DISAGREE, SHADOW_UNSURE, SHADOW_ERROR = (
    f"{SHADOW_PREFIX}{o}" for o in ("agree", "disagree", "unsure", "error")
)


def is_shadow(kind: str) -> bool:
    return kind.startswith(SHADOW_PREFIX)


def shadow_json(outcomes: dict[str, int]) -> dict[str, Any]:
    """One route's shadow counters: comparisons, agreed, disagreed, unsure, errors, agreement
    (agreed / (agreed + disagreed), null before the first verdict)."""
    agreed, disagreed = outcomes.get(SHADOW_AGREE, 0), outcomes.get(SHADOW_DISAGREE, 0)
    unsure, errors = outcomes.get(SHADOW_UNSURE, 0), outcomes.get(SHADOW_ERROR, 0)
    return {
        "samples": agreed + disagreed + unsure,
        "agreed": agreed,
        "disagreed": disagreed,
        "unsure": unsure,
        "errors": errors,
        "agreement": round(agreed / (agreed + disagreed), 4) if agreed + disagreed else None,
    }


@dataclass(frozen=True, slots=True)
class Sample:
    """One call of a route kept for quality checks (shadow mode, `agent-router qa`): the request and
    answers are redacted before they are stored (router/core/live/shadow.py)."""

    route: str
    tier: str  # the tier whose answer the client got
    request: dict[str, Any]  # the chat request body
    answer: dict[str, Any]  # that tier's assistant message
    reference_tier: str = ""  # the tier that answered the same request for comparison ("" = none yet)
    reference: dict[str, Any] | None = None  # its assistant message
    verdict: dict[str, Any] | None = None  # {"score", "pass", "reason", "difference", "judge", "unsure"}
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    ts: float = field(default_factory=time.time)


# -- end of shadow samples ------------------------------------------------------------------------


# Not mistakes either: calls that asked for a lane, by outcome (router/core/live/lanes.py); `route` holds the lane.
LANE_PREFIX = "lane_"
LANE_OUTCOMES = ("served", "standard", "capped", "refused", "busy")


def counted_apart(kind: str) -> bool:
    """Kinds that are neither answers nor mistakes: escalations, salvages, cancelled calls, shadow
    verdicts, lane outcomes, speeds and fast-mode fallbacks."""
    return kind in _APART or is_shadow(kind) or kind.startswith((LANE_PREFIX, SPEED_PREFIX, FALLBACK_PREFIX))


_APART = frozenset((ESCALATED, MISTAKEN, SALVAGED, CANCELLED, PROMPT_EVALUATED, PROMPT_REUSED))


def aggregate(rows: Iterable[tuple[str, str, str, str, int]]) -> dict[str, Any]:
    """(tier, route, tool, kind, count) rows → the stats shape (`GET /v1/router/stats`)."""
    tiers: dict[str, Counts] = {}
    routes: dict[str, Counts] = {}
    tools: dict[str, dict[str, Counts]] = {}
    shadow: dict[str, dict[str, int]] = {}
    lanes: dict[str, dict[str, int]] = {}
    for tier, route, tool, kind, n in rows:
        if is_shadow(kind):
            outcomes = shadow.setdefault(route, {})
            outcomes[kind] = outcomes.get(kind, 0) + n
            continue
        if kind.startswith(LANE_PREFIX):
            outcomes = lanes.setdefault(route, dict.fromkeys(LANE_OUTCOMES, 0))
            outcome = kind[len(LANE_PREFIX) :]
            outcomes[outcome] = outcomes.get(outcome, 0) + n
            continue
        targets = [tools.setdefault(tier, {}).setdefault(tool, Counts())] if tool else []
        if not tool or (kind and kind != MISTAKEN):  # a tool's MISTAKEN is its own; the call has one too
            targets += [tiers.setdefault(tier, Counts()), routes.setdefault(route, Counts())]
        for c in targets:
            if kind == ESCALATED:
                c.escalations += n
            elif kind == MISTAKEN:
                c.mistaken += n
            elif kind == SALVAGED:
                c.salvaged += n
            elif kind == CANCELLED:
                c.cancelled += n
            elif kind == PROMPT_EVALUATED:
                c.evaluated += n
            elif kind == PROMPT_REUSED:
                c.reused += n
            elif kind.startswith(SPEED_PREFIX):
                speed = kind[len(SPEED_PREFIX) :]
                c.speeds[speed] = c.speeds.get(speed, 0) + n
            elif kind.startswith(FALLBACK_PREFIX):
                reason = kind[len(FALLBACK_PREFIX) :]
                c.fallbacks[reason] = c.fallbacks.get(reason, 0) + n
            elif kind:
                c.mistakes[kind] = c.mistakes.get(kind, 0) + n
            else:
                c.calls += n
    return {
        "tiers": {k: v.to_json() for k, v in sorted(tiers.items())},
        "routes": {k: v.to_json() for k, v in sorted(routes.items())},
        "tools": {t: {k: v.to_json() for k, v in sorted(d.items())} for t, d in sorted(tools.items())},
        "shadow": {route: shadow_json(outcomes) for route, outcomes in sorted(shadow.items())},
        "lanes": dict(sorted(lanes.items())),
    }


class Store(Protocol):
    backend: str  # "memory" | "sqlite" | "redis"
    # why the store could not be used since start-up (None once it was): `serve` exits on it unless
    # the policy says `store_required: false`, and /healthz reports `degraded` meanwhile
    unusable: str | None

    @property
    def dropped(self) -> int:
        """Events lost because the local buffer was full (the store was down or too slow)."""

    @property
    def healthy(self) -> bool:
        """False while the backend cannot be reached (since start-up, or since it was lost): calls are
        served on, counters wait in the bounded buffer; true again at its first answer."""

    def health(self) -> dict[str, Any]:
        """While not `healthy`: {"backend", "healthy": false, "since" (unix time), "error", "pending",
        "dropped"} — what /readyz, /healthz and the stats say of it."""

    async def start(self) -> None: ...

    async def close(self) -> None:
        """Flush what is queued, then release connections."""

    def record(self, events: Sequence[Event]) -> None:
        """Queue events; never blocks, never raises. Call it on the event loop's thread."""

    async def flush(self) -> None:
        """Write everything queued so far (tests and shutdown)."""

    async def stats(self, window_seconds: float | None = None) -> dict[str, Any]:
        """Counters in the stats shape, over the last `window_seconds` (whole buckets) or all
        time, plus `"store": {"backend", "pending", "dropped", "healthy"}` (and, while not healthy,
        `"since"`, `"error"`). Never raises: when the backend is unreachable the counters are empty and
        `healthy` is false."""

    async def series(self, since: float, bucket: int = BUCKET_SECONDS) -> list[SeriesRow]:
        """(bucket start, tier, route, tool, kind, count) rows from `since` on, oldest first, for
        plots of rates over time; `bucket` is rounded down to a multiple of BUCKET_SECONDS (min one).
        Empty when the backend is unreachable."""

    async def sticky_set(self, session: str, tier: str, calls: int) -> None: ...

    async def sticky_take(self, session: str) -> str | None:
        """If the session is sticky, use up one of its calls and return the tier (atomic)."""

    async def routed_put(self, session: str, calls: Sequence[RoutedCall]) -> None:
        """Remember calls (the last `max_routed_per_session` per session; a re-put call is newest). This
        process knows them at once; returns once every process sharing the store can find them — Redis:
        or after `write_wait` seconds, the write going on (router/store/routed.py). Awaited before the
        answer carrying them ends, so that an error the agent reports at once is never missed."""

    async def routed_get(self, session: str, call_id: str) -> RoutedCall | None: ...

    async def routed_take(self, session: str, call_id: str) -> RoutedCall | None:
        """`routed_get`, and forget the call (atomic): a failure is attributed once, even when the
        client sends the same request again."""

    # -- the call log (router/store/calls.py) -----------------------------------------------------
    async def calls_put(self, records: Sequence[CallRecord], origin: str = "") -> None:
        """Keep calls (bounded per session, in sessions and by age); `origin`: the process they come
        from (`calls_watch` leaves them out of its own relay). Never raises: logged."""

    def calls_watch(self, origin: str) -> AsyncIterator[CallRecord]:
        """The calls other processes put, as they are put, until cancelled (Redis: its live channel;
        the other stores have no other process to hear from: none). Reconnects by itself."""

    async def calls_get(self, session: str, limit: int) -> list[CallRecord]:
        """A session's newest calls, newest first, at most `limit`. Empty when unreachable."""

    async def call_sessions(self, limit: int) -> list[str]:
        """Sessions with calls, most recently active first, at most `limit`. Empty when unreachable."""

    # -- shadow samples (router/store/samples.py) -------------------------------------------------
    async def samples_put(self, sample: Sample) -> None:
        """Keep a sample (a re-put id replaces it); the newest `max_samples_per_route` per route,
        none older than `sample_max_age`. Never raises: a failed write is logged and lost."""

    async def samples_get(self, route: str, limit: int) -> list[Sample]:
        """The route's newest samples, newest first, at most `limit`. Empty when unreachable."""

    async def samples_routes(self) -> list[str]:
        """Routes that have samples, sorted. Empty when unreachable."""

    # -- response state (router/store/responses.py) ---------------------------------------------
    async def responses_put(self, records: Sequence[ResponseRecord]) -> list[Outcome]:
        """Keep responses for `previous_response_id`, in order (a parent before its child); one
        outcome per record: "stored", "too_big" (over `responses_max_entry_bytes`) or "failed".
        Never raises. Called off the request path."""

    async def responses_get(self, response_id: str) -> ResponseChain | None:
        """The history through that response and its session; None when unknown or expired.
        Raises `StoreUnreachable` when the backend cannot answer within about a second."""

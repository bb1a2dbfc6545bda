"""The call log in every store: one `CallRecord` per routed call (its outcome as JSON: route and why, every
attempt, tokens, cost and baseline), bounded per session, in sessions and by age — what
`GET /v1/router/sessions` and the console read, from any replica.

    calls_put(records, origin)    keep them (`origin`: the process they come from), then trim each session to its newest
                                  `max_calls_per_session`, the sessions to the newest `max_call_sessions`,
                                  and drop what is older than `call_max_age`
    calls_get(session, limit)     a session's calls, newest first
    call_sessions(limit)          the sessions with calls, most recently active first
    calls_watch(origin)           the calls other processes put, as they are put (Redis; elsewhere none)
    summarize(session, records)   a session's totals, from its calls (every backend's)

Backends
  memory   `MemoryCalls`: per session a deque, sessions in least-recently-active order.
  sqlite   table `calls (id, session, ts, data)` in the store's file, created on first use, written
           on the store's writer thread; what aged out and the sessions beyond the bound are dropped
           at most once a minute (`PRUNE_EVERY`), the sessions' own trims with every write.
  redis    `<prefix>cl:<session>` list of JSON (newest first, trimmed), `<prefix>cs` zset session →
           newest ts; one Lua script per put (atomic), every key expiring `call_max_age` after its
           newest write; the script also publishes the batch on `<prefix>calls:live`, which every
           replica relays to its console's viewers (`calls_watch`): a console on any replica shows
           every replica's calls.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import orjson

from router.store.options import StoreOptions

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger("router.store")
PRUNE_EVERY = 60.0  # seconds between SQLite's prunes of the call log by age and by sessions


@dataclass(frozen=True, slots=True)
class CallRecord:
    id: str
    session: str
    ts: float  # unix seconds the call ended
    data: dict[str, Any]  # its outcome as JSON (router/flow/outcome.py's `Outcome.to_json`)

    def to_json(self) -> bytes:
        return orjson.dumps({"id": self.id, "session": self.session, "ts": self.ts, "data": self.data})


def from_json(text: str | bytes) -> CallRecord | None:
    """A stored call; None (logged) when it cannot be read back."""
    try:
        raw = orjson.loads(text)
        return CallRecord(str(raw["id"]), str(raw["session"]), float(raw["ts"]), dict(raw["data"]))
    except (ValueError, TypeError, KeyError) as exc:
        log.warning("a stored call is unreadable and was skipped (%s)", type(exc).__name__)
        return None


def _fresh(options: StoreOptions, now: float | None = None) -> float:
    """Oldest `ts` still kept."""
    return (time.time() if now is None else now) - options.call_max_age


def summarize(session: str, records: Iterable[CallRecord]) -> dict[str, Any]:
    """A session's totals from its calls: counts per tier, escalations, sticky calls, mistakes caught by
    kind and those that reached the agent (`reported`: its tool calls it said failed), tokens, cost
    against the baseline (calls whose figures are unknown counted apart), time."""
    calls = escalated = sticky = exhausted = unpriced = reported = 0
    tiers: dict[str, int] = {}
    mistakes: dict[str, int] = {}
    prompt = cached = output = 0
    cost = baseline = seconds = 0.0
    first = last = 0.0
    for record in records:
        d = record.data
        calls += 1
        first = min(first, record.ts) if first else record.ts
        last = max(last, record.ts)
        tier = str(d.get("tier", ""))
        tiers[tier] = tiers.get(tier, 0) + 1
        escalated += bool(d.get("escalated"))
        sticky += d.get("route") == "sticky"
        exhausted += bool(d.get("exhausted"))
        reported += int(d.get("reported") or 0)
        for kind in d.get("mistakes") or ():
            mistakes[str(kind)] = mistakes.get(str(kind), 0) + 1
        tokens = d.get("tokens") or {}
        prompt += int(tokens.get("prompt", 0))
        cached += int(tokens.get("cached", 0))
        output += int(tokens.get("output", 0))
        if d.get("cost_usd") is None or d.get("baseline_cost_usd") is None:
            unpriced += 1
        else:
            cost += float(d["cost_usd"])
            baseline += float(d["baseline_cost_usd"])
        seconds += float(d.get("seconds", 0.0))
    return {
        "id": session, "first": first, "last": last, "calls": calls, "tiers": tiers, "escalated": escalated,
        "sticky": sticky, "exhausted": exhausted, "mistakes": mistakes, "reported": reported,
        "tokens": {"prompt": prompt, "cached": cached, "output": output},
        "cost_usd": round(cost, 6), "baseline_cost_usd": round(baseline, 6), "saved_usd": round(baseline - cost, 6),
        "unpriced": unpriced, "seconds": round(seconds, 3),
    }  # fmt: skip


async def nothing() -> AsyncIterator[CallRecord]:
    """No other process's calls (a store that is this process's alone, or shares a file without a channel)."""
    return
    yield  # an async generator that ends at once


# -- memory -----------------------------------------------------------------------------------------
class MemoryCalls:
    def __init__(self, options: StoreOptions) -> None:
        self.options = options
        self._sessions: OrderedDict[str, deque[CallRecord]] = OrderedDict()  # least recently active first

    def _prune(self) -> None:
        oldest = _fresh(self.options)
        while self._sessions:
            session, kept = next(iter(self._sessions.items()))
            if kept and kept[-1].ts >= oldest and len(self._sessions) <= self.options.max_call_sessions:
                break
            del self._sessions[session]
        for kept in self._sessions.values():
            while kept and kept[0].ts < oldest:
                kept.popleft()

    async def put(self, records: Sequence[CallRecord]) -> None:
        for record in records:
            kept = self._sessions.get(record.session)
            if kept is None:
                kept = self._sessions[record.session] = deque(maxlen=self.options.max_calls_per_session)
            self._sessions.move_to_end(record.session)
            kept.append(record)
        self._prune()

    async def get(self, session: str, limit: int) -> list[CallRecord]:
        self._prune()
        kept = self._sessions.get(session) or ()
        return list(reversed(kept))[: max(0, limit)]

    async def sessions(self, limit: int) -> list[str]:
        self._prune()
        return list(reversed(self._sessions))[: max(0, limit)]


# -- sqlite -----------------------------------------------------------------------------------------
SQLITE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS calls "
    "(id TEXT PRIMARY KEY, session TEXT NOT NULL, ts REAL NOT NULL, data BLOB NOT NULL)",
    "CREATE INDEX IF NOT EXISTS calls_session_ts ON calls (session, ts)",
    "CREATE INDEX IF NOT EXISTS calls_ts ON calls (ts)",
)


def sqlite_schema(db: sqlite3.Connection) -> None:
    for statement in SQLITE_SCHEMA:
        db.execute(statement)


def sqlite_put(db: sqlite3.Connection, records: Sequence[CallRecord], options: StoreOptions, prune: bool) -> None:
    """Inside a transaction: keep `records` and trim their sessions; when `prune` (the store's
    housekeeping, once a minute), drop what aged out and the least recently active sessions too."""
    db.executemany(
        "INSERT OR REPLACE INTO calls (id, session, ts, data) VALUES (?, ?, ?, ?)",
        [(r.id, r.session, r.ts, r.to_json()) for r in records],
    )
    for session in {r.session for r in records}:
        db.execute(
            "DELETE FROM calls WHERE session = ? AND id IN "
            "(SELECT id FROM calls WHERE session = ? ORDER BY ts DESC LIMIT -1 OFFSET ?)",
            (session, session, options.max_calls_per_session),
        )
    if not prune:
        return
    db.execute("DELETE FROM calls WHERE ts < ?", (_fresh(options),))
    db.execute(
        "DELETE FROM calls WHERE session IN (SELECT session FROM calls GROUP BY session "
        "ORDER BY MAX(ts) DESC LIMIT -1 OFFSET ?)",
        (options.max_call_sessions,),
    )


def sqlite_get(db: sqlite3.Connection, session: str, limit: int, options: StoreOptions) -> list[CallRecord]:
    rows = db.execute(
        "SELECT data FROM calls WHERE session = ? AND ts >= ? ORDER BY ts DESC LIMIT ?",
        (session, _fresh(options), max(0, limit)),
    ).fetchall()
    return [r for (data,) in rows if (r := from_json(data)) is not None]


def sqlite_sessions(db: sqlite3.Connection, limit: int, options: StoreOptions) -> list[str]:
    """The sessions kept (the newest `max_call_sessions`, whether pruned yet or not)."""
    rows = db.execute(
        "SELECT session FROM calls WHERE ts >= ? GROUP BY session ORDER BY MAX(ts) DESC LIMIT ?",
        (_fresh(options), max(0, min(limit, options.max_call_sessions))),
    )
    return [str(session) for (session,) in rows.fetchall()]


# -- redis ------------------------------------------------------------------------------------------
# KEYS: cs (zset session → newest ts), then one cl:<session> per record. ARGV: max calls per session,
# max sessions, oldest ts kept, ttl (s), the live channel, the batch as it is published (every
# replica's console relays it: `redis_watch`), then per record: session, ts, json.
REDIS_PUT = """
local most, sessions, oldest, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], ARGV[4]
for i = 2, #KEYS do
  local at = 7 + (i - 2) * 3
  redis.call('LPUSH', KEYS[i], ARGV[at + 2])
  redis.call('LTRIM', KEYS[i], 0, most - 1)
  redis.call('EXPIRE', KEYS[i], ttl)
  redis.call('ZADD', KEYS[1], 'GT', ARGV[at + 1], ARGV[at])  -- GT adds a new session too
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. oldest)
local extra = redis.call('ZCARD', KEYS[1]) - sessions
if extra > 0 then redis.call('ZREMRANGEBYRANK', KEYS[1], 0, extra - 1) end
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('PUBLISH', ARGV[5], ARGV[6])
return 1
"""


def redis_keys(prefix: str, records: Sequence[CallRecord]) -> list[str]:
    return [f"{prefix}cs", *(f"{prefix}cl:{r.session}" for r in records)]


def redis_channel(prefix: str) -> str:
    return f"{prefix}calls:live"


def redis_put_args(
    prefix: str, records: Sequence[CallRecord], options: StoreOptions, origin: str
) -> list[str | int | float | bytes]:
    ttl = max(1, int(options.call_max_age) + 1)
    batch = orjson.dumps({"origin": origin, "calls": [orjson.Fragment(r.to_json()) for r in records]})
    args: list[str | int | float | bytes] = [
        options.max_calls_per_session, options.max_call_sessions, _fresh(options), ttl, redis_channel(prefix), batch,
    ]  # fmt: skip
    for r in records:
        args += [r.session, r.ts, r.to_json()]
    return args


def from_batch(message: str | bytes, origin: str) -> list[CallRecord]:
    """The calls of a published batch, unless it is `origin`'s own (its viewers had them at once)."""
    try:
        batch = orjson.loads(message)
        if batch.get("origin") == origin:
            return []
        return [r for raw in batch.get("calls") or () if (r := from_json(orjson.dumps(raw))) is not None]
    except (orjson.JSONDecodeError, AttributeError, TypeError):
        log.warning("a published batch of calls is unreadable and was skipped")
        return []


async def redis_get(reader: Redis, prefix: str, session: str, limit: int, options: StoreOptions) -> list[CallRecord]:
    if limit <= 0:
        return []
    raws = cast(list[str], await reader.lrange(f"{prefix}cl:{session}", 0, limit - 1))
    oldest = _fresh(options)
    return [r for raw in raws if (r := from_json(raw)) is not None and r.ts >= oldest]


async def redis_sessions(reader: Redis, prefix: str, limit: int, options: StoreOptions) -> list[str]:
    if limit <= 0:
        return []
    found = await reader.zrevrangebyscore(f"{prefix}cs", "+inf", _fresh(options), start=0, num=limit)
    return [str(s) for s in cast(list[str], found)]


async def redis_watch(url: str, prefix: str, origin: str) -> AsyncIterator[CallRecord]:
    """Every replica's calls but `origin`'s, from the live channel: its own connection (a
    subscription holds one), subscribed again after a loss with a growing wait (tenacity)."""
    from redis.asyncio import Redis
    from redis.exceptions import RedisError
    from tenacity import AsyncRetrying, retry_if_exception_type, wait_exponential_jitter

    retrying = AsyncRetrying(
        wait=wait_exponential_jitter(multiplier=0.5, max=10.0), retry=retry_if_exception_type((RedisError, OSError))
    )
    async for attempt in retrying:
        with attempt:
            listener = Redis.from_url(url, decode_responses=True, socket_connect_timeout=2.0)
            try:
                async with listener.pubsub() as pubsub:
                    await pubsub.subscribe(redis_channel(prefix))
                    async for message in pubsub.listen():
                        if message.get("type") == "message":
                            for record in from_batch(message["data"], origin):
                                yield record
            finally:
                await listener.aclose()

"""Shadow / QA samples in every store: one `Sample` per kept call, bounded per route and by age.

    samples_put(sample)           keep it (a re-put id replaces it), then trim the route to the
                                  newest `max_samples_per_route` and drop what is older than
                                  `sample_max_age` (all routes)
    samples_get(route, limit)     newest first
    samples_routes()              routes with samples

What a sample holds was redacted before it got here (router/core/live/shadow.py); stores only keep it.

Backends
  memory   `MemorySamples`: per route a dict id → sample, pruned on every put and get.
  sqlite   table `samples (id, route, ts, data)` in the store's file, created on first use, written on
           the store's writer thread; so `agent-router qa` in another process reads what `serve`
           kept.
  redis    `<prefix>smi:<route>` zset id → ts, `<prefix>smd:<route>` hash id → JSON, `<prefix>smr`
           zset route → newest ts; one Lua script per put (atomic), every key expiring
           `sample_max_age` after its newest write.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, cast

from router.store.base import Sample
from router.store.options import StoreOptions

if TYPE_CHECKING:
    from redis.asyncio import Redis

log = logging.getLogger("router.store")


def to_json(sample: Sample) -> str:
    return json.dumps(asdict(sample), separators=(",", ":"))


def from_json(text: str | bytes) -> Sample | None:
    """A stored sample; None (logged) when it cannot be read back."""
    try:
        data = json.loads(text)
        return Sample(**data)
    except (ValueError, TypeError) as exc:
        log.warning("a stored sample is unreadable and was skipped (%s)", type(exc).__name__)
        return None


def _fresh(options: StoreOptions, now: float | None = None) -> float:
    """Oldest `ts` still kept."""
    return (time.time() if now is None else now) - options.sample_max_age


# -- memory -----------------------------------------------------------------------------------------
class MemorySamples:
    def __init__(self, options: StoreOptions) -> None:
        self.options = options
        self._routes: dict[str, dict[str, Sample]] = {}

    def _prune(self) -> None:
        oldest, most = _fresh(self.options), self.options.max_samples_per_route
        for route, kept in list(self._routes.items()):
            fresh = [s for s in kept.values() if s.ts >= oldest]
            if len(fresh) > most:
                fresh = sorted(fresh, key=lambda s: s.ts)[-most:]
            if len(fresh) != len(kept):
                self._routes[route] = kept = {s.id: s for s in fresh}
            if not kept:
                del self._routes[route]

    async def put(self, sample: Sample) -> None:
        kept = self._routes.setdefault(sample.route, {})
        first = kept.get(sample.id)
        kept[sample.id] = sample if first is None else replace(sample, route=first.route, ts=first.ts)
        self._prune()

    async def get(self, route: str, limit: int) -> list[Sample]:
        self._prune()
        kept = self._routes.get(route) or {}
        return sorted(kept.values(), key=lambda s: s.ts, reverse=True)[: max(0, limit)]

    async def routes(self) -> list[str]:
        self._prune()
        return sorted(self._routes)


# -- sqlite -----------------------------------------------------------------------------------------
SQLITE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS samples "
    "(id TEXT PRIMARY KEY, route TEXT NOT NULL, ts REAL NOT NULL, data TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS samples_route_ts ON samples (route, ts)",
    "CREATE INDEX IF NOT EXISTS samples_ts ON samples (ts)",
)


def sqlite_schema(db: sqlite3.Connection) -> None:
    for statement in SQLITE_SCHEMA:
        db.execute(statement)


def sqlite_put(db: sqlite3.Connection, sample: Sample, options: StoreOptions) -> None:
    """Inside a transaction: keep `sample`, trim its route, drop every sample that aged out."""
    db.execute(
        "INSERT INTO samples (id, route, ts, data) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (id) DO UPDATE SET data = excluded.data",  # a re-put keeps its route and ts
        (sample.id, sample.route, sample.ts, to_json(sample)),
    )
    db.execute(
        "DELETE FROM samples WHERE route = ? AND id IN "
        "(SELECT id FROM samples WHERE route = ? ORDER BY ts DESC LIMIT -1 OFFSET ?)",
        (sample.route, sample.route, options.max_samples_per_route),
    )
    db.execute("DELETE FROM samples WHERE ts < ?", (_fresh(options),))


def sqlite_get(db: sqlite3.Connection, route: str, limit: int, options: StoreOptions) -> list[Sample]:
    rows = db.execute(
        "SELECT data FROM samples WHERE route = ? AND ts >= ? ORDER BY ts DESC LIMIT ?",
        (route, _fresh(options), max(0, limit)),
    ).fetchall()
    return [s for (data,) in rows if (s := from_json(data)) is not None]


def sqlite_routes(db: sqlite3.Connection, options: StoreOptions) -> list[str]:
    rows = db.execute("SELECT DISTINCT route FROM samples WHERE ts >= ? ORDER BY route", (_fresh(options),))
    return [str(route) for (route,) in rows.fetchall()]


# -- redis ------------------------------------------------------------------------------------------
# KEYS: smi:<route> (zset id → ts), smd:<route> (hash id → json), smr (zset route → newest ts).
# ARGV: id, ts, json, max kept, oldest ts kept, ttl (s), route. A re-put id keeps its first ts.
REDIS_PUT = """
redis.call('ZADD', KEYS[1], 'NX', ARGV[2], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
local function drop(ids)
  for i = 1, #ids, 1000 do
    local part = {unpack(ids, i, math.min(i + 999, #ids))}
    redis.call('ZREM', KEYS[1], unpack(part))
    redis.call('HDEL', KEYS[2], unpack(part))
  end
end
drop(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[5]))
local extra = redis.call('ZCARD', KEYS[1]) - tonumber(ARGV[4])
if extra > 0 then drop(redis.call('ZRANGE', KEYS[1], 0, extra - 1)) end
redis.call('ZADD', KEYS[3], 'GT', ARGV[2], ARGV[7])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. ARGV[5])
for i = 1, 3 do redis.call('EXPIRE', KEYS[i], ARGV[6]) end
return 1
"""


def redis_keys(prefix: str, route: str) -> list[str]:
    return [f"{prefix}smi:{route}", f"{prefix}smd:{route}", f"{prefix}smr"]


def redis_put_args(sample: Sample, options: StoreOptions) -> list[str | int | float]:
    ttl = max(1, int(options.sample_max_age) + 1)
    return [sample.id, sample.ts, to_json(sample), options.max_samples_per_route, _fresh(options), ttl, sample.route]


async def redis_get(reader: Redis, prefix: str, route: str, limit: int, options: StoreOptions) -> list[Sample]:
    if limit <= 0:
        return []
    index, data, _ = redis_keys(prefix, route)
    ids = cast(list[str], await reader.zrevrangebyscore(index, "+inf", _fresh(options), start=0, num=limit))
    raws = cast(list[str | None], await reader.hmget(data, ids)) if ids else []
    return [s for raw in raws if raw is not None and (s := from_json(raw)) is not None]


async def redis_routes(reader: Redis, prefix: str, options: StoreOptions) -> list[str]:
    found = cast(list[str], await reader.zrangebyscore(redis_keys(prefix, "")[2], _fresh(options), "+inf"))
    return sorted(found)

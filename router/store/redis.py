"""Redis store (`redis://` / `rediss://`): counters and sessions shared by every replica.

Keys (all under `prefix`):
  c:all            hash  field=json [tier, route, tool, kind] → all-time count
  c:<bucket>       hash  same fields, one per minute bucket, expiring `retention` after the bucket
  c:buckets        zset  bucket starts that have a hash (for windowed stats and series)
  b:<batch id>     string marker of an applied batch (see below)
  s:<session>      hash  sticky tier + calls left;  r:<session> hash call_id → json,
  rl:<session>     list  call ids oldest first (bounds r:<session>); all expire after session_ttl
  smi: smd: smr    shadow / QA samples (router/store/samples.py)
  cs: cl:<session> the call log (router/store/calls.py)
  rs:<response id> string: response state for previous_response_id (router/store/responses.py)

Counter batches are applied by one Lua script: atomic (all or nothing) like MULTI/EXEC, and
idempotent — the script records the batch id and skips a batch it has already applied. A batch
is kept and retried unchanged until a write is acknowledged, so a reply lost after the server
applied it (timeout, connection reset, server killed and restarted from its AOF) is neither lost
nor counted twice: exactly once, where MULTI/EXEC + retry would give at-least-once.

The client uses short socket timeouts and one immediate retry (a pooled connection can be stale
after a Redis restart). While Redis is down, calls keep being served: counters wait in the
bounded local buffer and session calls answer None at once (for a second at most, then one tries).
Counters, routed tool calls and sticky sessions are written on two connections of their own; in the
request path's pool (`max_connections`) a wait past `op_timeout / 2` counts as `busy`, never as an
outage. While down, the flusher tries again every `flush_interval` (never in a spin), and the first
answer from Redis — a flush, a probe, any session call — marks the store healthy: a replica heals
within about a second of Redis' return, its counters written exactly once (routed tool calls: routed.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar, cast

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from router.constants import BUCKET_SECONDS
from router.store import calls, responses, routed, samples
from router.store.base import (
    CounterKey,
    RoutedCall,
    Sample,
    SeriesRow,
    aggregate,
    bucket_of,
    rebucket,
    window_start,
)
from router.store.buffer import Batch, BufferedStore, raise_if_cancelled
from router.store.calls import CallRecord
from router.store.coalesce import Coalescer
from router.store.options import StoreOptions
from router.store.redis_scripts import APPLY_BATCH, ROUTED_PUT, STICKY_TAKE
from router.store.responses import Outcome, ResponseChain, ResponseRecord, StoreUnreachable
from router.store.urls import redact_url, url_secrets, without_option

__all__ = ["RedisStore", "redact_url"]

log = logging.getLogger("router.store")
T = TypeVar("T")
MARKER_TTL = 24 * 3600  # s; a marker only has to outlive the retries of its own batch


def _field(key: CounterKey) -> str:
    return json.dumps(key, separators=(",", ":"))


def _unfield(field: str) -> CounterKey:
    tier, route, tool, kind = json.loads(field)
    return (tier, route, tool, kind)


class RedisStore(BufferedStore):
    backend = "redis"

    def __init__(
        self,
        url: str,
        prefix: str = "agent-router:",
        options: StoreOptions | None = None,
        *,
        socket_timeout: float = 0.5,
        connect_timeout: float = 0.25,
        op_timeout: float = 0.75,
        max_connections: int = 128,
        read_timeout: float = 5.0,
    ) -> None:
        super().__init__(options)
        self.url = redact_url(url)
        self._url = url  # with its password: for the live channel's own connection, never shown
        self.prefix = prefix
        self.op_timeout = op_timeout  # hard ceiling for one session call, whatever the client does
        self.deduplicated = 0  # batches found already applied on retry (a reply had been lost)
        self.busy = 0  # session calls given up because every pooled connection was in use
        self.read_timeout = read_timeout  # stats() and series(): admin reads, replies may be large
        self._secrets = url_secrets(url)
        try:
            # One immediate retry on connection errors only (a pooled connection may be stale
            # after a Redis restart); never on timeouts, which would double every stall.
            common: dict[str, Any] = {
                "decode_responses": True,
                "socket_connect_timeout": connect_timeout,
                "retry": Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
                "health_check_interval": 0,
            }
            pool = BlockingConnectionPool.from_url(  # waits op_timeout / 2 at most for a free connection
                url, socket_timeout=socket_timeout, max_connections=max_connections, timeout=op_timeout / 2, **common
            )
            # Counters, routed tool calls and sticky sessions: writes that must land, on two connections of
            # their own, so that a request path using every pooled connection neither delays them nor
            # makes a counter flush look like an outage (the store "down" while Redis is healthy).
            writes = BlockingConnectionPool.from_url(
                without_option(url, "max_connections"), socket_timeout=socket_timeout, max_connections=2,
                timeout=op_timeout / 2, **common,
            )  # fmt: skip
            # redis-py's socket_timeout bounds reading a whole reply, and parsing a big HGETALL
            # in pure Python can take longer than a request-path budget: reads get their own pool.
            readers = BlockingConnectionPool.from_url(
                url, socket_timeout=read_timeout, max_connections=4, timeout=read_timeout, **common
            )
        except (ValueError, TypeError):
            raise ValueError(f"invalid Redis store URL {self.url}") from None
        self._redis = Redis.from_pool(pool)  # owns the pool: aclose() disconnects it
        self._writes = Redis.from_pool(writes)
        self._reader = Redis.from_pool(readers)
        self._apply = self._redis.register_script(APPLY_BATCH)
        self._take = self._redis.register_script(STICKY_TAKE)
        self._put = self._redis.register_script(ROUTED_PUT)
        # routed tool calls: known here at once, in Redis before their answer ends (router/store/routed.py);
        # the puts that arrive while one is written go out together in the next round trip
        self._routed: Coalescer[routed.Put] = Coalescer(self._routed_put_many)
        self._recent = routed.Recent()
        self._puts: set[asyncio.Task[None]] = set()
        self._samples_put = self._redis.register_script(samples.REDIS_PUT)  # shadow samples
        self._calls_put = self._redis.register_script(calls.REDIS_PUT)  # the call log
        self._responses_put = self._redis.register_script(responses.REDIS_PUT)  # response state
        self._last_marker = ""

    def __repr__(self) -> str:
        return f"RedisStore({self.url!r}, prefix={self.prefix!r})"

    def store_info(self) -> dict[str, Any]:
        return {**super().store_info(), "deduplicated": self.deduplicated, "busy": self.busy}

    def _describe(self, exc: BaseException) -> str:
        text = f"{type(exc).__name__}: {exc}"
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    async def _call(self, what: str, fn: Callable[[], Awaitable[T]], limit: float | None = None) -> T | None:
        """One Redis call: skipped while Redis is known down, bounded in time (`op_timeout`
        unless `limit` is given), None (and a WARNING without secrets) on failure; an answer marks
        the store healthy again."""
        if not self._session_ok():
            return None
        try:
            async with asyncio.timeout(self.op_timeout if limit is None else limit):
                done = await fn()
            self._mark_up()  # Redis answered: session calls go on at once, whatever the flusher knows yet
            return done
        except (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError) as exc:
            raise_if_cancelled()  # the caller's cancellation, come as a timeout: not swallowed
            if isinstance(exc.__cause__, TimeoutError) and isinstance(exc, RedisConnectionError):
                self.busy += 1  # the pool's wait for a free connection timed out: overload, not outage
            else:
                self._mark_down(exc, what)
        except RedisError as exc:
            log.warning("redis store %s failed: %s", what, self._describe(exc))
        return None

    # -- BufferedStore hooks ----------------------------------------------------------------

    async def _open(self) -> None:
        await self._redis.ping()

    async def _probe(self) -> None:
        await self._writes.ping()

    async def _write(self, batch: Batch) -> None:
        by_bucket: dict[int, list[str]] = {}
        for (bucket, *key), n in batch.counts.items():
            args = by_bucket.setdefault(bucket, [])
            args += [_field((key[0], key[1], key[2], key[3])), str(n)]
        p = self.prefix
        marker = f"{p}b:{batch.id}"
        keys = [marker, self._last_marker or marker, f"{p}c:all", f"{p}c:buckets"]
        argv: list[str | int] = [
            MARKER_TTL,
            bucket_of(time.time() - self.options.retention),
            int(self.options.retention) + BUCKET_SECONDS,
            1 if self._last_marker else 0,
        ]
        for bucket, fields in sorted(by_bucket.items()):
            keys.append(f"{p}c:{bucket}")
            argv += [bucket, len(fields) // 2, *fields]
        applied = await self._apply(keys=keys, args=argv, client=self._writes)
        if not applied:
            self.deduplicated += 1
            log.info("redis store: batch %s was already applied; not counted again", batch.id)
        self._last_marker = marker

    async def _release(self) -> None:
        if self._puts:  # routed calls still being written: a bounded wait
            await asyncio.wait(self._puts, timeout=self.op_timeout)
        try:
            await self._redis.aclose()
        finally:
            await self._writes.aclose()
            await self._reader.aclose()

    # -- counters ---------------------------------------------------------------------------

    async def _bucket_rows(self, first: int) -> list[tuple[int, str, str, str, str, int]]:
        # decode_responses=True: every reply below is str
        buckets = cast(list[str], await self._reader.zrangebyscore(f"{self.prefix}c:buckets", first, "+inf"))
        async with self._reader.pipeline(transaction=False) as pipe:  # its connection back on any failure
            for b in buckets:
                pipe.hgetall(f"{self.prefix}c:{b}")
            replies = cast(list[dict[str, str]], await pipe.execute() if buckets else [])
        rows: list[tuple[int, str, str, str, str, int]] = []
        for b, fields in zip(buckets, replies, strict=True):
            rows += [(int(b), *_unfield(f), int(n)) for f, n in fields.items()]
        return rows

    async def stats(self, window_seconds: float | None = None) -> dict[str, Any]:
        async def read() -> list[tuple[str, str, str, str, int]]:
            if window_seconds is None:
                fields = cast(dict[str, str], await self._reader.hgetall(f"{self.prefix}c:all"))
                return [(*_unfield(f), int(n)) for f, n in fields.items()]
            totals: dict[CounterKey, int] = {}
            for _, *key, n in await self._bucket_rows(window_start(window_seconds)):
                k = (key[0], key[1], key[2], key[3])
                totals[k] = totals.get(k, 0) + n
            return [(*k, n) for k, n in totals.items()]

        rows = await self._call("stats", read, self.read_timeout)
        return {**aggregate(rows or []), "store": self.store_info()}

    async def series(self, since: float, bucket: int = BUCKET_SECONDS) -> list[SeriesRow]:
        rebucket([], bucket)  # validate before any I/O
        rows = await self._call("series", lambda: self._bucket_rows(bucket_of(since)), self.read_timeout)
        return rebucket(rows or [], bucket)

    # -- sessions ---------------------------------------------------------------------------

    def _ttl_ms(self) -> int:
        return max(1, int(self.options.session_ttl * 1000))

    async def sticky_set(self, session: str, tier: str, calls: int) -> None:
        key = f"{self.prefix}s:{session}"

        async def put() -> None:
            if calls <= 0:
                await self._writes.delete(key)
                return
            async with self._writes.pipeline(transaction=True) as pipe:
                pipe.hset(key, mapping={"tier": tier, "left": calls})
                pipe.pexpire(key, self._ttl_ms())
                await pipe.execute()

        await self._call("sticky_set", put)

    async def sticky_take(self, session: str) -> str | None:
        async def take() -> str | None:
            tier = await self._take(keys=[f"{self.prefix}s:{session}"])
            return None if tier is None else str(tier)

        return await self._call("sticky_take", take)

    async def routed_put(self, session: str, calls: Sequence[RoutedCall]) -> None:
        """Known to this process at once; returns once written to Redis (coalesced: the puts of calls
        that end together share one round trip), or after `write_wait` seconds, the write going on
        (router/store/routed.py)."""
        if not calls:
            return
        keep = self.options.max_routed_per_session
        put = routed.Put(routed.put_args(self.prefix, session, calls, keep, self._ttl_ms()))
        put.task = asyncio.ensure_future(self._routed.put(put))  # its own task: a caller gone leaves it running
        self._puts.add(put.task)
        put.task.add_done_callback(self._puts.discard)
        self._recent.add(session, calls[-keep:], put)
        await asyncio.wait({put.task}, timeout=self.options.write_wait)

    async def _routed_put_many(self, batch: list[routed.Put]) -> None:
        async def write() -> bool:
            for attempt in (1, 2):
                try:
                    async with self._writes.pipeline(transaction=False) as pipe:
                        for put in batch:  # EVALSHA without the pipeline's own SCRIPT EXISTS round trip
                            pipe.evalsha(self._put.sha, 2, *put.args)
                        await pipe.execute()
                    return True
                except NoScriptError:  # Redis restarted and lost its scripts: load once, again
                    if attempt == 2:
                        raise
                    await self._writes.script_load(ROUTED_PUT)
            return False

        if await self._call("routed_put", write):
            for put in batch:
                put.ok = True

    async def _landed(self, known: routed.Known | None) -> None:
        """The call's own write first (bounded): Redis then says whether another replica took it."""
        if known is not None and known.put.task is not None and known.put.pending:
            await asyncio.wait({known.put.task}, timeout=self.op_timeout)

    async def routed_get(self, session: str, call_id: str) -> RoutedCall | None:
        known = self._recent.get(session, call_id)
        await self._landed(known)

        async def get() -> tuple[str | None]:
            return (cast(str | None, await self._redis.hget(f"{self.prefix}r:{session}", call_id)),)

        found = await self._call("routed_get", get)
        return routed.decide(known, found is not None, routed.routed(call_id, found[0]) if found else None)

    async def routed_take(self, session: str, call_id: str) -> RoutedCall | None:
        known = self._recent.take(session, call_id)
        await self._landed(known)

        async def take() -> tuple[str | None]:
            key = f"{self.prefix}r:{session}"
            async with self._writes.pipeline(transaction=True) as tx:  # MULTI: read and delete as one
                tx.hget(key, call_id)
                tx.hdel(key, call_id)
                raw, _ = await tx.execute()
            return (raw,)

        found = await self._call("routed_take", take)
        return routed.decide(known, found is not None, routed.routed(call_id, found[0]) if found else None)

    # -- the call log (router/store/calls.py) ---------------------------------------------------

    async def calls_put(self, records: Sequence[CallRecord], origin: str = "") -> None:
        keys = calls.redis_keys(self.prefix, records)
        args = calls.redis_put_args(self.prefix, records, self.options, origin)
        await self._call("calls_put", lambda: self._calls_put(keys=keys, args=args))

    def calls_watch(self, origin: str) -> AsyncIterator[CallRecord]:
        return calls.redis_watch(self._url, self.prefix, origin)

    async def calls_get(self, session: str, limit: int) -> list[CallRecord]:
        def get() -> Awaitable[list[CallRecord]]:
            return calls.redis_get(self._reader, self.prefix, session, limit, self.options)

        return await self._call("calls_get", get, self.read_timeout) or []

    async def call_sessions(self, limit: int) -> list[str]:
        def sessions() -> Awaitable[list[str]]:
            return calls.redis_sessions(self._reader, self.prefix, limit, self.options)

        return await self._call("call_sessions", sessions, self.read_timeout) or []

    # -- shadow samples (router/store/samples.py) -----------------------------------------------

    async def samples_put(self, sample: Sample) -> None:
        keys = samples.redis_keys(self.prefix, sample.route)
        args = samples.redis_put_args(sample, self.options)
        await self._call("samples_put", lambda: self._samples_put(keys=keys, args=args))

    async def samples_get(self, route: str, limit: int) -> list[Sample]:
        def get() -> Awaitable[list[Sample]]:
            return samples.redis_get(self._reader, self.prefix, route, limit, self.options)

        return await self._call("samples_get", get, self.read_timeout) or []

    async def samples_routes(self) -> list[str]:
        def routes() -> Awaitable[list[str]]:
            return samples.redis_routes(self._reader, self.prefix, self.options)

        return await self._call("samples_routes", routes, self.read_timeout) or []

    # -- response state (router/store/responses.py) ---------------------------------------------

    async def responses_put(self, records: Sequence[ResponseRecord]) -> list[Outcome]:
        def put() -> Awaitable[list[Outcome]]:
            return responses.redis_put(self._redis, self._responses_put, self.prefix, records, self.options)

        return await self._call("responses_put", put, self.read_timeout) or ["failed"] * len(records)

    async def responses_get(self, response_id: str) -> ResponseChain | None:
        if not responses.known_id(response_id):
            return None
        found = await self._call(
            "responses_get", lambda: responses.redis_rows(self._redis, self.prefix, response_id, self.options)
        )
        if found is None:  # down, or no answer within op_timeout
            raise StoreUnreachable("the Redis store did not answer")
        return None if found.rows is None else await responses.decoded(found.rows)

"""The embedded default store: one SQLite file in WAL mode (`sqlite:///./.agent-router/state.db`).

All SQLite work runs on one dedicated thread that owns the only connection, so the event loop
never blocks on disk and no connection is shared between threads. `record()` only touches the
in-memory buffer (see buffer.py); the flusher UPSERTs aggregated batches, each in one
transaction (atomic, so a failed batch is simply retried). Bucket rows older than `retention`
are pruned; all-time totals live in their own table. Several processes may share one file
(WAL + busy timeout) and then share their counters.

Session state (sticky sessions, routed tool calls) stays in process memory (`memory.Sessions`): it
is read on every call and lives for minutes, so a thread hop and a write per call would cost more
than it is worth — measured +0.3 to +0.7 ms p50 per call. Use Redis to share it between processes.

Response state (`previous_response_id`, router/store/responses.py) has its own table, written in
batches on the same thread and pruned in the same housekeeping: it survives a restart.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from router.constants import BUCKET_SECONDS, LOOKUP_SECONDS
from router.store import calls, responses, samples
from router.store.base import (
    Sample,
    SeriesRow,
    aggregate,
    bucket_of,
    rebucket,
    window_start,
)
from router.store.buffer import Batch, BufferedStore
from router.store.calls import CallRecord
from router.store.memory import Sessions
from router.store.options import StoreOptions
from router.store.responses import Outcome, ResponseChain, ResponseRecord, StoreUnreachable

log = logging.getLogger("router.store")
T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS counters (
  bucket INTEGER NOT NULL, tier TEXT NOT NULL, route TEXT NOT NULL, tool TEXT NOT NULL,
  kind TEXT NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (bucket, tier, route, tool, kind)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS totals (
  tier TEXT NOT NULL, route TEXT NOT NULL, tool TEXT NOT NULL, kind TEXT NOT NULL,
  n INTEGER NOT NULL, PRIMARY KEY (tier, route, tool, kind)
) WITHOUT ROWID;

"""
UPSERT_BUCKET = (
    "INSERT INTO counters (bucket, tier, route, tool, kind, n) VALUES (?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (bucket, tier, route, tool, kind) DO UPDATE SET n = n + excluded.n"
)
UPSERT_TOTAL = (
    "INSERT INTO totals (tier, route, tool, kind, n) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (tier, route, tool, kind) DO UPDATE SET n = n + excluded.n"
)


class SqliteStore(Sessions, BufferedStore):
    backend = "sqlite"

    def __init__(self, path: str | Path, options: StoreOptions | None = None):
        BufferedStore.__init__(self, options)
        Sessions.__init__(self, self.options)
        self.path = Path(path)
        self._db: sqlite3.Connection | None = None  # touched only on the writer thread
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agent-router-sqlite")
        self._samples_schema = False  # shadow samples: table created on first use (writer thread)
        self._calls_schema = False  # the call log: likewise
        self._calls_pruned = -calls.PRUNE_EVERY  # monotonic time of its last prune: the first write prunes
        self._responses_schema = False  # response state: likewise

    def __repr__(self) -> str:
        return f"SqliteStore({str(self.path)!r})"

    # -- the writer thread ------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            if str(self.path) != ":memory:":
                self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=2.0, isolation_level=None)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                db.executescript(SCHEMA)
            except BaseException:
                db.close()
                raise
            self._db = db
        return self._db

    def _txn(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        db = self._conn()
        db.execute("BEGIN IMMEDIATE")
        try:
            out = fn(db)
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return out

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, functools.partial(fn, *args))

    # -- BufferedStore hooks ----------------------------------------------------------------

    async def _open(self) -> None:
        await self._run(self._writable)

    def _writable(self) -> None:
        """Raise unless the file can be written: one that opens read-only would count nothing."""
        self._conn().execute("BEGIN IMMEDIATE")
        self._conn().execute("ROLLBACK")

    async def _write(self, batch: Batch) -> None:
        def write(db: sqlite3.Connection) -> None:
            items = list(batch.counts.items())
            db.executemany(UPSERT_BUCKET, [(*k, n) for k, n in items])
            totals: dict[tuple[str, str, str, str], int] = {}
            for (_, tier, route, tool, kind), n in items:
                totals[(tier, route, tool, kind)] = totals.get((tier, route, tool, kind), 0) + n
            db.executemany(UPSERT_TOTAL, [(*k, n) for k, n in totals.items()])

        await self._run(self._txn, write)

    async def _probe(self) -> None:
        await self._run(self._writable)

    async def _housekeep(self) -> None:
        def clean(db: sqlite3.Connection) -> None:
            now = time.time()
            db.execute("DELETE FROM counters WHERE bucket < ?", (bucket_of(now - self.options.retention),))
            responses.sqlite_prune(db, self.options, now)  # response state: expired, then over the row cap

        await self._run(self._txn, clean)

    async def _release(self) -> None:
        def close() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None

        try:
            await self._run(close)
        finally:
            self._thread.shutdown(wait=True)

    # -- counters ---------------------------------------------------------------------------

    async def stats(self, window_seconds: float | None = None) -> dict[str, Any]:
        args: tuple[int, ...] = ()
        if window_seconds is None:
            sql = "SELECT tier, route, tool, kind, n FROM totals"
        else:
            sql = "SELECT tier, route, tool, kind, SUM(n) FROM counters WHERE bucket >= ? GROUP BY 1, 2, 3, 4"
            args = (window_start(window_seconds),)
        try:
            rows = await self._run(lambda: self._conn().execute(sql, args).fetchall())
        except (sqlite3.Error, OSError) as exc:
            self._mark_down(exc, "stats")
            rows = []
        return {**aggregate(rows), "store": self.store_info()}

    async def series(self, since: float, bucket: int = BUCKET_SECONDS) -> list[SeriesRow]:
        sql = "SELECT bucket, tier, route, tool, kind, n FROM counters WHERE bucket >= ?"
        try:
            rows = await self._run(lambda: self._conn().execute(sql, (bucket_of(since),)).fetchall())
        except (sqlite3.Error, OSError) as exc:
            self._mark_down(exc, "series")
            rows = []
        return rebucket(rows, bucket)

    # -- sessions ---------------------------------------------------------------------------

    # -- the call log (router/store/calls.py) ---------------------------------------------------

    def _calls_db(self) -> sqlite3.Connection:
        db = self._conn()
        if not self._calls_schema:
            calls.sqlite_schema(db)
            self._calls_schema = True
        return db

    async def calls_put(self, records: Sequence[CallRecord], origin: str = "") -> None:
        now = time.monotonic()
        prune = now - self._calls_pruned >= calls.PRUNE_EVERY
        if prune:
            self._calls_pruned = now

        def put() -> None:
            self._calls_db()
            self._txn(lambda db: calls.sqlite_put(db, records, self.options, prune))

        try:
            await self._run(put)
        except (sqlite3.Error, OSError) as exc:
            log.warning("sqlite store: %d calls were not logged (%s)", len(records), self._describe(exc))

    async def calls_get(self, session: str, limit: int) -> list[CallRecord]:
        try:
            return await self._run(lambda: calls.sqlite_get(self._calls_db(), session, limit, self.options))
        except (sqlite3.Error, OSError) as exc:
            self._mark_down(exc, "calls")
            return []

    def calls_watch(self, origin: str) -> AsyncIterator[CallRecord]:
        return calls.nothing()

    async def call_sessions(self, limit: int) -> list[str]:
        try:
            return await self._run(lambda: calls.sqlite_sessions(self._calls_db(), limit, self.options))
        except (sqlite3.Error, OSError) as exc:
            self._mark_down(exc, "calls")
            return []

    # -- shadow samples (router/store/samples.py) -----------------------------------------------

    def _samples_db(self) -> sqlite3.Connection:
        db = self._conn()
        if not self._samples_schema:
            samples.sqlite_schema(db)
            self._samples_schema = True
        return db

    async def samples_put(self, sample: Sample) -> None:
        def put() -> None:
            self._samples_db()
            self._txn(lambda db: samples.sqlite_put(db, sample, self.options))

        try:
            await self._run(put)
        except (sqlite3.Error, OSError) as exc:
            log.warning("sqlite store: a sample was not kept (%s)", self._describe(exc))

    async def samples_get(self, route: str, limit: int) -> list[Sample]:
        try:
            return await self._run(lambda: samples.sqlite_get(self._samples_db(), route, limit, self.options))
        except (sqlite3.Error, OSError) as exc:
            self._mark_down(exc, "samples")
            return []

    async def samples_routes(self) -> list[str]:
        try:
            return await self._run(lambda: samples.sqlite_routes(self._samples_db(), self.options))
        except (sqlite3.Error, OSError) as exc:
            self._mark_down(exc, "samples")
            return []

    # -- response state (router/store/responses.py) ---------------------------------------------

    def _responses_db(self) -> sqlite3.Connection:
        db = self._conn()
        if not self._responses_schema:
            responses.sqlite_schema(db)
            self._responses_schema = True
        return db

    async def responses_put(self, records: Sequence[ResponseRecord]) -> list[Outcome]:
        def put() -> list[Outcome]:
            self._responses_db()
            return self._txn(lambda db: responses.sqlite_put(db, records, self.options))

        try:
            return await self._run(put)
        except (sqlite3.Error, OSError) as exc:
            log.warning("sqlite store: %d responses were not kept (%s)", len(records), self._describe(exc))
            return ["failed"] * len(records)

    async def responses_get(self, response_id: str) -> ResponseChain | None:
        try:
            async with asyncio.timeout(LOOKUP_SECONDS):
                return await self._run(lambda: responses.sqlite_get(self._responses_db(), response_id, self.options))
        except (sqlite3.Error, OSError, TimeoutError) as exc:
            log.warning("sqlite store: a response lookup failed (%s)", self._describe(exc))
            raise StoreUnreachable("the SQLite store did not answer") from None

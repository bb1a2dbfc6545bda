"""Response state in the store: bytes per turn and lookup latency. `python -m bench.response_state [REDIS_URL]`

A coding-agent chain: each turn adds a tool result (3 KB of this repository's own source) and the
next tool call. For SQLite (a temporary file) and Redis (default redis://127.0.0.1:6379/15, a key
prefix of its own, deleted afterwards) it measures:

* bytes stored per turn of a 20- and a 100-turn chain, against the alternative of storing each
  response's whole history (zlib level 1 and 6);
* a store write per response (what the background writer pays, off the request path);
* `responses_get` of the newest response: what a lookup adds when no cache in the process has it,
  against a hit in the process cache.

Writes bench/results/response_state.md.
"""

from __future__ import annotations

import asyncio
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
import zlib
from pathlib import Path
from typing import Any

import orjson
from redis.asyncio import Redis

from router.core.live.response_state import ResponseCache, stored
from router.store import Store, StoreOptions, open_store
from router.store.responses import ResponseRecord, redis_prefix
from router.store.sqlite import SqliteStore

ROOT = Path(__file__).resolve().parents[1]
LOOKUPS = 300


def agent_chain(turns: int) -> list[ResponseRecord]:
    files = sorted((ROOT / "router").rglob("*.py"))
    history: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing store test and explain the fix."}]
    out: list[ResponseRecord] = []
    for i in range(turns):
        path = files[i % len(files)]
        added: list[dict[str, Any]] = [] if i else [history[0]]
        if i:
            added.append({"role": "tool", "tool_call_id": f"call_{i - 1}", "content": path.read_text()[:3000]})
        args = orjson.dumps({"path": str(path.relative_to(ROOT))}).decode()
        call = {"id": f"call_{i}", "type": "function", "function": {"name": "read_file", "arguments": args}}
        added.append({"role": "assistant", "content": None, "tool_calls": [call]})
        history = [*history, *added[1:]] if i == 0 else [*history, *added]
        parent = out[-1].id if out else None
        out.append(ResponseRecord(f"resp_{uuid.uuid4().hex}", parent, "h:bench", tuple(history), len(added)))
    return out


def whole_history_bytes(chain: list[ResponseRecord], level: int) -> int:
    return sum(len(zlib.compress(orjson.dumps(list(r.messages)), level)) for r in chain)


async def stored_bytes(store: Store, chain: list[ResponseRecord], redis_url: str, prefix: str) -> tuple[int, int]:
    """(bytes of the stored values, what the backend reports it holds for them)."""
    if isinstance(store, SqliteStore):
        with sqlite3.connect(store.path) as db:
            ids = [r.id for r in chain]
            marks = ",".join("?" * len(ids))
            sql = "SELECT sum(length(data) + length(parent) + length(session) + 16) FROM responses WHERE id IN "
            (values,) = db.execute(f"{sql}({marks})", ids).fetchone()
        return int(values), int(values)
    client = Redis.from_url(redis_url)
    try:
        keys = [redis_prefix(prefix) + r.id for r in chain]
        values = sum([await client.strlen(k) for k in keys])
        usage = sum([int(await client.memory_usage(k) or 0) for k in keys])
    finally:
        await client.aclose()
    return values, usage


def pct(samples: list[float], q: float) -> float:
    return sorted(samples)[min(len(samples) - 1, int(q * len(samples)))]


async def bench(kind: str, url: str, redis_url: str, rows: list[str]) -> None:
    prefix = f"bench-response-state:{uuid.uuid4().hex}:"
    store = open_store(url, StoreOptions(), **({"prefix": prefix} if kind == "redis" else {}))
    await store.start()
    try:
        for turns in (20, 100):
            chain = agent_chain(turns)
            writes = []
            for record in chain:
                t0 = time.perf_counter()
                assert await store.responses_put([record]) == ["stored"]
                writes.append(time.perf_counter() - t0)
            values, held = await stored_bytes(store, chain, redis_url, prefix)
            newest = chain[-1].id
            found = await store.responses_get(newest)
            assert found is not None and found.messages == list(chain[-1].messages)
            lookups = []
            for _ in range(LOOKUPS):
                t0 = time.perf_counter()
                await store.responses_get(newest)
                lookups.append(time.perf_counter() - t0)
            hops = (turns - 1) % StoreOptions().responses_checkpoint_every + 1
            rows.append(
                f"| {kind} | {turns} | {values / turns / 1024:.2f} | {held / turns / 1024:.2f} "
                f"| {whole_history_bytes(chain, 1) / turns / 1024:.1f} "
                f"| {whole_history_bytes(chain, 6) / turns / 1024:.1f} "
                f"| {statistics.median(writes) * 1000:.2f} | {hops} "
                f"| {statistics.median(lookups) * 1000:.2f} | {pct(lookups, 0.95) * 1000:.2f} |"
            )
    finally:
        await store.close()
        if kind == "redis":
            client = Redis.from_url(redis_url)
            async for key in client.scan_iter(match=f"{prefix}*"):
                await client.delete(key)
            await client.aclose()


def cache_hit_us() -> float:
    cache = ResponseCache(10_000)
    entry = stored([], [{"role": "user", "content": "x"}], "s")
    cache.put("resp_x", entry)
    t0 = time.perf_counter()
    for _ in range(100_000):
        cache.get("resp_x")
    return (time.perf_counter() - t0) / 100_000 * 1e6


async def main(argv: list[str]) -> None:
    redis_url = argv[0] if argv else "redis://127.0.0.1:6379/15"
    rows = [
        "| store | turns | stored KiB/turn | held KiB/turn | whole history, zlib 1 | zlib 6 | write ms p50 "
        "| entries read | lookup ms p50 | lookup ms p95 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        await bench("sqlite", f"sqlite:///{tmp}/state.db", redis_url, rows)
    await bench("redis", redis_url, redis_url, rows)
    text = (
        "# Response state in the store\n\n"
        f"`python -m bench.response_state`: a coding-agent chain (each turn: a 3 KB tool result from this "
        f"repository's source, the next tool call), written one response at a time, then {LOOKUPS} lookups "
        "of the newest response. 'held' is what the backend reports (Redis MEMORY USAGE; SQLite: the "
        "values). 'whole history' is what storing each response's full history would cost instead. "
        f"A hit in the process cache costs {cache_hit_us():.2f} µs. "
        f"Python {platform.python_version()}, {platform.machine()}, {platform.system()}, loopback Redis.\n\n"
        + "\n".join(rows)
        + "\n"
    )
    out = ROOT / "bench" / "results" / "response_state.md"
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))

"""Closed-loop load from one aiohttp session: N workers, each sends its next request when the last ended.

Bounded twice: by a request count and by a time budget (workers stop taking new requests once it is
spent, and the result says how many were measured). Latency is per request, from just before the
POST to the end of the body; for streams the TTFT is the time to the first SSE event whose
``choices[0].delta`` carries non-empty ``content`` (or ``tool_calls``), not to the headers.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
import orjson

First = Literal["content", "tool_calls"]


@dataclass(frozen=True)
class Result:
    requests: int  # measured and successful
    errors: int
    wall: float  # seconds for the measured loop
    latency: list[float]  # seconds, whole request, sorted
    ttft: list[float]  # seconds, streams only, sorted
    truncated: bool  # the time budget ended the loop before the count

    @classmethod
    def merge(cls, parts: list[Result]) -> Result:
        """One result from loops of the same load run at different times (rounds)."""
        return cls(
            requests=sum(r.requests for r in parts),
            errors=sum(r.errors for r in parts),
            wall=sum(r.wall for r in parts),
            latency=sorted(x for r in parts for x in r.latency),
            ttft=sorted(x for r in parts for x in r.ttft),
            truncated=any(r.truncated for r in parts),
        )

    @property
    def rps(self) -> float:
        return self.requests / self.wall if self.wall > 0 else 0.0

    def p(self, q: float, ttft: bool = False) -> float:
        """Percentile q (0-100) in milliseconds; NaN without samples."""
        xs = self.ttft if ttft else self.latency
        if not xs:
            return float("nan")
        i = min(len(xs) - 1, max(0, round(q / 100 * (len(xs) - 1))))
        return xs[i] * 1000


class _Ticket:
    def __init__(self, count: int, stop_at: float) -> None:
        self.left = count
        self.stop_at = stop_at
        self.truncated = False

    def take(self) -> bool:
        if self.left <= 0:
            return False
        if time.monotonic() >= self.stop_at:
            self.truncated = True
            return False
        self.left -= 1
        return True


async def _one_json(session: aiohttp.ClientSession, url: str, payload: bytes) -> float | None:
    t0 = time.perf_counter()
    async with session.post(url, data=payload) as resp:
        body = await resp.read()
        ok = resp.status == 200 and b'"choices"' in body
    return time.perf_counter() - t0 if ok else None


def _first_hit(line: bytes, first: First) -> bool:
    if not line.startswith(b"data:"):
        return False
    data = line[5:].strip()
    if not data or data == b"[DONE]":
        return False
    try:
        event: Any = orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    choices = event.get("choices") if isinstance(event, dict) else None
    if not choices or not isinstance(choices[0], dict):
        return False
    delta = choices[0].get("delta") or {}
    return bool(delta.get(first))


async def _one_stream(
    session: aiohttp.ClientSession, url: str, payload: bytes, first: First
) -> tuple[float, float] | None:
    t0 = time.perf_counter()
    ttft: float | None = None
    async with session.post(url, data=payload) as resp:
        if resp.status != 200:
            await resp.read()
            return None
        async for line in resp.content:
            if ttft is None and _first_hit(line, first):
                ttft = time.perf_counter() - t0
    if ttft is None:
        return None
    return ttft, time.perf_counter() - t0


async def closed_loop(
    session: aiohttp.ClientSession,
    url: str,
    payload: bytes,
    *,
    concurrency: int,
    count: int,
    budget: float,
    stream: First | None = None,
) -> Result:
    """`count` requests from `concurrency` workers; stop early when `budget` seconds are spent."""
    tickets = _Ticket(count, time.monotonic() + budget)
    latency: list[float] = []
    ttft: list[float] = []
    errors = 0

    async def worker() -> None:
        nonlocal errors
        while tickets.take():
            try:
                if stream is None:
                    took = await _one_json(session, url, payload)
                    if took is None:
                        errors += 1
                    else:
                        latency.append(took)
                else:
                    got = await _one_stream(session, url, payload, stream)
                    if got is None:
                        errors += 1
                    else:
                        ttft.append(got[0])
                        latency.append(got[1])
            except (aiohttp.ClientError, TimeoutError):
                errors += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - t0
    return Result(len(latency), errors, wall, sorted(latency), sorted(ttft), tickets.truncated)

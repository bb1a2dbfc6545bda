"""The legitimate load of `bench.abuse`: chat calls with a tool, JSON and SSE alternately, and what came of them.

Two ways to call (`Load`):

- open loop (the default): calls start at `rate` per second — Poisson arrivals (seeded), or evenly
  spaced — whether or not earlier ones have ended, as independent agents would call a shared proxy.
  A call's latency runs from its *scheduled* start, so a proxy (or a bench loop) that falls behind
  is charged for the wait too (no coordinated omission). At most `max_inflight` calls are open at
  once: an arrival beyond that is not sent and counts as a failure ("over max in-flight").
- closed loops: `clients` agents, each calling back to back. They load the proxy as much as it can
  take, which is how `capacity()` measures it; as the load of a phase, every CPU-millisecond an
  attack costs the proxy then shows up in the legitimate calls' latency one for one.

Every call has a `CALL_TIMEOUT`; keep-alive connections, at most `max_inflight` of them. Calls
scheduled before a phase's `since` (its warm-up, while the connections are opened) are made but
not counted.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

import aiohttp

CALL_TIMEOUT = 10.0
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
OVER_INFLIGHT = "over max in-flight"


@dataclass(frozen=True)
class Load:
    """How the legitimate agents call: an open loop at `rate` calls/s, or (`rate` 0) `clients` closed loops."""

    clients: int = 4
    rate: float = 0.0
    arrivals: str = "poisson"  # or "even"
    max_inflight: int = 64
    seed: int = 1

    @property
    def open(self) -> bool:
        return self.rate > 0

    def text(self) -> str:
        if not self.open:
            return f"{self.clients} closed loops (each call right after the last)"
        return f"an open loop: {self.rate:.0f} calls/s, {self.arrivals} arrivals, at most {self.max_inflight} in flight"


@dataclass
class Phase:
    name: str
    latencies: list[float] = field(default_factory=list)
    failures: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    rss: float = 0.0
    tripped: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)  # cores on average: proxy, agents, attacker, fakes, others
    profile: list[str] = field(default_factory=list)  # markdown (--profile)
    wall: float = 0.0  # seconds measured
    since: float = 0.0  # the loop time from which calls are counted (those scheduled earlier: warm-up)

    def ms_per_call(self) -> float:
        """The proxy's CPU per legitimate call served (ms)."""
        return 1000 * self.cpu["proxy"] * self.wall / len(self.latencies) if self.latencies else float("nan")

    @property
    def calls(self) -> int:
        return len(self.latencies) + self.failures

    def rate(self) -> float:
        """Legitimate calls served per second."""
        return len(self.latencies) / self.wall if self.wall else float("nan")

    def p(self, q: float) -> float:
        xs = sorted(self.latencies)
        return xs[min(len(xs) - 1, int(q / 100 * len(xs)))] * 1000 if xs else float("nan")

    def fail(self, why: str) -> None:
        self.failures += 1
        self.errors[why] = self.errors.get(why, 0) + 1


async def call(session: aiohttp.ClientSession, url: str, phase: Phase, stream: bool, scheduled: float) -> None:
    """One chat call with a tool; its latency (from `scheduled`, the loop's clock) or why it failed."""
    loop = asyncio.get_running_loop()
    body = {"model": "auto", "messages": USER, "tools": [TOOL], "stream": stream}
    try:
        async with asyncio.timeout(CALL_TIMEOUT), session.post(url, json=body) as r:
            raw = await r.read()
        ok = r.status == 200 and (not stream or raw.rstrip().endswith(b"data: [DONE]"))
        why = f"HTTP {r.status}" if r.status != 200 else "stream without [DONE]"
    except (aiohttp.ClientError, TimeoutError) as exc:
        ok, why = False, type(exc).__name__
    if scheduled < phase.since:
        return  # warm-up
    if ok:
        phase.latencies.append(loop.time() - scheduled)
    else:
        phase.fail(why)


async def closed(session: aiohttp.ClientSession, url: str, phase: Phase, stop: asyncio.Event, n: int) -> None:
    """One agent: calls back to back."""
    loop = asyncio.get_running_loop()
    i = n
    while not stop.is_set():
        i += 1
        await call(session, url, phase, i % 2 == 0, loop.time())


async def opened(session: aiohttp.ClientSession, url: str, phase: Phase, stop: asyncio.Event, load: Load) -> None:
    """Calls started at `load.rate` per second until `stop`, each from its scheduled time; then the
    ones still open are awaited (each bounded by CALL_TIMEOUT)."""
    loop = asyncio.get_running_loop()
    rng = random.Random(load.seed)
    tasks: set[asyncio.Task[None]] = set()
    at = loop.time()
    i = 0
    while True:
        at += rng.expovariate(load.rate) if load.arrivals == "poisson" else 1 / load.rate
        if (wait := at - loop.time()) > 0:
            await asyncio.sleep(wait)
        if stop.is_set():
            break
        i += 1
        if len(tasks) >= load.max_inflight:
            if at >= phase.since:
                phase.fail(OVER_INFLIGHT)
            continue
        task = asyncio.create_task(call(session, url, phase, i % 2 == 0, at))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks)


async def run(url: str, phase: Phase, stop: asyncio.Event, load: Load) -> None:
    """The legitimate load until `stop`, on a session of its own (keep-alive connections)."""
    limit = load.max_inflight if load.open else load.clients
    connector = aiohttp.TCPConnector(limit=limit, keepalive_timeout=4)  # under the proxy's keep_alive_timeout (5 s)
    async with aiohttp.ClientSession(connector=connector) as session:
        if load.open:
            await opened(session, url, phase, stop, load)
        else:
            await asyncio.gather(*(closed(session, url, phase, stop, n) for n in range(load.clients)))

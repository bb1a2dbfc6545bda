"""The attacks of `bench.abuse`: each runs until `stop`, bounded in count, in a process of its own.

`ATTACKS` maps an attack's name to a factory: given the proxy's base URL, a coroutine function that
attacks until its `stop` event is set. `attacker()` runs one in a process of its own (spawned by
bench/abuse.py), so the legitimate agents' event loop stays free.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable

import aiohttp
import orjson

from bench.abuse_load import CALL_TIMEOUT, TOOL, USER


async def paced(
    rate: float, inflight: int, stop: asyncio.Event, one: Callable[[aiohttp.ClientSession], Awaitable[None]]
) -> None:
    """`one` started `rate` times a second until `stop`, at most `inflight` at a time (a start with
    none free is skipped). An attack made of calls is measured by what their content costs the
    proxy, not by their volume: a flood of ordinary calls is overload, which no limit on content can
    stop (`max_concurrency` answers it with 503s) — and once a hostile tier's breaker opens, an
    unpaced attacker's calls are just that, escalated to a healthy tier as fast as it answers."""
    timeout = aiohttp.ClientTimeout(total=CALL_TIMEOUT)
    room = asyncio.Semaphore(inflight)

    async def guarded(session: aiohttp.ClientSession) -> None:
        try:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                await one(session)
        finally:
            room.release()

    async with aiohttp.ClientSession(timeout=timeout) as session:
        running: set[asyncio.Task[None]] = set()
        loop = asyncio.get_running_loop()
        start, n = loop.time(), 0
        while not stop.is_set():
            n += 1
            await asyncio.sleep(max(0.0, start + n / rate - loop.time()))
            if room.locked():
                continue  # none free: this one is skipped
            await room.acquire()
            task = asyncio.create_task(guarded(session))
            running.add(task)
            task.add_done_callback(running.discard)
        await asyncio.gather(*running)


ENDLESS_RATE = 20.0  # calls a second to the endless tiers, at most 4 at a time


def endless(base: str, stream: bool) -> Callable[[asyncio.Event], Awaitable[None]]:
    async def one(session: aiohttp.ClientSession) -> None:
        body = {"model": "auto", "messages": USER, "tools": [TOOL], "stream": stream}
        attack = {"x-attack": "endless-sse" if stream else "endless"}
        async with session.post(base + "/v1/chat/completions", json=body, headers=attack) as r:
            await r.read()

    return lambda stop: paced(ENDLESS_RATE, 4, stop, one)


ABANDON_RATE = 50.0  # calls a second given up after 0.3 s: about 15 open at a time


def abandon(base: str) -> Callable[[asyncio.Event], Awaitable[None]]:
    """Calls to the hanging tier given up after 0.3 s, `ABANDON_RATE` a second: paced, as the other
    attacks made of calls, at a volume that is not overload by itself. Each abandoned call costs the
    proxy about what an answered one does (a new connection from the client and one to the tier,
    which cannot be reused once a request on it is cut): at 160 a second, a quarter of the proxy's
    capacity here, that volume alone tripled the legitimate p99 — as many ordinary calls would.
    Fifty callers in lockstep (the figures before those) started fifty calls in the same millisecond
    every 0.3 s: a burst no limit on abandoning can tell from fifty agents starting together."""

    async def one(session: aiohttp.ClientSession) -> None:
        body = {"model": "auto", "messages": USER}
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.3):
                async with session.post(base + "/v1/chat/completions", json=body, headers={"x-attack": "hang"}) as r:
                    await r.read()

    return lambda stop: paced(ABANDON_RATE, 64, stop, one)


HOSTILE_RATE = 100.0  # hostile-schema calls a second: about a tenth of one proxy's capacity here


def hostile_schemas(base: str) -> Callable[[asyncio.Event], Awaitable[None]]:
    """Calls whose tool schema holds a catastrophic-backtracking pattern (checked in linear time)
    or one too costly to compile (refused with 400), alternately, at `HOSTILE_RATE`."""
    patterns = ["^(a+)+$", r"[\w\W]{50000}"]
    count = 0

    async def one(session: aiohttp.ClientSession) -> None:
        nonlocal count
        count += 1
        schema = {"type": "object", "properties": {"city": {"type": "string", "pattern": patterns[count % 2]}}}
        tool = {"type": "function", "function": {"name": "get_weather", "parameters": schema}}
        messages = [{"role": "user", "content": "a" * 30 + "!"}]
        body = {"model": "auto", "messages": messages, "tools": [tool]}
        async with session.post(base + "/v1/chat/completions", json=body) as r:
            await r.read()

    return lambda stop: paced(HOSTILE_RATE, 64, stop, one)


def sockets(base: str, count: int, send: bytes, every: float) -> Callable[[asyncio.Event], Awaitable[None]]:
    """`count` connections, each sending `send` one byte every `every` seconds (nothing if empty),
    reconnecting when the proxy closes them."""
    host, port = base.removeprefix("http://").split(":")

    async def one(stop: asyncio.Event) -> None:
        while not stop.is_set():
            writer = None
            try:
                reader, writer = await asyncio.open_connection(host, int(port))
                for i in range(len(send)) if send else iter(int, 1):
                    if stop.is_set() or reader.at_eof():
                        break
                    if send:
                        writer.write(send[i : i + 1])
                        await writer.drain()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(every):
                            if await reader.read(1024) == b"":
                                break
            except OSError:
                await asyncio.sleep(0.5)
            finally:
                if writer is not None:
                    writer.close()

    async def run(stop: asyncio.Event) -> None:
        tasks = []
        for _ in range(count):
            tasks.append(asyncio.create_task(one(stop)))
            await asyncio.sleep(0.002)  # a ramp, not one burst of SYNs
        await asyncio.gather(*tasks)

    return run


SLOW_HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n" + b"x-pad: " + b"a" * 200 + b"\r\n"
SLOW_BODY_HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"


def slow_bodies(base: str, count: int) -> Callable[[asyncio.Event], Awaitable[None]]:
    body = orjson.dumps({"model": "auto", "messages": USER}) + b" " * 200
    head = SLOW_BODY_HEAD + b"content-length: %d\r\n\r\n" % len(body)
    host, port = base.removeprefix("http://").split(":")

    async def run(stop: asyncio.Event) -> None:  # the headers at once, then the body at 1 byte/s
        async def one() -> None:
            while not stop.is_set():
                writer = None
                try:
                    reader, writer = await asyncio.open_connection(host, int(port))
                    writer.write(head)
                    for i in range(len(body)):
                        if stop.is_set() or reader.at_eof():
                            break
                        writer.write(body[i : i + 1])
                        await writer.drain()
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(1.0):
                                if await reader.read(1024) == b"":
                                    break
                except OSError:
                    await asyncio.sleep(0.5)
                finally:
                    if writer is not None:
                        writer.close()

        tasks = []
        for _ in range(count):
            tasks.append(asyncio.create_task(one()))
            await asyncio.sleep(0.002)
        await asyncio.gather(*tasks)

    return run


ATTACKS: dict[str, Callable[[str], Callable[[asyncio.Event], Awaitable[None]]]] = {
    "endless-json": lambda base: endless(base, stream=False),
    "endless-args": lambda base: endless(base, stream=True),
    "slow-headers": lambda base: sockets(base, 300, SLOW_HEAD * 4, 1.0),
    "silent": lambda base: sockets(base, 1100, b"", 1.0),
    "slow-bodies": lambda base: slow_bodies(base, 520),
    "abandon": abandon,
    "hostile-schemas": hostile_schemas,
}

WHAT = {  # each attack in a line, for the report
    "endless-json": f"{ENDLESS_RATE:g} calls/s (at most 4 at a time) to a tier whose JSON answer never ends",
    "endless-args": f"{ENDLESS_RATE:g} calls/s (at most 4 at a time), streams whose tool-call arguments never end",
    "slow-headers": "300 connections sending their headers at 1 byte/s, reconnecting when closed",
    "silent": "1,100 connections that send nothing (over the open-file limit), reconnecting when closed",
    "slow-bodies": "520 clients sending their body at 1 byte/s, reconnecting when closed",
    "abandon": f"{ABANDON_RATE:g} calls/s (at most 64 at a time) to a hanging tier, each given up after 0.3 s",
    "hostile-schemas": f"{HOSTILE_RATE:g} calls/s offering `^(a+)+$` or a pattern too large to compile, alternately",
}


def attacker(name: str, base: str, seconds: float, nice: int) -> None:
    """One attack for `seconds`, in a process of its own (the legitimate agents' loop stays free),
    at `nice` (the CPUs it may use are the bench process's, inherited)."""
    os.nice(nice)

    async def run() -> None:
        stop = asyncio.Event()
        attack = asyncio.ensure_future(ATTACKS[name](base)(stop))
        await asyncio.sleep(seconds)
        stop.set()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(15):
                await attack
        attack.cancel()

    asyncio.run(run())

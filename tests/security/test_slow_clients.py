"""Slow, silent and vanishing clients, on real sockets against one proxy with small limits.

    slow headers      one byte at a time: 408 and closed at `header_timeout`
    huge headers      431 and closed past `max_header_bytes`
    silent sockets    held by the kernel, not the server, until they send (`defer_accept`): many
                      more than `max_connections` cost nothing; handed over after the deferral, they
                      get 408 at `header_timeout`. Where the kernel cannot hold them (defer_accept
                      0, or past it): beyond `max_connections` the longest-idle one is closed for a
                      new one, and legitimate calls still get through; with no idle one to close,
                      503 at once
    slow bodies       they hold no place in flight (calls still pass at max_concurrency); 408 at
                      `body_timeout`
    vanishing client  a call on a hanging tier, abandoned: within 1 s its upstream connection is
                      closed and its place in flight given back, on every HTTP transport; the same
                      for a stream abandoned after its first bytes

Each limit that trips is counted in `router_limits_tripped{limit}`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from router.app import create_app
from router.fake import FakeConfig
from router.settings import Settings
from tests.api.helpers import TOOLS, USER, post
from tests.conftest import policy_text, start_uvicorn, stop_uvicorn, upstream_app
from tests.fault.test_hostile_upstream import tripped

# defer_accept 0: the server itself sees silent connections (the tests of defer_accept turn it on)
LIMITS = {"header_timeout": 0.5, "body_timeout": 1.0, "max_header_bytes": 4096, "defer_accept": 0}
REQUEST = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n"
SLOW_BODY_HEAD = REQUEST + b"content-type: application/json\r\n"


@contextlib.asynccontextmanager
async def raw(base: str) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    host, port = base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def until(condition: Callable[[], bool]) -> None:
    """Wait (under the caller's timeout) until `condition()` holds."""
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0.01)


async def closed_with(reader: asyncio.StreamReader, within: float) -> bytes:
    """Everything the server sent until it closed the connection (fails if it stays open)."""
    async with asyncio.timeout(within):
        return await reader.read()


async def calls_pass(url: str, n: int) -> None:
    for _ in range(n):
        answer = await post(url + "/chat/completions", {"model": "auto", "messages": USER})
        assert answer.status == 200, answer.body


@pytest.fixture
async def proxy(start_fake_, proxy_) -> Any:
    fast = await start_fake_(FakeConfig(seed=1))
    return await proxy_(policy_text(fast.url), **LIMITS)


async def test_slow_headers_are_closed_at_the_header_timeout(proxy) -> None:
    async with raw(proxy.base) as (reader, writer):
        drip = asyncio.create_task(_drip(writer, REQUEST * 100, every=0.05))
        try:
            answer = await closed_with(reader, 3)
        finally:
            drip.cancel()
    assert answer.startswith(b"HTTP/1.1 408")
    assert await tripped(proxy.base, "header_timeout") == 1


async def _drip(writer: asyncio.StreamWriter, data: bytes, every: float) -> None:
    with contextlib.suppress(ConnectionError):
        for i in range(len(data)):
            writer.write(data[i : i + 1])
            await writer.drain()
            await asyncio.sleep(every)


async def test_a_silent_connection_is_closed_at_the_header_timeout(proxy) -> None:
    async with raw(proxy.base) as (reader, _):
        assert (await closed_with(reader, 3)).startswith(b"HTTP/1.1 408")


async def test_a_kept_alive_connection_that_starts_a_request_slowly_is_closed(proxy) -> None:
    async with raw(proxy.base) as (reader, writer):
        writer.write(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        first = await reader.readuntil(b"}")  # /healthz's JSON body
        assert first.startswith(b"HTTP/1.1 200")
        writer.write(b"GET /hea")  # then nothing more
        assert (await closed_with(reader, 3)).startswith(b"HTTP/1.1 408")


async def test_huge_headers_are_refused(proxy) -> None:
    async with raw(proxy.base) as (reader, writer):
        writer.write(REQUEST + b"x-pad: " + b"a" * 8192 + b"\r\n")
        assert (await closed_with(reader, 3)).startswith(b"HTTP/1.1 431")
    assert await tripped(proxy.base, "header_too_large") == 1


async def test_silent_connections_over_the_cap_make_room_for_real_calls(start_fake_, proxy_) -> None:
    fast = await start_fake_(FakeConfig(seed=1))
    proxy = await proxy_(policy_text(fast.url), max_connections=8, header_timeout=30, defer_accept=0)
    async with contextlib.AsyncExitStack() as stack:
        silent = [await stack.enter_async_context(raw(proxy.base)) for _ in range(20)]
        await asyncio.sleep(0.1)
        await calls_pass(proxy.url, 5)
        closed = 0
        for reader, _ in silent:
            with contextlib.suppress(TimeoutError):
                await closed_with(reader, 0.05)
                closed += 1
        assert closed >= 12  # at most 8 connections open at a time
    assert await tripped(proxy.base, "connections_evicted") >= 12


@pytest.mark.skipif(not hasattr(socket, "TCP_DEFER_ACCEPT"), reason="Linux's TCP_DEFER_ACCEPT")
async def test_silent_connections_stay_with_the_kernel_and_cost_no_place(start_fake_, proxy_) -> None:
    """Far more silent connections than `max_connections`: none reaches the server (nothing is
    evicted, no connection is open in it), calls on new connections pass; after the deferral (1 s
    asks the kernel for one SYN-ACK retry) they are handed over and closed at `header_timeout`."""
    fast = await start_fake_(FakeConfig(seed=1))
    proxy = await proxy_(policy_text(fast.url), max_connections=8, header_timeout=0.5, defer_accept=1)
    async with contextlib.AsyncExitStack() as stack:
        silent = [await stack.enter_async_context(raw(proxy.base)) for _ in range(40)]
        await asyncio.sleep(0.2)
        await calls_pass(proxy.url, 5)
        assert await tripped(proxy.base, "connections_evicted") == 0
        assert await tripped(proxy.base, "connections_refused") == 0
        closed = await asyncio.gather(*(closed_with(reader, 6) for reader, _ in silent))
    assert all(answer.startswith(b"HTTP/1.1 408") for answer in closed)
    # handed over at once, 40 at a cap of 8: the ones over it were closed for newer ones
    assert await tripped(proxy.base, "header_timeout") + await tripped(proxy.base, "connections_evicted") == 40


async def test_the_connection_closed_for_a_new_one_is_the_longest_silent(start_fake_, proxy_) -> None:
    """At the cap, connections that never sent a request go first, oldest first; a kept-alive one
    that was served waits until none of them is left, and one in the middle of a request never goes."""
    fast = await start_fake_(FakeConfig(seed=1))
    proxy = await proxy_(policy_text(fast.url), max_connections=4, header_timeout=30, defer_accept=0)

    async def is_open(reader: asyncio.StreamReader) -> bool:
        with contextlib.suppress(TimeoutError):
            await closed_with(reader, 0.1)
            return False
        return True

    async with contextlib.AsyncExitStack() as stack:
        kept_r, kept_w = await stack.enter_async_context(raw(proxy.base))
        kept_w.write(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        assert (await kept_r.readuntil(b"}")).startswith(b"HTTP/1.1 200")  # served, then kept alive
        busy_r, busy_w = await stack.enter_async_context(raw(proxy.base))
        busy_w.write(SLOW_BODY_HEAD + b"content-length: 100\r\n\r\n{")  # a request whose body is coming
        silent = []
        for _ in range(2):
            silent.append(await stack.enter_async_context(raw(proxy.base)))
            await asyncio.sleep(0.05)  # in this order
        await asyncio.sleep(0.1)
        newer = [await stack.enter_async_context(raw(proxy.base)) for _ in range(2)]
        await asyncio.sleep(0.1)
        # two new connections closed the two silent ones; the served and the busy one stay
        assert [await is_open(r) for r, _ in silent] == [False, False]
        assert await is_open(kept_r) and await is_open(busy_r)
        assert all([await is_open(r) for r, _ in newer])
        await stack.enter_async_context(raw(proxy.base))  # the newer ones are silent too: the older goes
        await asyncio.sleep(0.1)
        assert [await is_open(r) for r, _ in newer] == [False, True]
        assert await is_open(kept_r) and await is_open(busy_r)
    assert await tripped(proxy.base, "connections_evicted") == 3


async def test_with_no_idle_connection_to_close_a_new_one_gets_503(start_fake_, proxy_) -> None:
    slow = await start_fake_(FakeConfig(seed=1, delay_ms=3000))
    proxy = await proxy_(policy_text(slow.url), max_connections=3, defer_accept=0)
    calls = [
        asyncio.create_task(post(proxy.url + "/chat/completions", {"model": "auto", "messages": USER}))
        for _ in range(3)
    ]
    await asyncio.sleep(0.5)  # three calls in flight on three connections: none idle
    async with raw(proxy.base) as (reader, _):
        answer = await closed_with(reader, 1)
    assert answer.startswith(b"HTTP/1.1 503") and b"retry-after: 1" in answer.lower()
    for call in calls:
        call.cancel()
    await asyncio.gather(*calls, return_exceptions=True)
    await asyncio.sleep(0.2)  # the three leave; /metrics can be read again
    assert await tripped(proxy.base, "connections_refused") >= 1


async def test_slow_bodies_hold_no_place_in_flight(start_fake_, proxy_) -> None:
    fast = await start_fake_(FakeConfig(seed=1))
    proxy = await proxy_(policy_text(fast.url), max_concurrency=2, **LIMITS)
    head = REQUEST + b"content-type: application/json\r\ncontent-length: 1000\r\n\r\n{"
    async with contextlib.AsyncExitStack() as stack:
        slow = [await stack.enter_async_context(raw(proxy.base)) for _ in range(6)]
        for _, writer in slow:
            writer.write(head)
        drips = [asyncio.create_task(_drip(w, b" " * 1000, every=0.1)) for _, w in slow]
        await asyncio.sleep(0.2)
        answers = [await post(proxy.url + "/chat/completions", {"model": "auto", "messages": USER}) for _ in range(4)]
        assert [a.status for a in answers] == [200] * 4
        ends = [await closed_with(reader, 3) for reader, _ in slow]
        for drip in drips:
            drip.cancel()
    assert all(end.startswith(b"HTTP/1.1 408") for end in ends), ends
    assert await tripped(proxy.base, "body_timeout") == 6
    assert proxy.runtime.inflight == 0


@pytest.mark.parametrize("size, part, every", [(200, 10, 0.02), (300_000, 16 * 1024, 0.01)])
async def test_a_body_that_arrives_in_parts_is_read_whole(proxy, size: int, part: int, every: float) -> None:
    """The app is woken once the body is in, not per part (`BodyArrival`): a body dripped in small
    parts, and one larger than uvicorn buffers before it pauses reading (64 KiB), are read whole."""
    body = orjson.dumps({"model": "auto", "messages": USER, "metadata": {"pad": "x" * size}})
    head = REQUEST + b"content-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)
    async with raw(proxy.base) as (reader, writer):
        writer.write(head)
        for i in range(0, len(body), part):
            writer.write(body[i : i + part])
            await writer.drain()
            await asyncio.sleep(every)
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert await tripped(proxy.base, "body_timeout") == 0


async def test_a_client_that_leaves_mid_body_leaves_nothing_behind(proxy) -> None:
    async with raw(proxy.base) as (_, writer):
        writer.write(REQUEST + b"content-type: application/json\r\ncontent-length: 1000\r\n\r\n{")
        await writer.drain()
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.2)
    assert proxy.runtime.inflight == 0 and not proxy.runtime.open.tasks
    answer = await post(proxy.url + "/chat/completions", {"model": "auto", "messages": USER})
    assert answer.status == 200


ABANDONED = [
    ("chat-json", "/chat/completions", {"tools": TOOLS}),
    ("chat-sse", "/chat/completions", {"tools": TOOLS, "stream": True}),
    ("messages-json", "/messages", {"max_tokens": 64}),
    ("responses-json", "/responses", {}),
    ("responses-sse", "/responses", {"stream": True}),
]


@contextlib.asynccontextmanager
async def hanging_upstream() -> AsyncIterator[tuple[str, list[asyncio.Event]]]:
    """A tier whose every call hangs until the router closes its connection; each call's event is set
    then (aiohttp cancels the handler of a closed connection)."""
    calls: list[asyncio.Event] = []

    async def chat(request: web.Request) -> web.StreamResponse:
        gone = asyncio.Event()
        calls.append(gone)
        try:
            await asyncio.sleep(30)
        finally:
            gone.set()
        return web.Response(status=500)

    runner = web.AppRunner(upstream_app({"/v1/chat/completions": chat}), handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1", calls
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(("path", "extra"), [a[1:] for a in ABANDONED], ids=[a[0] for a in ABANDONED])
async def test_an_abandoned_call_cancels_its_upstream_call(proxy_, path: str, extra: dict) -> None:
    async with hanging_upstream() as (url, upstream_calls):
        routes = "routes:\n  - {name: all, use: fast}\n"
        proxy = await proxy_(policy_text(url, routes=routes), max_concurrency=1)
        messages = USER if path != "/responses" else None
        body = {"model": "auto", **({"messages": messages} if messages else {"input": "hi"}), **extra}
        call = asyncio.create_task(post(proxy.url + path, body))
        await asyncio.sleep(0.5)
        assert proxy.runtime.inflight == 1 and len(upstream_calls) == 1  # the call hangs upstream
        call.cancel()  # the client goes away
        with contextlib.suppress(asyncio.CancelledError):
            await call
        async with asyncio.timeout(1.0):  # the upstream call is cancelled within a second
            await upstream_calls[0].wait()
            await until(lambda: proxy.runtime.inflight == 0)
        assert await tripped(proxy.base, "client_gone") == 1
        after = asyncio.create_task(post(proxy.url + path, body))  # admitted, not 503: it reaches the tier
        async with asyncio.timeout(2):
            await until(lambda: len(upstream_calls) == 2)
        after.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await after


async def test_under_another_server_an_abandoned_call_cancels_its_upstream_call(tmp_path: Path) -> None:
    """uvicorn's own protocol (not the router's, which tells a call's connection is lost): the call's
    own watch sees the client leave."""
    async with hanging_upstream() as (url, upstream_calls):
        path = tmp_path / "policy.yaml"
        path.write_text(policy_text(url, routes="routes:\n  - {name: all, use: fast}\n"))
        app = create_app(Settings(policy=path, reload_policy=False))
        server, task, base = await start_uvicorn(app)
        try:
            call = asyncio.create_task(post(base + "/v1/chat/completions", {"model": "auto", "messages": USER}))
            await asyncio.sleep(0.5)
            assert len(upstream_calls) == 1  # the call hangs upstream
            call.cancel()  # the client goes away
            with contextlib.suppress(asyncio.CancelledError):
                await call
            async with asyncio.timeout(1.0):  # the upstream call is cancelled within a second
                await upstream_calls[0].wait()
                await until(lambda: app.state.runtime.inflight == 0)
            assert await tripped(base, "client_gone") == 1
        finally:
            await stop_uvicorn(server, task)


@contextlib.asynccontextmanager
async def stalling_upstream() -> AsyncIterator[tuple[str, list[asyncio.Event]]]:
    """A tier that streams one text delta, then sends nothing more until the router closes its
    connection; each call's event is set then."""
    calls: list[asyncio.Event] = []

    async def chat(request: web.Request) -> web.StreamResponse:
        gone = asyncio.Event()
        calls.append(gone)
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        delta = {"role": "assistant", "content": "Hello"}
        chunk = {"id": "c1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
        await resp.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
        try:
            await asyncio.sleep(30)
        finally:
            gone.set()
        return resp

    runner = web.AppRunner(upstream_app({"/v1/chat/completions": chat}), handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1", calls
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("path", ["/chat/completions", "/responses", "/messages"])
async def test_a_stream_abandoned_after_its_first_bytes_cancels_its_upstream_call(proxy_, path: str) -> None:
    async with stalling_upstream() as (url, upstream_calls):
        proxy = await proxy_(policy_text(url, routes="routes:\n  - {name: all, use: fast}\n"), max_concurrency=1)
        body = {"model": "auto", "stream": True, "max_tokens": 64}
        body |= {"input": "hi"} if path == "/responses" else {"messages": USER}
        async with raw(proxy.base) as (reader, writer):
            data = orjson.dumps(body)
            head = f"POST /v1{path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            writer.write(head.encode() + b"content-length: %d\r\n\r\n" % len(data) + data)
            async with asyncio.timeout(5):
                await reader.readuntil(b"Hello")  # the stream has started
            assert proxy.runtime.inflight == 1
        # the client has gone: within a second the upstream call is closed and its place given back
        async with asyncio.timeout(1.0):
            await upstream_calls[0].wait()
            await until(lambda: proxy.runtime.inflight == 0)
        assert await tripped(proxy.base, "client_gone") == 1

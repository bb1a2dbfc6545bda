"""SIGTERM with streams in flight: those still open at the grace get a proper ending in their API's
shape, and the body is terminated (not cut):

    chat SSE         a `data: {"error": {..., "code": "shutting_down"}}` frame, the trailer, end of body
    Messages SSE     an `event: error` (`overloaded_error`), the trailer, end of body
    Responses SSE    an `error` event (`shutting_down`), the trailer, end of body
    WebSocket        an `error` event, then close 1012 (service restart)
    JSON             a call not yet answered gets a 503 `shutting_down` in its API's shape

Each one ended is counted (router_limits_tripped{limit="shutdown_cut"}); the log has no traceback.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import websockets

from router.fake import FakeConfig
from tests.api.helpers import USER
from tests.conftest import free_socket, policy_text

SLOW = FakeConfig(seed=1, words=2000, chunk_delay_ms=50)  # a stream that lasts ~100 s


async def open_stream(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> aiohttp.ClientResponse:
    resp = await session.post(url, json=body)
    assert resp.status == 200
    await resp.content.readany()  # the stream has started
    return resp


async def open_ws(base: str) -> Any:
    ws = await websockets.connect(base.replace("http://", "ws://") + "/v1/responses")
    await ws.send(orjson.dumps({"type": "response.create", "model": "auto", "input": "hi"}).decode())
    for _ in range(5):  # created, in_progress, then output
        await ws.recv()
    return ws


async def ws_ending(ws: Any) -> tuple[list[dict[str, Any]], int | None]:
    events = []
    try:
        async with asyncio.timeout(10):
            while True:
                events.append(orjson.loads(await ws.recv()))
    except websockets.ConnectionClosed as closed:
        return events, closed.rcvd.code if closed.rcvd else None
    raise AssertionError("the WebSocket was not closed")


async def open_everything(base: str) -> tuple[aiohttp.ClientSession, dict[str, aiohttp.ClientResponse], Any, Any]:
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20))
    bodies = {
        "chat": ("/v1/chat/completions", {"messages": USER}),
        "messages": ("/v1/messages", {"max_tokens": 64, "messages": USER}),
        "responses": ("/v1/responses", {"input": "hi"}),
    }
    streams = {
        name: await open_stream(session, base + path, {"model": "auto", "stream": True, **body})
        for name, (path, body) in bodies.items()
    }
    ws = await open_ws(base)
    pending = asyncio.create_task(session.post(base + "/v1/chat/completions", json={"model": "slow", "messages": USER}))
    return session, streams, ws, pending


async def assert_ended(streams: dict[str, aiohttp.ClientResponse], ws: Any, pending: Any) -> None:
    ends = {}
    for name, resp in streams.items():
        async with asyncio.timeout(10):
            ends[name] = await resp.content.read()  # ends cleanly: a terminated chunked body
    chat_events = [line for line in ends["chat"].split(b"\n") if line.startswith(b"data: ")]
    assert orjson.loads(chat_events[-1][6:])["error"]["code"] == "shutting_down"
    assert b"event: error\ndata: " in ends["messages"]
    assert b'"type":"overloaded_error"' in ends["messages"].split(b"event: error\ndata: ")[-1]
    assert b"event: error\ndata: " in ends["responses"] and b'"code":"shutting_down"' in ends["responses"]
    for raw in ends.values():
        assert b": router {" in raw  # the trailer after the error
    events, code = await ws_ending(ws)
    assert events and events[-1]["type"] == "error" and events[-1]["code"] == "shutting_down"
    assert code == 1012
    answer = await pending
    assert answer.status == 503 and (await answer.json())["error"]["code"] == "shutting_down"


def routes() -> str:
    return "routes:\n  - {name: slow, when: {model: [slow]}, use: full}\n  - {name: all, use: fast}\n"


async def test_sigterm_ends_open_streams_in_each_api_shape(start_fake_, tmp_path: Path) -> None:
    fast = await start_fake_(SLOW)
    full = await start_fake_(FakeConfig(seed=2, delay_ms=60_000))  # a JSON call that never gets its answer
    policy = tmp_path / "policy.yaml"
    policy.write_text(policy_text(fast.url, full.url, routes=routes()))
    sock = free_socket()
    port = sock.getsockname()[1]
    sock.close()
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).parents[2]),
        "AGENT_ROUTER_SHUTDOWN_GRACE": "2",
        "AGENT_ROUTER_RELOAD_POLICY": "false",
    }
    cmd = [sys.executable, "-m", "router", "serve", "--policy", str(policy), "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # noqa: ASYNC220
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as probe:
            for _ in range(200):
                try:
                    async with probe.get(base + "/readyz") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.05)
        session, streams, ws, pending = await open_everything(base)
        await asyncio.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        try:
            await assert_ended(streams, ws, pending)
        finally:
            await session.close()
        returncode = await asyncio.to_thread(proc.wait, 15)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = proc.stdout.read().decode() if proc.stdout else ""
    assert returncode in (0, -signal.SIGTERM), log  # uvicorn re-raises the signal once it has shut down
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log
    assert "ending 5 call(s) and stream(s) still open" in log, log


async def test_each_ending_is_counted(start_fake_, proxy_) -> None:
    fast = await start_fake_(SLOW)
    full = await start_fake_(FakeConfig(seed=2, delay_ms=60_000))
    proxy = await proxy_(policy_text(fast.url, full.url, routes=routes()), shutdown_grace=1.0)
    session, streams, ws, pending = await open_everything(proxy.base)
    stopping = asyncio.create_task(proxy.stop())
    try:
        await assert_ended(streams, ws, pending)
    finally:
        await session.close()
    await stopping
    assert proxy.runtime.metrics.limits.labels("shutdown_cut")._value.get() == 5

"""How a WebSocket-mode connection ends, against real servers: a client gone mid-turn, a drain, and
an upstream socket lost before its answer.

client gone   20 sockets at once, each reset (TCP RST) mid-stream: every upstream stream is
              hung up on within 2 s (the fake counts the answers it is streaming), round after round
"""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Any

import orjson
import websockets

from router.fake import FakeConfig
from tests.conftest import policy_text
from tests.responses.conftest import fake_log, fake_stats, recv_response, socket_messages
from tests.responses.test_upstream_ws import FILES, KEY, call_of, ws_policy
from tests.security.test_slow_clients import until

SLOW = FakeConfig(seed=1, words=4000, chunk_delay_ms=5)  # a stream that lasts ~20 s, an event every 5 ms
TURN = orjson.dumps({"type": "response.create", "model": "auto", "input": "hi"}).decode()
ROUTES = "routes:\n  - {name: all, use: fast}\n"


def ws_url(base: str) -> str:
    return base.replace("http://", "ws://") + "/v1/responses"


async def streaming(ws: Any) -> None:
    """Send a turn and read until its text streams."""
    await ws.send(TURN)
    while orjson.loads(await ws.recv())["type"] != "response.output_text.delta":
        pass


def reset(ws: Any) -> None:
    """Drop the connection with a TCP reset: no close frame, no FIN."""
    sock = ws.transport.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    ws.transport.abort()


async def until_streaming(fake_url: str, count: int, within: float) -> None:
    """Wait until the fake streams `count` answers; fail, saying how many it streams, after `within` s."""
    deadline = asyncio.get_running_loop().time() + within
    while (now := (await fake_stats(fake_url))["streaming"]) != count:
        assert asyncio.get_running_loop().time() < deadline, f"{now} upstream streams still running after {within} s"
        await asyncio.sleep(0.02)


async def test_sockets_reset_mid_turn_end_every_upstream_stream(start_fake_, proxy_) -> None:
    fake = await start_fake_(SLOW)
    proxy = await proxy_(policy_text(fake.url, routes=ROUTES))
    for _ in range(3):
        async with asyncio.timeout(20):
            sockets = await asyncio.gather(*(websockets.connect(ws_url(proxy.base)) for _ in range(20)))
            await asyncio.gather(*(streaming(ws) for ws in sockets))
        assert (await fake_stats(fake.url))["streaming"] == 20
        for ws in sockets:
            reset(ws)
        await until_streaming(fake.url, 0, within=2.0)  # every upstream call hung up on
    async with asyncio.timeout(5):  # every place in flight given back
        await until(lambda: proxy.runtime.inflight == 0)


async def closed_with(ws: Any, within: float) -> tuple[list[dict[str, Any]], int | None]:
    """The events still received, and the close code, once the server closes `ws` (fails after `within` s)."""
    events = []
    try:
        async with asyncio.timeout(within):
            while True:
                events.append(orjson.loads(await ws.recv()))
    except websockets.ConnectionClosed as closed:
        return events, closed.rcvd.code if closed.rcvd else None


async def test_a_drain_closes_idle_sockets_at_once(start_fake_, proxy_) -> None:
    fake = await start_fake_(FakeConfig(seed=1))
    proxy = await proxy_(policy_text(fake.url, routes=ROUTES), shutdown_grace=5.0)
    sockets = [await websockets.connect(ws_url(proxy.base)) for _ in range(3)]
    await sockets[0].send(TURN)  # one that has answered a turn, two that never sent one
    while orjson.loads(await sockets[0].recv())["type"] != "response.completed":
        pass
    loop = asyncio.get_running_loop()
    start = loop.time()
    stopping = asyncio.create_task(proxy.stop())
    for ws in sockets:
        assert await closed_with(ws, within=1.0) == ([], 1012)  # service restart, nothing else
    await asyncio.wait_for(stopping, 3.0)
    assert loop.time() - start < 1.5  # not held until the cut (4 s) and beyond


async def test_a_turn_sent_while_draining_is_refused_at_once(start_fake_, proxy_) -> None:
    fake = await start_fake_(SLOW)
    proxy = await proxy_(policy_text(fake.url, routes=ROUTES), shutdown_grace=2.0)
    ws = await websockets.connect(ws_url(proxy.base))
    await ws.send(orjson.dumps({**orjson.loads(TURN), "stream_id": "a"}).decode())
    while orjson.loads(await ws.recv())["type"] != "response.output_text.delta":
        pass
    stopping = asyncio.create_task(proxy.stop())
    await asyncio.sleep(0.1)  # draining: the turn on stream "a" runs on
    requests = (await fake_stats(fake.url))["requests"]
    await ws.send(orjson.dumps({**orjson.loads(TURN), "stream_id": "b"}).decode())
    async with asyncio.timeout(0.5):  # refused at once, not when the running turn is cut
        while (event := orjson.loads(await ws.recv())).get("stream_id") != "b":
            pass
    assert event["type"] == "error" and event["status"] == 503 and event["code"] == "shutting_down"
    assert (await fake_stats(fake.url))["requests"] == requests  # no tier was asked
    events, code = await closed_with(ws, within=3.0)  # the running turn is cut at 80% of the grace
    assert events[-1]["type"] == "error" and events[-1]["code"] == "shutting_down"
    assert events[-1]["stream_id"] == "a" and code == 1012
    await asyncio.wait_for(stopping, 3.0)


async def test_a_kept_upstream_socket_lost_before_the_answer_is_reopened_once(start_fake_, proxy_, sdk) -> None:
    """The router cannot tell a socket the upstream closed while idle from one dropped on this turn:
    it reopens a kept one once and sends the turn whole on it, not over HTTP (docs/clients.md)."""
    fast = await start_fake_(FakeConfig(seed=1, api_key=KEY, prefer_tools=("read_file",)))
    full = await start_fake_(FakeConfig(seed=2, api_key=KEY))
    proxy = await proxy_(ws_policy(fast, full))
    async with sdk(proxy.url).responses.connect() as conn:
        await conn.response.create(model="auto", input="Read the files.", tools=FILES)
        first = (await recv_response(conn))[-1].response
        for handler in list(fast.runner.server.connections):  # the upstream drops its socket (RST)
            handler.transport.abort()
        output = {"type": "function_call_output", "call_id": call_of(first).call_id, "output": "x"}
        await conn.response.create(model="auto", input=[output], tools=FILES, previous_response_id=first.id)
        events = await recv_response(conn)
        assert events[-1].type == "response.completed" and events[-1].model_extra["router"]["tier"] == "fast"
    log = await fake_log(fast.url)
    sent = socket_messages(log)
    assert [m["connection"] for m in sent] == [1, 2] and [e for e in log if e["method"] == "POST"] == []
    assert "previous_response_id" not in sent[1]["body"] and len(sent[1]["body"]["input"]) == 3  # whole

"""The fake upstream's Responses WebSocket mode (router/fake/websocket.py), as OpenAI runs it: the
connection-local cache of the last response, `generate: false`, the connection time limit, what it
records; with the official SDK's `responses.connect()` and a thin `websockets` client."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import orjson
import pytest
import websockets
from websockets.exceptions import ConnectionClosed, InvalidStatus

from router.fake import FakeConfig, FakeServer
from tests.responses.conftest import TOOLS, fake_log, recv_response

KEY = "sk-fake-ws-key"


def ws_url(fake: FakeServer) -> str:
    return fake.url.replace("http://", "ws://") + "/responses"


async def log_of(fake: FakeServer) -> list[dict[str, Any]]:
    return await fake_log(fake.url)


async def turn(ws: Any, **body: Any) -> list[dict[str, Any]]:
    """One response's events on a raw socket, up to its terminal event."""
    await ws.send(orjson.dumps({"type": "response.create", "model": "m", **body}).decode())
    events = []
    while True:
        event = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
        events.append(event)
        if event["type"] in ("response.completed", "response.incomplete", "error"):
            return events


async def test_the_sdk_runs_turns_continued_by_previous_response_id(start_fake_) -> None:
    fake = await start_fake_(FakeConfig(seed=1, api_key=KEY, finish_after=2))
    client = openai.AsyncOpenAI(base_url=fake.url, api_key=KEY)
    async with client.responses.connect() as conn:
        await conn.response.create(model="m", input="Weather in Paris?", tools=TOOLS, store=False)
        first = await recv_response(conn)
        assert first[0].type == "response.created" and first[-1].type == "response.completed"
        call = first[-1].response.output[0]
        output = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
        prev = first[-1].response.id
        await conn.response.create(model="m", previous_response_id=prev, input=[output], tools=TOOLS, store=False)
        second = await recv_response(conn)
        assert second[-1].type == "response.completed"
    messages = [e for e in await log_of(fake) if e["method"] == "WS"]
    assert [m["connection"] for m in messages] == [1, 1]
    assert messages[1]["body"]["previous_response_id"] == prev and messages[1]["body"]["input"] == [output]
    assert all(m["bytes"] >= len(orjson.dumps(m["body"])) for m in messages)  # as sent, spaces and all
    assert messages[0]["headers"]["authorization"] == f"Bearer {KEY}"


async def test_the_cache_is_the_connections_own_and_holds_its_last_response(fake) -> None:
    async with websockets.connect(ws_url(fake)) as one, websockets.connect(ws_url(fake)) as two:
        first = await turn(one, input="Hi", store=False)
        rid = first[-1]["response"]["id"]
        elsewhere = await turn(two, input="More", previous_response_id=rid, store=False)
        assert elsewhere[-1]["type"] == "error" and elsewhere[-1]["status"] == 400
        assert elsewhere[-1]["error"]["code"] == "previous_response_not_found"
        second = await turn(one, input="More", previous_response_id=rid)  # the connection stays open
        assert second[-1]["type"] == "response.completed"
        stale = await turn(one, input="Again", previous_response_id=rid)  # only the most recent is kept
        assert stale[-1]["error"]["code"] == "previous_response_not_found"
        again = await turn(one, input="Again", previous_response_id=second[-1]["response"]["id"])
        assert again[-1]["type"] == "response.completed"
    upgrades = [e for e in await log_of(fake) if e["method"] == "GET" and e["path"] == "/v1/responses"]
    assert len(upgrades) == 2


async def test_generate_false_keeps_the_input_and_draws_nothing(start_fake_) -> None:
    fake = await start_fake_(FakeConfig(seed=3, finish_after=1))
    async with websockets.connect(ws_url(fake)) as ws:
        warm = await turn(ws, input="Context: Paris.", generate=False, tools=TOOLS)
        assert [e["type"] for e in warm] == ["response.created", "response.in_progress", "response.completed"]
        assert warm[-1]["response"]["output"] == []
        done = await turn(ws, input=[{"type": "function_call_output", "call_id": "c1", "output": "x"}],
                          previous_response_id=warm[-1]["response"]["id"], tools=TOOLS)  # fmt: skip
        # the warm-up's input and the new output are one conversation: one tool result, so it finishes
        assert [i["type"] for i in done[-1]["response"]["output"]] == ["message"]
    other = await start_fake_(FakeConfig(seed=3, finish_after=1))
    async with websockets.connect(ws_url(other)) as ws:  # the same draws as without the warm-up
        plain = await turn(ws, input="Context: Paris.", tools=TOOLS)
    async with websockets.connect(ws_url(fake)) as ws:
        after = await turn(ws, input="Context: Paris.", tools=TOOLS)
    assert after[-1]["response"]["output"][0]["name"] == plain[-1]["response"]["output"][0]["name"]


async def test_the_connection_limit_ends_with_its_error(start_fake_) -> None:
    fake = await start_fake_(FakeConfig(ws_limit_s=0.3))
    async with websockets.connect(ws_url(fake)) as ws:
        assert (await turn(ws, input="Hi"))[-1]["type"] == "response.completed"
        await asyncio.sleep(0.4)
        late = await turn(ws, input="Hi again")
        assert late == [{"type": "error", "status": 400, "error": late[0]["error"]}]
        assert late[0]["error"]["code"] == "websocket_connection_limit_reached"
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 5)


async def test_upgrades_refused_without_the_mode_or_the_key(start_fake_) -> None:
    off = await start_fake_(FakeConfig(websocket=False))
    with pytest.raises(InvalidStatus) as refused:
        await websockets.connect(ws_url(off))
    assert refused.value.response.status_code == 404
    locked = await start_fake_(FakeConfig(api_key=KEY))
    with pytest.raises(InvalidStatus) as unauthorized:
        await websockets.connect(ws_url(locked))
    assert unauthorized.value.response.status_code == 401


async def test_errors_and_delays_as_over_http(start_fake_) -> None:
    fake = await start_fake_(FakeConfig(error_rate=1.0))
    async with websockets.connect(ws_url(fake)) as ws:
        failed = await turn(ws, input="Hi")
        assert failed[-1]["type"] == "error" and failed[-1]["status"] == 500
        unknown = orjson.dumps({"type": "response.cancel"}).decode()
        await ws.send(unknown)
        assert orjson.loads(await ws.recv())["error"]["param"] == "type"
    slow = await start_fake_(FakeConfig(first_token_delay_ms=200))
    async with websockets.connect(ws_url(slow)) as ws:
        started = asyncio.get_running_loop().time()
        await turn(ws, input="Hi")
        assert asyncio.get_running_loop().time() - started >= 0.2

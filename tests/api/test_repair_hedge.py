"""Route actions beyond plain escalation: `repair` and `hedge`, end to end through the proxy.

`repair` is tested against a small upstream that behaves like llama.cpp: with a named tool_choice
its grammar forces a valid call, without one it fumbles the arguments.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp import web

from router.fake import FakeConfig
from tests.api.helpers import TOOLS, USER, assert_valid_weather_call, client, fake_requests, get, post, trailer
from tests.conftest import policy_text, serve_app, upstream_app

REPAIR_ROUTES = """
    routes:
      - name: tools
        when: {tools: {present: true}}
        use: fast
        repair: true
      - name: default
        use: full
"""
ESCALATE = "escalation: {to: full, max_attempts: 3}\n"


def grammar_app(seen: list[dict[str, Any]], always_broken: bool = False) -> web.Application:
    """Valid calls only when tool_choice names the tool (like llama.cpp's grammar); else broken JSON."""

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen.append(body)
        pinned = isinstance(body.get("tool_choice"), dict) and not always_broken
        args = '{"city": "Paris"}' if pinned else '{"city": "Par'
        call = {"id": f"call_{len(seen)}", "type": "function", "function": {"name": "get_weather", "arguments": args}}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        if not body.get("stream"):
            choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
            return web.json_response({"id": "c", "object": "chat.completion", "model": "m", "choices": [choice]})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        deltas = [{"role": "assistant", "tool_calls": [{"index": 0, **call, "function": {**call["function"]}}]}]
        for delta, finish in ((deltas[0], None), ({}, "tool_calls")):
            chunk = {
                "id": "c",
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            await resp.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    return upstream_app({"/v1/chat/completions": chat})


@pytest.fixture
async def grammar() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []
    async with serve_app(grammar_app(seen)) as url:
        yield url, seen


@pytest.fixture
async def broken() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []
    async with serve_app(grammar_app(seen, always_broken=True)) as url:
        yield url, seen


@pytest.mark.parametrize("stream", [False, True])
async def test_repair_pins_the_fumbled_tool_on_the_same_tier(grammar, start_fake_, proxy_, stream: bool) -> None:
    url, seen = grammar
    full = await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(policy_text(url, full.url, routes=REPAIR_ROUTES, extra=ESCALATE))
    body = {"model": "auto", "messages": USER, "tools": TOOLS, "stream": stream}
    raw = await post(proxy.url + "/chat/completions", body)
    h = raw.headers
    assert (h["x-router-tier"], h["x-router-escalated"], h["x-router-repaired"]) == ("fast", "false", "true")
    assert h["x-router-mistakes"] == "invalid_json"
    assert [b.get("tool_choice") for b in seen if "messages" in b] == [
        None,
        {"type": "function", "function": {"name": "get_weather"}},
    ]
    assert await fake_requests(full.url) == []  # the full tier was never needed
    if stream:
        assert trailer(raw.body)["tiers"] == ["fast", "fast"]
        sdk_stream = await client(proxy.url).chat.completions.create(**{**body, "stream": True})
        args = "".join(
            [
                tc.function.arguments or ""
                async for c in sdk_stream
                if c.choices
                for tc in c.choices[0].delta.tool_calls or []
            ]
        )
        assert_valid_weather_call("get_weather", args)
    else:
        [call] = orjson.loads(raw.body)["choices"][0]["message"]["tool_calls"]
        assert_valid_weather_call(call["function"]["name"], call["function"]["arguments"])


async def test_a_failed_repair_escalates(broken, start_fake_, proxy_) -> None:
    url, seen = broken
    full = await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(policy_text(url, full.url, routes=REPAIR_ROUTES, extra=ESCALATE))
    raw = await client(proxy.url).chat.completions.with_raw_response.create(model="auto", messages=USER, tools=TOOLS)
    h = raw.headers
    assert (h["x-router-tier"], h["x-router-escalated"], h["x-router-repaired"]) == ("full", "true", "true")
    assert h["x-router-mistakes"] == "invalid_json,invalid_json"
    assert len([b for b in seen if "messages" in b]) == 2
    [call] = raw.parse().choices[0].message.tool_calls
    assert_valid_weather_call(call.function.name, call.function.arguments)


def hedge_policy(fast_url: str, full_url: str, after: float) -> str:
    routes = f"""
        routes:
          - name: tools
            when: {{tools: {{present: true}}}}
            use: fast
            hedge: {{after: {after}}}
          - name: default
            use: full
    """
    return policy_text(fast_url, full_url, routes=routes, extra=ESCALATE)


@pytest.mark.parametrize("stream", [False, True])
async def test_hedge_answers_from_the_second_tier_when_the_first_is_slow(start_fake_, proxy_, stream) -> None:
    slow = FakeConfig(seed=1, delay_ms=3000) if not stream else FakeConfig(seed=1, first_token_delay_ms=3000)
    fast = await start_fake_(slow)
    full = await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(hedge_policy(fast.url, full.url, after=0.2))
    started = asyncio.get_running_loop().time()
    raw = await post(
        proxy.url + "/chat/completions", {"model": "auto", "messages": USER, "tools": TOOLS, "stream": stream}
    )
    elapsed = asyncio.get_running_loop().time() - started
    assert raw.status == 200
    assert elapsed < 2.0, f"the hedge should answer long before the slow tier ({elapsed:.2f} s)"
    assert (raw.headers["x-router-tier"], raw.headers["x-router-escalated"]) == ("full", "true")
    if stream:
        assert trailer(raw.body)["tiers"] == ["fast", "full"]
    stats = orjson.loads((await get(proxy.base + "/v1/router/stats")).body)
    assert stats["routes"]["tools"]["escalations"] == 1


async def test_no_hedge_when_the_first_tier_is_quick(start_fake_, proxy_) -> None:
    fast = await start_fake_(FakeConfig(seed=1))
    full = await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(hedge_policy(fast.url, full.url, after=1.0))
    for _ in range(3):
        raw = await client(proxy.url).chat.completions.with_raw_response.create(
            model="auto", messages=USER, tools=TOOLS
        )
        assert raw.headers["x-router-tier"] == "fast"
    assert await fake_requests(full.url) == []

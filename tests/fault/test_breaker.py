"""A tier that keeps failing is skipped for a while (router/core/live/breaker.py), through a real proxy in
front of the fake upstream: `endless` (every answer a JSON body or a stream that never ends, cut at
its bound) as the routed tier, a healthy tier behind it. After `failures` cuts the next calls go
straight to the next tier (`tier_open` among the mistakes, nothing read from the endless tier);
after the cooldown one trial call goes to the tier again. With no tier left: a retryable 503.
Wrong tool calls are the router's normal escalations and never open a tier. The breakers' clock is
one the test moves (no sleeps)."""

from __future__ import annotations

import asyncio
import re

import aiohttp
import orjson
from aiohttp import web

from router.fake import FakeConfig
from tests.api.helpers import TOOLS, USER, assert_error_body, get, post, sse, trailer
from tests.conftest import Proxy, policy_text, serve_app, upstream_app

LIMITS = {"upstream_max_body_bytes": 64 * 1024, "upstream_max_answer_chars": 16 * 1024}
BREAKER = "breaker: {failures: 3, cooldown: 10, max_cooldown: 40}"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def with_breakers(policy: str) -> str:
    """Every tier of a `policy_text` policy with the test's breaker options."""
    return policy.replace("total: 20}\n", f"total: 20}}\n    {BREAKER}\n")


async def metrics(proxy: Proxy) -> str:
    async with aiohttp.ClientSession() as s, s.get(proxy.base + "/metrics") as r:
        return await r.text()


def value(text: str, line: str) -> float:
    found = re.search(rf"^{re.escape(line)} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


async def cuts(proxy: Proxy) -> float:
    return value(await metrics(proxy), 'router_limits_tripped_total{limit="upstream_body"}')


async def call(proxy: Proxy, stream: bool = False) -> tuple[int, dict[str, str], bytes]:
    body = {"model": "auto", "messages": USER, "tools": TOOLS, "stream": stream}
    async with asyncio.timeout(15):
        raw = await post(proxy.url + "/chat/completions", body)
    return raw.status, raw.headers, raw.body


async def breakers(proxy: Proxy) -> dict[str, dict[str, object]]:
    stats = (await get(proxy.url + "/router/stats")).json()
    return stats["breakers"]  # type: ignore[no-any-return]


async def test_an_endless_tier_is_skipped_after_three_cuts_and_tried_again_after_the_cooldown(
    start_fake_, proxy_
) -> None:
    endless = await start_fake_(FakeConfig(seed=1, endless=True))
    full = await start_fake_(FakeConfig(seed=2))
    policy = with_breakers(policy_text(endless.url, full.url, extra="escalation: {to: full}\n"))
    proxy = await proxy_(policy, **LIMITS)
    clock = proxy.runtime.breakers.clock = Clock()

    for n in range(1, 4):  # each call reads the endless tier to its bound, then escalates
        status, headers, body = await call(proxy)
        assert status == 200, body
        assert (headers["x-router-tier"], headers["x-router-mistakes"]) == ("full", "upstream_error")
        assert await cuts(proxy) == n
    assert (await breakers(proxy))["fast"] == {"state": "open", "failures": 0, "open_for": 10.0, "openings": 1}
    text = await metrics(proxy)
    assert value(text, 'router_tier_open{tier="fast"}') == 1.0
    assert value(text, 'router_tier_openings_total{tier="fast"}') == 1.0

    # open: straight to the next tier, JSON and stream alike, nothing read from the endless one
    for stream in (False, True, False):
        status, headers, body = await call(proxy, stream)
        assert status == 200, body
        assert (headers["x-router-escalated"], headers["x-router-mistakes"]) == ("true", "tier_open")
        if stream:
            _, _, done = sse(body)
            summary = trailer(body)
            assert done and (summary["tier"], summary["tiers"], summary["skipped"]) == ("full", ["full"], ["fast"])
        else:
            assert headers["x-router-tier"] == "full"
    assert await cuts(proxy) == 3

    # the cooldown passed: one trial call goes to the tier; it is cut again, and the tier opens for twice as long
    clock.now += 10
    status, headers, _ = await call(proxy)
    assert (status, headers["x-router-mistakes"]) == (200, "upstream_error")
    assert await cuts(proxy) == 4
    assert (await breakers(proxy))["fast"] == {"state": "open", "failures": 0, "open_for": 20.0, "openings": 2}
    status, headers, _ = await call(proxy)
    assert (status, headers["x-router-mistakes"]) == (200, "tier_open")
    assert await cuts(proxy) == 4
    assert value(await metrics(proxy), 'router_tier_openings_total{tier="fast"}') == 2.0
    assert proxy.runtime.inflight == 0


async def test_with_no_tier_left_the_call_is_a_retryable_503_in_each_apis_shape(start_fake_, proxy_) -> None:
    endless = await start_fake_(FakeConfig(seed=1, endless=True))
    routes = "routes:\n  - {name: all, use: fast}\n"  # and no escalation chain: no tier after fast
    policy = with_breakers(policy_text(endless.url, routes=routes, extra="escalation: {max_attempts: 1}\n"))
    proxy = await proxy_(policy, **LIMITS)
    clock = proxy.runtime.breakers.clock = Clock()
    for _ in range(3):
        status, _, body = await call(proxy)
        assert status == 502, body  # the only tier was cut: an upstream error
    clock.now += 2.5
    async with asyncio.timeout(15):
        raw = await post(proxy.url + "/chat/completions", {"model": "auto", "messages": USER})
    error = assert_error_body(raw, 503, type_="overloaded_error", code="tier_open")
    assert (raw.headers["retry-after"], raw.headers["x-should-retry"]) == ("8", "true")
    assert "fast" in error["message"] and "Retry in 8 s" in error["message"]
    body = {"model": "auto", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    async with asyncio.timeout(15):
        raw = await post(proxy.url + "/messages", body)
    assert (raw.status, raw.headers["retry-after"]) == (529, "8")  # Anthropic's status and shape for overloaded
    assert orjson.loads(raw.body)["error"]["type"] == "overloaded_error"
    assert orjson.loads(raw.body)["type"] == "error"
    async with asyncio.timeout(15):
        raw = await post(proxy.url + "/chat/completions", {"model": "auto", "messages": USER, "stream": True})
    assert (raw.status, raw.headers["retry-after"]) == (503, "8")  # before the first byte: a plain error
    assert await cuts(proxy) == 3
    assert value(await metrics(proxy), 'router_refused_total{reason="tier_open"}') == 3.0
    assert proxy.runtime.inflight == 0


async def test_wrong_tool_calls_and_client_errors_never_open_a_tier(start_fake_, proxy_) -> None:
    wrong = await start_fake_(FakeConfig(seed=1, bad_tool_rate=1.0))  # every tool call broken, well-formed JSON
    full = await start_fake_(FakeConfig(seed=2))
    policy = with_breakers(policy_text(wrong.url, full.url, extra="escalation: {to: full}\n"))
    proxy = await proxy_(policy, **LIMITS)
    mistakes = []
    for _ in range(6):
        status, headers, body = await call(proxy)
        assert status == 200, body
        mistakes += headers["x-router-mistakes"].split(",")
    assert len([m for m in mistakes if m]) >= 3, mistakes  # broken calls (the fake draws which), escalated
    assert "tier_open" not in mistakes and "upstream_error" not in mistakes
    assert (await breakers(proxy))["fast"]["state"] == "closed"
    assert value(await metrics(proxy), 'router_tier_openings_total{tier="fast"}') == 0.0


async def test_a_tier_refusing_the_clients_request_never_opens(start_fake_, proxy_) -> None:
    async def refuse(request: web.Request) -> web.Response:
        error = {"error": {"message": "max_tokens is too large", "type": "invalid_request_error"}}
        return web.json_response(error, status=400)

    full = await start_fake_(FakeConfig(seed=2))
    async with serve_app(upstream_app({"/v1/chat/completions": refuse})) as refusing:
        proxy = await proxy_(with_breakers(policy_text(refusing, full.url, extra="escalation: {to: full}\n")))
        for _ in range(6):
            status, _, body = await call(proxy)
            assert status == 400, body  # the client's fault: passed on, not escalated
        assert (await breakers(proxy))["fast"] == {"state": "closed", "failures": 0, "open_for": 0.0, "openings": 0}

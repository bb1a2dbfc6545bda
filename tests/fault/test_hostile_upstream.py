"""A tier that never stops sending: a JSON body that never ends, streamed tool-call arguments that
never end. Each is bounded (`upstream_max_body_bytes`, `upstream_max_answer_chars`): over it the
attempt is an upstream error, which escalates to the next tier (or is a 502 when there is none), and
`router_limits_tripped{limit}` counts it. The stream's gate joins a call's arguments once, so a
long call costs linear time.
"""

from __future__ import annotations

import asyncio
import re

import aiohttp
import orjson
import pytest

from router.fake import FakeConfig
from router.flow.streaming import Gate
from router.upstream.base import Chunk
from tests.api.helpers import TOOLS, USER, assert_error_body, post, sse, trailer
from tests.conftest import policy_text

LIMITS = {"upstream_max_body_bytes": 256 * 1024, "upstream_max_answer_chars": 64 * 1024}


async def tripped(base: str, limit: str) -> float:
    """router_limits_tripped{limit} on the proxy's /metrics (0 when never tripped)."""
    async with aiohttp.ClientSession() as s, s.get(base + "/metrics") as r:
        text = await r.text()
    found = re.search(rf'^router_limits_tripped_total{{limit="{limit}"}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_an_endless_answer_escalates(start_fake_, proxy_, stream: bool) -> None:
    endless = await start_fake_(FakeConfig(seed=1, endless=True))
    full = await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(policy_text(endless.url, full.url, extra="escalation: {to: full}\n"), **LIMITS)
    body = {"model": "auto", "messages": USER, "tools": TOOLS, "stream": stream}
    async with asyncio.timeout(15):
        raw = await post(proxy.url + "/chat/completions", body)
    assert raw.status == 200, raw.body
    assert raw.headers["x-router-escalated"] == "true"
    assert "upstream_error" in raw.headers["x-router-mistakes"]
    if stream:
        chunks, _, done = sse(raw.body)
        assert done and trailer(raw.body)["tier"] == "full"
        assert not any("endless" in orjson.dumps(c).decode() for c in chunks)  # nothing of the endless call leaked
    else:
        assert raw.headers["x-router-tier"] == "full"
    limit = "upstream_answer" if stream else "upstream_body"
    assert await tripped(proxy.base, limit) == 1


async def test_an_endless_json_body_from_the_only_tier_is_a_502(start_fake_, proxy_) -> None:
    endless = await start_fake_(FakeConfig(seed=1, endless=True))
    proxy = await proxy_(policy_text(endless.url, extra="escalation: {max_attempts: 1}\n"), **LIMITS)
    async with asyncio.timeout(15):
        raw = await post(proxy.url + "/chat/completions", {"model": "auto", "messages": USER})
    error = assert_error_body(raw, 502, type_="upstream_error")
    assert "over the limit" in error["message"]
    assert proxy.runtime.inflight == 0


@pytest.mark.timeout(60)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_the_default_bounds_pass_an_answer_as_long_as_any_model_writes(start_fake_, proxy_, stream) -> None:
    """131,072 words — more than the largest output budget today (128k tokens) — pass the default
    `upstream_max_body_bytes` and `upstream_max_answer_chars` whole."""
    long = await start_fake_(FakeConfig(seed=1, words=131_072))
    proxy = await proxy_(policy_text(long.url, extra="escalation: {max_attempts: 1}\n"))
    async with asyncio.timeout(50):
        raw = await post(proxy.url + "/chat/completions", {"model": "auto", "messages": USER, "stream": stream})
    assert raw.status == 200, raw.body[:300]
    if stream:
        chunks, _, done = sse(raw.body)
        text = "".join((c["choices"][0]["delta"].get("content") or "") for c in chunks if c.get("choices"))
        assert done
    else:
        text = orjson.loads(raw.body)["choices"][0]["message"]["content"]
    assert len(text.split()) == 131_072
    assert await tripped(proxy.base, "upstream_body") == await tripped(proxy.base, "upstream_answer") == 0


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_the_default_bounds_cut_an_endless_answer(start_fake_, proxy_, stream) -> None:
    """At 4 MiB of JSON body, or 1 Mi characters of streamed arguments, with default settings."""
    endless = await start_fake_(FakeConfig(seed=1, endless=True))
    proxy = await proxy_(policy_text(endless.url, extra="escalation: {max_attempts: 1}\n"))
    body = {"model": "auto", "messages": USER, "tools": TOOLS, "stream": stream}
    async with asyncio.timeout(15):
        raw = await post(proxy.url + "/chat/completions", body)
    if stream:
        assert f"over the limit of {1024 * 1024}" in raw.body.decode()
    else:
        assert f"over the limit of {4 * 1024 * 1024}" in assert_error_body(raw, 502, type_="upstream_error")["message"]
    assert await tripped(proxy.base, "upstream_answer" if stream else "upstream_body") == 1


async def test_an_endless_sse_line_is_bounded(start_fake_, proxy_) -> None:
    """One `data:` line that never ends (no newline ever) is refused at the same bound as a body."""
    from aiohttp import web

    from tests.conftest import serve_app, upstream_app

    async def chat(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"choices": [{"index": 0, "delta": {"content": "')
        try:
            while True:
                await resp.write(b"a" * 65536)
                await asyncio.sleep(0)
        except (ConnectionError, RuntimeError):
            return resp

    async with serve_app(upstream_app({"/v1/chat/completions": chat})) as url:
        proxy = await proxy_(policy_text(url, extra="escalation: {max_attempts: 1}\n"), **LIMITS)
        async with asyncio.timeout(15):
            raw = await post(proxy.url + "/chat/completions", {"model": "auto", "messages": USER, "stream": True})
        assert_error_body(raw, 502, type_="upstream_error")
        assert await tripped(proxy.base, "upstream_body") == 1


async def test_many_small_events_at_once_are_not_one_big_event(proxy_) -> None:
    """The SSE bound is per event: 400 events of ~150 bytes sent in one write (60 KB, read as one
    block) pass a 1 KiB `upstream_max_body_bytes`, which only the event being read counts against."""
    from aiohttp import web

    from tests.conftest import serve_app, upstream_app

    base = {"id": "c", "object": "chat.completion.chunk", "model": "m"}

    def event(delta: dict, finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return b"data: " + orjson.dumps({**base, "choices": [choice]}) + b"\n\n"

    async def chat(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        words = b"".join(event({"content": f"word{i:04d} " + "x" * 60}) for i in range(400))
        await resp.write(event({"role": "assistant", "content": ""}) + words + event({}, "stop") + b"data: [DONE]\n\n")
        return resp

    async with serve_app(upstream_app({"/v1/chat/completions": chat})) as url:
        proxy = await proxy_(policy_text(url, extra="escalation: {max_attempts: 1}\n"), upstream_max_body_bytes=1024)
        async with asyncio.timeout(15):
            raw = await post(proxy.url + "/chat/completions", {"model": "auto", "messages": USER, "stream": True})
        chunks, _, done = sse(raw.body)
        assert done, raw.body[-300:]
        assert sum("word" in (c["choices"][0]["delta"].get("content") or "") for c in chunks if c.get("choices")) == 400
        assert await tripped(proxy.base, "upstream_body") == 0


async def test_an_endless_model_list_at_warm_up_is_bounded(start_fake_, proxy_) -> None:
    """The warm-up's GET /v1/models is read under the same bound as an answer: a server whose list
    never ends is cut there (counted), not read into memory until the warm-up's timeout."""
    from aiohttp import web

    from tests.conftest import serve_app

    async def models(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        await resp.write(b'{"object": "list", "data": [')
        try:
            while True:
                await resp.write(b'{"id": "m", "object": "model"}, ' * 2048)
                await asyncio.sleep(0)
        except (ConnectionError, RuntimeError):
            return resp

    app = web.Application()
    app.router.add_get("/v1/models", models)
    async with serve_app(app) as url:
        fast = await start_fake_(FakeConfig(seed=1))
        policy = policy_text(fast.url).replace(f"api_base: {fast.url}", f"api_base: {url}", 1)
        async with asyncio.timeout(3):  # the warm-up's own timeout is connect + 2 s
            proxy = await proxy_(policy, **LIMITS)
        assert await tripped(proxy.base, "upstream_body") >= 1


@pytest.mark.timeout(30)
def test_the_gate_joins_long_arguments_in_linear_time() -> None:
    """40,000 argument deltas of 1,000 characters (40 MB): joined once, this takes well under a
    second; concatenated per delta (quadratic: ~800 GB copied) it would run past the timeout."""
    gate = Gate(tools_offered=True)
    head = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
    gate.feed(Chunk({"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [head]}}]}))
    part = "a" * 1000
    delta = {"tool_calls": [{"index": 0, "function": {"arguments": part}}]}
    for _ in range(40_000):
        assert gate.feed(Chunk({"id": "c", "choices": [{"index": 0, "delta": delta}]})) == []
    calls = gate.message()["tool_calls"]
    assert calls[0]["function"]["name"] == "get_weather"
    assert len(calls[0]["function"]["arguments"]) == 40_000_000

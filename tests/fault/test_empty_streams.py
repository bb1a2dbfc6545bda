"""Upstreams whose stream carries no chunk at all: only `[DONE]`, or a 200 body that is not SSE.

Whatever the router makes of it, the client gets a well-formed answer — never "the router failed
unexpectedly" (500).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp import web

from router.fake import FakeConfig
from tests.api.helpers import TOOLS, USER, assert_error_body, post, sse, trailer
from tests.conftest import policy_text, serve_app, upstream_app


def empty_app() -> web.Application:
    """An OpenAI-style server answering every stream with nothing; the user message picks how."""

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if body["messages"][-1]["content"] == "not-sse":
            return web.Response(status=200, text='{"unexpected": true}', content_type="application/json")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    return upstream_app({"/v1/chat/completions": chat})


@pytest.fixture
async def empty() -> AsyncIterator[str]:
    async with serve_app(empty_app()) as url:
        yield url


@pytest.mark.parametrize("how", ["done-only", "not-sse"])
async def test_empty_stream_from_the_only_tier_is_a_retryable_error(empty, proxy_, how: str) -> None:
    proxy = await proxy_(policy_text(empty, extra="escalation: {max_attempts: 1}\n"))
    body = {"model": "auto", "messages": [{"role": "user", "content": how}], "stream": True}
    raw = await post(proxy.url + "/chat/completions", body)
    # nothing was sent yet, so the client gets a plain error rather than a stream with no answer
    assert_error_body(raw, 502, type_="upstream_error", code="checks_failed")
    assert "empty_response" in orjson.loads(raw.body)["error"]["message"]
    assert raw.headers.get("x-should-retry") == "true"  # another sample may answer


@pytest.mark.parametrize("how", ["done-only", "not-sse"])
async def test_empty_stream_delivered_is_still_not_a_router_failure(empty, proxy_, how: str) -> None:
    proxy = await proxy_(policy_text(empty, extra="escalation: {max_attempts: 1, on_exhausted: deliver}\n"))
    body = {"model": "auto", "messages": [{"role": "user", "content": how}], "stream": True}
    raw = await post(proxy.url + "/chat/completions", body)
    assert_error_body(raw, 502, type_="upstream_error")
    assert "empty stream" in orjson.loads(raw.body)["error"]["message"]
    assert raw.headers.get("x-should-retry") == "false"


async def test_empty_stream_from_the_fast_tier_escalates(empty, start_fake_, proxy_) -> None:
    full = await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(policy_text(empty, full.url, extra="escalation: {to: full}\n"))
    for content in ("done-only", "not-sse"):
        messages = [*USER[:-1], {"role": "user", "content": content}]
        raw = await post(
            proxy.url + "/chat/completions", {"model": "auto", "messages": messages, "tools": TOOLS, "stream": True}
        )
        assert raw.status == 200, raw.body
        assert raw.headers["x-router-tier"] == "full"
        assert raw.headers["x-router-mistakes"] == "empty_response"
        events, _, done = sse(raw.body)
        assert done and events
        assert trailer(raw.body)["tiers"] == ["fast", "full"]

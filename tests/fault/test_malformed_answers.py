"""Upstream answers that parse as JSON but are not chat completions: a broken or hostile tier.

An answer whose `choices`, `message`, `delta`, `tool_calls` or `function` has the wrong type is an
upstream error like a malformed SSE line: the router escalates when it can, and otherwise answers
502 (`upstream_error`, `x-should-retry: false`) — or, once a stream has started, an SSE `error`
frame. Never a 500 "the router failed unexpectedly", and never the garbage passed on as an answer.
Regression: each of these modes was a 500 or a 200 carrying the upstream's garbage.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp import web

from router.fake import FakeConfig
from tests.api.helpers import ERROR_KEYS, assert_error_body, post, sse, trailer
from tests.conftest import policy_text, serve_app, upstream_app

CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}

# mode → the assistant `message` of a JSON answer (or the whole answer, for "answer-*")
MESSAGES: dict[str, Any] = {
    "tool-calls-string": {"role": "assistant", "content": None, "tool_calls": "get_weather"},
    "tool-calls-object": {"role": "assistant", "content": None, "tool_calls": {"0": CALL}},
    "tool-call-string": {"role": "assistant", "content": None, "tool_calls": ["get_weather"]},
    "function-string": {"role": "assistant", "content": None, "tool_calls": [{**CALL, "function": "get_weather"}]},
    "message-string": "Hello",
    "choice-string": None,
    "choices-string": None,
}
# mode → the `delta` of the stream's second chunk (after a role chunk and a text chunk)
DELTAS: dict[str, Any] = {
    "tool-calls-string": {"tool_calls": "get_weather"},
    "tool-calls-object": {"tool_calls": {"0": {**CALL, "index": 0}}},
    "tool-call-string": {"tool_calls": ["get_weather"]},
    "function-string": {"tool_calls": [{**CALL, "index": 0, "function": "get_weather"}]},
    "message-string": "Hello",  # the delta itself
    "choice-string": None,
    "choices-string": None,
}


def answer(mode: str) -> dict[str, Any]:
    base: dict[str, Any] = {"id": "chatcmpl-bad", "object": "chat.completion", "created": 0, "model": "m"}
    if mode == "choices-string":
        return {**base, "choices": "none"}
    if mode == "choice-string":
        return {**base, "choices": ["none"]}
    return {**base, "choices": [{"index": 0, "message": MESSAGES[mode], "finish_reason": "tool_calls"}]}


def chunk(mode: str | None, delta: Any) -> bytes:
    base: dict[str, Any] = {"id": "chatcmpl-bad", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    if mode == "choices-string":
        data = {**base, "choices": "none"}
    elif mode == "choice-string":
        data = {**base, "choices": ["none"]}
    else:
        data = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    return b"data: " + orjson.dumps(data) + b"\n\n"


def bad_app() -> web.Application:
    """An OpenAI-style server whose answers are malformed as the last user message says."""

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        mode = body["messages"][-1]["content"]
        if not body.get("stream"):
            return web.json_response(answer(mode))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(chunk(None, {"role": "assistant", "content": ""}))
        await resp.write(chunk(None, {"content": "Checking."}))  # text: the stream has started
        await resp.write(chunk(mode, DELTAS[mode]))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    return upstream_app({"/v1/chat/completions": chat})


@pytest.fixture
async def bad() -> AsyncIterator[str]:
    async with serve_app(bad_app()) as url:
        yield url


ALONE = """
    aliases: {"*": fast}
    routes:
      - name: all
        use: fast
"""


@pytest.mark.parametrize("mode", list(MESSAGES))
async def test_malformed_answer_from_the_only_tier_is_a_502(bad, proxy_, mode: str) -> None:
    proxy = await proxy_(policy_text(bad, routes=ALONE, extra="escalation: {max_attempts: 1}\n"))
    body = {"model": "auto", "messages": [{"role": "user", "content": mode}]}
    raw = await post(proxy.url + "/chat/completions", body)
    assert_error_body(raw, 502, type_="upstream_error", code="upstream_error")
    assert raw.headers["x-should-retry"] == "false"
    streamed = await post(proxy.url + "/chat/completions", {**body, "stream": True})
    assert streamed.status == 200, streamed.body  # the text chunk went out before the malformed one
    events, _, done = sse(streamed.body)
    assert not done
    err = events[-1]
    assert set(err) == {"error"} and set(err["error"]) == ERROR_KEYS and err["error"]["code"] == "upstream_error"
    assert trailer(streamed.body)["mistakes"] == ["upstream_error"]
    assert proxy.runtime.inflight == 0


@pytest.mark.parametrize("mode", list(MESSAGES))
async def test_malformed_answer_from_the_fast_tier_escalates(bad, start_fake_, proxy_, mode: str) -> None:
    full = await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(
        policy_text(bad, full.url, routes=ALONE.replace("fast", "auto", 1), extra="escalation: {to: full}\n")
    )
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    body = {"model": "auto", "messages": [{"role": "user", "content": mode}], "tools": tools}
    raw = await post(proxy.url + "/chat/completions", body)
    assert raw.status == 200, raw.body
    assert (raw.headers["x-router-tier"], raw.headers["x-router-mistakes"]) == ("full", "upstream_error")
    [call] = raw.json()["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    streamed = await post(proxy.url + "/chat/completions", {**body, "stream": True})
    assert streamed.status == 200, streamed.body
    events, _, done = sse(streamed.body)
    assert done and all("error" not in e for e in events)
    assert len({e["id"] for e in events}) == 1
    summary = trailer(streamed.body)
    assert (summary["tier"], summary["mistakes"]) == ("full", ["upstream_error"])


@pytest.mark.parametrize("index", ["0", [0], None, 1.5])
async def test_a_stream_with_an_unreadable_call_index_escalates(bad_index, start_fake_, proxy_, index: Any) -> None:
    """Indexes key the calls being assembled: anything but an integer is a malformed event (was a 500)."""
    full = await start_fake_(FakeConfig(seed=3))
    proxy = await proxy_(policy_text(bad_index, full.url, routes=ALONE, extra="escalation: {to: full}\n"))
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    content = orjson.dumps(index).decode()
    body = {"model": "auto", "messages": [{"role": "user", "content": content}], "tools": tools, "stream": True}
    streamed = await post(proxy.url + "/chat/completions", body)
    assert streamed.status == 200, streamed.body
    events, _, done = sse(streamed.body)
    assert done and all("error" not in e for e in events)
    summary = trailer(streamed.body)
    assert (summary["tier"], summary["mistakes"]) == ("full", ["upstream_error"])


@pytest.fixture
async def bad_index() -> AsyncIterator[str]:
    """Streams a tool call whose `index` is the JSON in the last user message."""

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        call = {**CALL, "index": orjson.loads(body["messages"][-1]["content"])}
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(chunk(None, {"role": "assistant", "content": None, "tool_calls": [call]}))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = upstream_app({"/v1/chat/completions": chat})
    async with serve_app(app) as url:
        yield url


async def test_token_counts_that_are_not_numbers_count_as_zero(start_fake_, proxy_) -> None:
    """`usage` is read on the Responses and Messages transports: a tier's junk there was a 500."""

    async def chat(request: web.Request) -> web.Response:
        message = {"role": "assistant", "content": "Hi."}
        usage = {"prompt_tokens": "many", "completion_tokens": [1], "prompt_tokens_details": "none"}
        return web.json_response({**answer("message-string"), "choices": [{"index": 0, "message": message,
                                  "finish_reason": "stop"}], "usage": usage})  # fmt: skip

    app = upstream_app({"/v1/chat/completions": chat})
    async with serve_app(app) as url:
        proxy = await proxy_(policy_text(url, routes=ALONE))
        responses = await post(proxy.url + "/responses", {"model": "auto", "input": "hi"})
        assert responses.status == 200, responses.body
        assert responses.json()["usage"]["input_tokens"] == 0
        assert responses.json()["output"][0]["content"][0]["text"] == "Hi."
        messages = await post(proxy.base + "/v1/messages", {"model": "auto", "max_tokens": 8, "messages": [
            {"role": "user", "content": "hi"}]})  # fmt: skip
        assert messages.status == 200, messages.body
        assert messages.json()["usage"] == {"input_tokens": 0, "output_tokens": 0}

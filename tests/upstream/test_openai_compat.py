"""The OpenAI-compatible tier client against real servers: body shaping and stream normalisation."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import openai
import orjson
import pytest
from aiohttp import web

from router.errors import ContextExceeded, upstream_text
from router.fake import FakeConfig
from router.policy.model import Tier
from router.upstream.openai_compat import OpenAICompatUpstream
from tests.api.helpers import fake_requests, post
from tests.conftest import policy_text, serve_app, upstream_app

CALL_ID = "call_1"


def repeating_heads_app() -> web.Application:
    """Streams one tool call the way llama.cpp's Python server does: id and name in every delta."""

    async def chat(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for part in ('{"city": ', '"Paris"', "}"):
            delta = {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": CALL_ID,
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": part},
                    }
                ]
            }
            chunk = {"id": "c1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}
            await resp.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


@pytest.fixture
async def repeating() -> AsyncIterator[str]:
    runner = web.AppRunner(repeating_heads_app(), access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    await runner.cleanup()


async def test_repeated_tool_call_heads_are_dropped(repeating: str) -> None:
    up = OpenAICompatUpstream("fast", Tier(model="openai/m", api_base=repeating, warm_connections=0))
    await up.start()
    try:
        deadline = asyncio.get_running_loop().time() + 10
        body = {"model": "x", "messages": [{"role": "user", "content": "hi"}]}
        deltas = [c.data["choices"][0]["delta"]["tool_calls"][0] async for c in up.stream(body, deadline)]
    finally:
        await up.close()
    assert [d.get("id") for d in deltas] == [CALL_ID, None, None]
    name = "".join(d["function"].get("name", "") for d in deltas)
    args = "".join(d["function"]["arguments"] for d in deltas)
    assert (name, orjson.loads(args)) == ("get_weather", {"city": "Paris"})


async def test_params_override_and_defaults_fill_in(start_fake_) -> None:
    fake = await start_fake_(FakeConfig(seed=1))
    tier = Tier(
        model="openai/up-model",
        api_base=fake.url,
        warm_connections=0,
        params={"temperature": 0},
        defaults={"tool_choice": "auto", "max_tokens": 64},
    )
    up = OpenAICompatUpstream("fast", tier)
    await up.start()
    try:
        deadline = asyncio.get_running_loop().time() + 10
        tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
        await up.complete(
            {
                "model": "x",
                "messages": [{"role": "user", "content": "a"}],
                "temperature": 1,
                "max_tokens": 8,
                "tools": tools,
            },
            deadline,
        )
        await up.complete({"model": "x", "messages": [{"role": "user", "content": "b"}]}, deadline)
    finally:
        await up.close()
    with_tools, plain = [r["body"] for r in await fake_requests(fake.url)]
    assert (with_tools["model"], with_tools["temperature"], with_tools["max_tokens"]) == ("up-model", 0, 8)
    assert with_tools["tool_choice"] == "auto"
    assert plain["max_tokens"] == 64 and "tool_choice" not in plain  # a default tool_choice needs tools


async def test_null_content_beside_tool_calls_goes_upstream_as_empty_text(start_fake_) -> None:
    """llama-cpp-python refuses `content: null` (HTTP 500), which the OpenAI SDK sends back in every
    tool-calling loop; the meaning of "" is the same everywhere."""
    fake = await start_fake_(FakeConfig(seed=2))
    up = OpenAICompatUpstream("fast", Tier(model="openai/m", api_base=fake.url, warm_connections=0))
    await up.start()
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    history = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
        {"role": "assistant", "content": None},  # no calls: left as the client sent it
    ]
    try:
        await up.complete({"model": "x", "messages": history}, asyncio.get_running_loop().time() + 10)
    finally:
        await up.close()
    [seen] = await fake_requests(fake.url)
    assert [m.get("content", "absent") for m in seen["body"]["messages"]] == ["a", "", "done", None]
    assert history[1]["content"] is None  # the client's body is not changed in place


def traceback_app() -> web.Application:
    """An upstream whose 500 carries a Python traceback in its error message."""

    async def chat(request: web.Request) -> web.Response:
        message = 'model crashed\nTraceback (most recent call last):\n  File "/srv/secret_app.py", line 9\nKeyError'
        return web.json_response({"error": {"message": message, "type": "server_error"}}, status=500)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def test_upstream_tracebacks_never_reach_the_client(proxy_) -> None:
    runner = web.AppRunner(traceback_app(), access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
        proxy = await proxy_(policy_text(url, extra="escalation: {max_attempts: 1}\n"))
        raw = await post(
            proxy.url + "/chat/completions", {"model": "auto", "messages": [{"role": "user", "content": "x"}]}
        )
    finally:
        await runner.cleanup()
    message = orjson.loads(raw.body)["error"]["message"]
    assert raw.status == 502 and "model crashed" in message
    assert "Traceback" not in message and "secret_app" not in message


def test_upstream_text_keeps_one_clean_line() -> None:
    text = "litellm.APIConnectionError: boom\nTraceback (most recent call last):\n  File x\nsk-abcdefghijklmnop"
    assert upstream_text(text) == "litellm.APIConnectionError: boom"
    assert upstream_text("key sk-abcdefghijklmnop bad", ("zzz",)) == "key [redacted] bad"


async def test_idle_tiers_are_kept_warm_and_busy_ones_are_left_alone(start_fake_, proxy_) -> None:
    fake = await start_fake_(FakeConfig(seed=3))
    policy = policy_text(fake.url).replace("warm_connections: 1\n", "warm_connections: 1\n    keep_warm: 0.4\n", 1)
    proxy = await proxy_(policy)

    async def warm_ups() -> int:
        async with aiohttp.ClientSession() as s, s.get(fake.url.removesuffix("/v1") + "/_fake/requests") as r:
            log = await r.json()
        return sum(1 for e in log if e["path"] == "/v1/models")

    at_start = await warm_ups()
    idle = 0
    for _ in range(50):  # idle: keep-warm rounds of the fast tier every 0.4 s (bounded: 5 s)
        await asyncio.sleep(0.1)
        if (idle := await warm_ups() - at_start) >= 2:
            break
    assert idle >= 2, idle
    before = await warm_ups()
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0)
    async with client:
        loop = asyncio.get_running_loop()
        stop = loop.time() + 1.2
        while loop.time() < stop:  # busy: a call to the fast tier every 50 ms
            await client.chat.completions.create(model="fast", messages=[{"role": "user", "content": "hi"}])
            await asyncio.sleep(0.05)
    # the full tier (30 s default) never re-warms in this time, and the busy fast tier did not either
    assert await warm_ups() - before <= 1


async def test_keep_warm_waits_while_a_call_is_in_flight(start_fake_) -> None:
    """A call longer than `keep_warm` is not idleness: a single-threaded server (llama.cpp) busy with
    it would not answer the warm-up, and the log would fill with false alarms."""
    fake = await start_fake_(FakeConfig(seed=4, delay_ms=1500))
    up = OpenAICompatUpstream("fast", Tier(model="openai/m", api_base=fake.url, warm_connections=1, keep_warm=0.3))
    await up.start(warm=False)
    keeper = asyncio.create_task(up.keep_warm())

    async def warm_ups() -> int:
        async with aiohttp.ClientSession() as s, s.get(fake.url.removesuffix("/v1") + "/_fake/requests") as r:
            return sum(1 for e in await r.json() if e["path"] == "/v1/models")

    try:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        await up.complete(body, asyncio.get_running_loop().time() + 10)  # 1.5 s in flight
        during = await warm_ups()
        after = 0
        for _ in range(50):  # idle now: keep-warm goes on (bounded: 5 s)
            await asyncio.sleep(0.1)
            if (after := await warm_ups()) >= 1:
                break
    finally:
        keeper.cancel()
        await up.close()
    assert (during, after >= 1) == (0, True), (during, after)


async def test_tools_system_fills_in_a_system_message_only_where_missing(start_fake_) -> None:
    """llama-cpp-python's chatml-function-calling shows tools only inside a system message."""
    fake = await start_fake_(FakeConfig(seed=1))
    tier = Tier(model="openai/m", api_base=fake.url, warm_connections=0, tools_system="You are a helpful assistant.")
    up = OpenAICompatUpstream("fast", tier)
    await up.start()
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    user = {"role": "user", "content": "a"}
    own = {"role": "system", "content": "Be brief."}
    try:
        deadline = asyncio.get_running_loop().time() + 10
        for body in (
            {"messages": [user], "tools": tools},
            {"messages": [own, user], "tools": tools},
            {"messages": [user]},
        ):
            await up.complete({"model": "x", **body}, deadline)
    finally:
        await up.close()
    added, kept, no_tools = [r["body"]["messages"] for r in await fake_requests(fake.url)]
    assert added == [{"role": "system", "content": "You are a helpful assistant."}, user]
    assert kept == [own, user] and no_tools == [user]


def legacy_copy_app() -> web.Application:
    """Answers a tool call the way llama-cpp-python's server does: `tool_calls`, plus the legacy
    `function_call` with a stray ':' in its name."""

    async def chat(request: web.Request) -> web.Response:
        call = {"name": "get_weather", "arguments": '{"city": "Paris"}'}
        message = {
            "role": "assistant",
            "content": None,
            "function_call": {**call, "name": "get_weather:"},
            "tool_calls": [{"id": CALL_ID, "type": "function", "function": call}],
        }
        choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
        return web.json_response({"id": "c1", "object": "chat.completion", "model": "m", "choices": [choice]})

    return upstream_app({"/v1/chat/completions": chat})


async def test_the_legacy_function_call_copy_is_not_sent_to_tools_clients(proxy_) -> None:
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    async with serve_app(legacy_copy_app()) as url:
        proxy = await proxy_(policy_text(url))
        client = openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0)
        answer = await client.chat.completions.create(
            model="auto", messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[weather]
        )
        await client.close()
    message = answer.choices[0].message
    assert message.function_call is None
    assert [c.function.name for c in message.tool_calls or []] == ["get_weather"]


# ------------------------------------------------------------------------------ context (llama-server's)


async def test_context_window_and_token_counts_of_a_llama_server(start_fake_) -> None:
    llama = await start_fake_(FakeConfig(n_ctx=256))
    up = OpenAICompatUpstream("full", Tier(model="openai/m", api_base=llama.url, warm_connections=0,
                                           tools_system="Use the tools."))  # fmt: skip
    await up.start()
    try:
        deadline = asyncio.get_running_loop().time() + 10
        assert await up.context_window(deadline) == 256
        tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
        body = {"model": "x", "messages": [{"role": "user", "content": "How many tokens is this?"}], "tools": tools}
        counted = await up.count_tokens(body, deadline)
        answer = await up.complete(body, deadline)  # the count the tier itself makes of the same request
        assert counted == answer.data["usage"]["prompt_tokens"]
        assert counted is not None and counted > len(body["messages"][0]["content"]) // 4  # tools_system included
        with pytest.raises(ContextExceeded) as info:
            await up.complete({"model": "x", "messages": [{"role": "user", "content": "a." * 200}]}, deadline)
        error = info.value
        assert (error.window, error.tier, error.http_status) == (256, "full", 400)
        assert error.prompt_tokens is not None and error.prompt_tokens > 400  # "a" and "." are a token each
    finally:
        await up.close()


async def test_a_server_without_a_tokenizer_or_a_window_says_none(start_fake_) -> None:
    plain = await start_fake_()  # as llama-cpp-python's server: no /props, /apply-template, /tokenize
    up = OpenAICompatUpstream("fast", Tier(model="openai/m", api_base=plain.url, warm_connections=0))
    await up.start()
    try:
        deadline = asyncio.get_running_loop().time() + 10
        body = {"model": "x", "messages": [{"role": "user", "content": "hi"}]}
        assert await up.context_window(deadline) is None
        assert await up.count_tokens(body, deadline) is None
        assert await up.count_tokens(body, deadline) is None
    finally:
        await up.close()


async def test_max_output_tokens_caps_what_a_request_asks_and_fills_in_where_it_asks_nothing(start_fake_) -> None:
    fake = await start_fake_(FakeConfig(seed=1))
    tier = Tier(model="openai/m", api_base=fake.url, warm_connections=0, max_output_tokens=100)
    up = OpenAICompatUpstream("fast", tier)
    await up.start()
    user = [{"role": "user", "content": "a"}]
    try:
        deadline = asyncio.get_running_loop().time() + 10
        for limits in ({"max_tokens": 128_000}, {"max_tokens": 8}, {}, {"max_completion_tokens": 500}):
            await up.complete({"model": "x", "messages": user, **limits}, deadline)
    finally:
        await up.close()
    sent = [{k: v for k, v in r["body"].items() if k.startswith("max_")} for r in await fake_requests(fake.url)]
    assert sent == [{"max_tokens": 100}, {"max_tokens": 8}, {"max_tokens": 100}, {"max_completion_tokens": 100}]

"""Salvage end to end: a tool call written as text comes out as a tool call, on every transport,
streamed or not, with no extra model call; what fails salvage escalates as before.

The fast tier is a scripted upstream that answers every request with the same text (streamed in
small pieces when asked); the full tier is the healthy fake, whose request log shows whether it was
ever needed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import orjson
import pytest
from aiohttp import web

from router.core.checks.validate import Validator
from router.fake import FakeConfig
from router.flow.salvage import salvaged_message
from tests.api.helpers import TOOLS, USER, assert_valid_weather_call, fake_requests, get, post, stream_reassembled
from tests.conftest import policy_text, serve_app, upstream_app
from tests.sweeps import SHELL_TOOLS, SWEEP_TEXT

ESCALATE = "escalation: {to: full}\n"
CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
FORMS = {
    "fence": f"```json\n{CALL}\n```",
    "qwen-tags": f"<tool_call>\n{CALL}\n</tool_call>",
    "bare": CALL,
    "string-arguments": '{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}',
    "cut-short": '{"name": "get_weather", "arguments": {"city": "Paris"}',  # the model stopped one brace early
}
NOT_SALVAGED = {
    "schema": '{"name": "get_weather", "arguments": {"town": "Paris"}}',  # `city` is required
    "one-of-two-bad": f'[{CALL}, {{"name": "get_weather", "arguments": {{}}}}]',  # all or nothing
    "not-an-object": '{"name": "get_weather", "arguments": ["Paris"]}',
    "cut-in-a-string": '{"name": "get_weather", "arguments": {"city": "Par',
    "unknown-name": '```json\n{"name": "df -h", "arguments": {"path": "/"}}\n```',
}


def routes(salvage: bool = True) -> str:
    return f"""
    routes:
      - name: tools
        when: {{tools: {{present: true}}}}
        use: fast
        salvage: {"true" if salvage else "false"}
      - name: default
        use: full
    """


def text_app(text: str, seen: list[dict[str, Any]]) -> web.Application:
    """Answers every chat request with `text` as content (in 8-character deltas when streaming)."""

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen.append(body)
        message = {"role": "assistant", "content": text}
        if not body.get("stream"):
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
            return web.json_response({"id": "c", "object": "chat.completion", "model": "m", "choices": [choice]})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        deltas = [{"role": "assistant"}, *({"content": text[i : i + 8]} for i in range(0, len(text), 8))]
        for delta, finish in [*((d, None) for d in deltas), ({}, "stop")]:
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
async def writer(request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []
    async with serve_app(text_app(request.param, seen)) as url:
        yield url, seen


async def _proxy(proxy_, start_fake_, fast_url: str, salvage: bool = True):
    full = await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(policy_text(fast_url, full.url, routes=routes(salvage), extra=ESCALATE))
    return proxy, full


async def _salvaged_count(proxy) -> int:
    await proxy.runtime.store.flush()
    stats = (await get(proxy.url + "/router/stats")).json()
    return int(stats["routes"]["tools"]["salvaged"])


@pytest.mark.parametrize("writer", list(FORMS.values()), ids=list(FORMS), indirect=True)
@pytest.mark.parametrize("stream", [False, True])
async def test_a_text_call_becomes_a_tool_call(writer, start_fake_, proxy_, sdk, stream: bool) -> None:
    url, seen = writer
    proxy, full = await _proxy(proxy_, start_fake_, url)
    client = sdk(proxy.url)
    if stream:
        async with client.chat.completions.with_streaming_response.create(
            model="auto", messages=USER, tools=TOOLS, stream=True
        ) as raw:
            headers = raw.headers
            got = await stream_reassembled(await raw.parse())
        [call] = got["calls"].values()
        assert call["id"].startswith("call_") and got["finishes"] == ["tool_calls"] and not got["content"]
        name, arguments = call["name"], call["arguments"]
    else:
        raw = await client.chat.completions.with_raw_response.create(model="auto", messages=USER, tools=TOOLS)
        headers, message = raw.headers, raw.parse().choices[0].message
        [tc] = message.tool_calls or []
        assert raw.parse().choices[0].finish_reason == "tool_calls" and not message.content
        name, arguments = tc.function.name, tc.function.arguments
    assert_valid_weather_call(name, arguments)
    assert orjson.loads(arguments) == {"city": "Paris"}
    assert (headers["x-router-tier"], headers["x-router-escalated"]) == ("fast", "false")
    assert (headers["x-router-salvaged"], headers["x-router-mistakes"]) == ("true", "")
    assert len(seen) == 1 and await fake_requests(full.url) == []  # no extra model call
    assert await _salvaged_count(proxy) == 1


@pytest.mark.parametrize("writer", list(NOT_SALVAGED.values()), ids=list(NOT_SALVAGED), indirect=True)
async def test_what_fails_salvage_escalates(writer, start_fake_, proxy_) -> None:
    url, _ = writer
    proxy, full = await _proxy(proxy_, start_fake_, url)
    raw = await post(proxy.url + "/chat/completions", {"model": "auto", "messages": USER, "tools": TOOLS})
    h = raw.headers
    assert (h["x-router-tier"], h["x-router-escalated"], h["x-router-salvaged"]) == ("full", "true", "false")
    [call] = raw.json()["choices"][0]["message"]["tool_calls"]
    assert_valid_weather_call(call["function"]["name"], call["function"]["arguments"])
    assert len(await fake_requests(full.url)) == 1
    assert await _salvaged_count(proxy) == 0


@pytest.mark.parametrize("writer", [FORMS["fence"]], indirect=True)
async def test_salvage_false_escalates_the_text_call(writer, start_fake_, proxy_) -> None:
    url, _ = writer
    proxy, _full = await _proxy(proxy_, start_fake_, url, salvage=False)
    raw = await post(proxy.url + "/chat/completions", {"model": "auto", "messages": USER, "tools": TOOLS})
    h = raw.headers
    assert (h["x-router-tier"], h["x-router-mistakes"], h["x-router-salvaged"]) == ("full", "text_tool_call", "false")


@pytest.mark.parametrize("writer", [FORMS["qwen-tags"]], indirect=True)
async def test_the_last_tier_is_salvaged_too(writer, proxy_) -> None:
    url, _ = writer
    only_fast = "routes:\n  - name: tools\n    use: fast\n"
    proxy = await proxy_(policy_text(url, url, routes=only_fast))
    raw = await post(proxy.url + "/chat/completions", {"model": "auto", "messages": USER, "tools": TOOLS})
    assert raw.headers["x-router-salvaged"] == "true"
    [call] = raw.json()["choices"][0]["message"]["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city":"Paris"}'}


@pytest.mark.parametrize("writer", [FORMS["fence"]], indirect=True)
@pytest.mark.parametrize("stream", [False, True])
async def test_responses_clients_get_a_function_call(writer, start_fake_, proxy_, sdk, stream: bool) -> None:
    url, _ = writer
    proxy, full = await _proxy(proxy_, start_fake_, url)
    client = sdk(proxy.url)
    if stream:
        events = [
            e
            async for e in await client.responses.create(
                model="auto", input="Weather in Paris?", tools=TOOLS, stream=True
            )
        ]
        output = events[-1].response.output
    else:
        output = (await client.responses.create(model="auto", input="Weather in Paris?", tools=TOOLS)).output
    [item] = output
    assert item.type == "function_call" and orjson.loads(item.arguments) == {"city": "Paris"}
    assert await fake_requests(full.url) == []


@pytest.mark.parametrize("writer", [FORMS["bare"]], indirect=True)
@pytest.mark.parametrize("stream", [False, True])
async def test_messages_clients_get_a_tool_use_block(writer, start_fake_, proxy_, stream: bool) -> None:
    url, _ = writer
    proxy, full = await _proxy(proxy_, start_fake_, url)
    tools = [{"name": "get_weather", "input_schema": TOOLS[0]["function"]["parameters"]}]
    async with anthropic.AsyncAnthropic(base_url=proxy.base, api_key="x", max_retries=0) as client:
        args: dict[str, Any] = {"model": "auto", "max_tokens": 64, "messages": USER, "tools": tools}
        if stream:
            async with client.messages.stream(**args) as s:
                message = await s.get_final_message()
        else:
            message = await client.messages.create(**args)
    [block] = message.content
    assert block.type == "tool_use" and block.name == "get_weather" and block.input == {"city": "Paris"}
    assert message.stop_reason == "tool_use"
    assert await fake_requests(full.url) == []


def test_prose_around_the_call_is_kept_and_wrappers_dropped() -> None:
    request = {"messages": USER, "tools": TOOLS}
    text = f"Let me check.\n```json\n{CALL}\n```"
    fixed = salvaged_message({"role": "assistant", "content": text}, request, {"get_weather"}, Validator())
    assert fixed is not None and fixed["content"] == "Let me check."
    other = CALL.replace("Paris", "Lyon")
    two = f"[{CALL}, {other}]"
    fixed = salvaged_message({"role": "assistant", "content": two}, request, {"get_weather"}, Validator())
    assert fixed is not None and len(fixed["tool_calls"]) == 2 and fixed["content"] is None
    looped = "\n".join([CALL.replace('"Paris"', '"Paris" ')] + [CALL] * 39)  # one call written 40 times
    fixed = salvaged_message({"role": "assistant", "content": looped}, request, {"get_weather"}, Validator())
    assert fixed is not None and [c["function"]["arguments"] for c in fixed["tool_calls"]] == ['{"city":"Paris"}']
    stray = f"{CALL}\n{{}}\n```"  # seen from Qwen2.5-Coder: a trailing empty object
    fixed = salvaged_message({"role": "assistant", "content": stray}, request, {"get_weather"}, Validator())
    assert fixed is not None and fixed["content"] is None
    none = {**request, "tool_choice": "none"}
    assert salvaged_message({"role": "assistant", "content": CALL}, none, {"get_weather"}, Validator()) is None
    plain = {"role": "assistant", "content": "It is sunny in Paris."}
    assert salvaged_message(plain, request, {"get_weather"}, Validator()) is None


def test_a_sweep_written_as_text_is_not_salvaged() -> None:
    """Each of its calls validates, the whole answer does not: a sweep is judged as the text it is
    (`tool_sweep`, tests/flow/test_pipeline.py), never made eight calls."""
    request = {"model": "auto", "messages": USER, "tools": SHELL_TOOLS}
    names = {t["function"]["name"] for t in SHELL_TOOLS}
    assert salvaged_message({"role": "assistant", "content": SWEEP_TEXT}, request, names, Validator()) is None
    first = SWEEP_TEXT.split(",\n")[0]  # one of its calls alone salvages
    assert salvaged_message({"role": "assistant", "content": first}, request, names, Validator()) is not None


def test_a_sign_written_as_text_is_salvaged() -> None:
    """The agent's last call again, written as text (the sticky 1.5B's, turn after turn): the call it
    is, judged afterwards as a `repeated_call` — not a `text_tool_call` to repair into the same call."""
    made = {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    turn = [{"role": "assistant", "content": None, "tool_calls": [made]},
            {"role": "tool", "tool_call_id": "call_0", "content": "sunny"}]  # fmt: skip
    request = {"model": "auto", "messages": USER + turn, "tools": TOOLS}
    message = {"role": "assistant", "content": CALL}
    assert [m.kind for m in Validator().check(message, request)] == ["text_tool_call"]
    fixed = salvaged_message(message, request, {"get_weather"}, Validator())
    assert fixed is not None and fixed["tool_calls"][0]["function"]["arguments"] == '{"city":"Paris"}'
    assert [m.kind for m in Validator().check(fixed, request, finish_reason="tool_calls")] == ["repeated_call"]

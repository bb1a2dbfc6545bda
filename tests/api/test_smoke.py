"""The proxy end to end against the fake upstream, through the official openai SDK."""

from __future__ import annotations

import httpx
import openai
import pytest

from router.fake import FakeConfig
from tests.conftest import policy_text

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


async def test_text_and_tool_call_json_and_stream(fake, proxy_) -> None:
    proxy = await proxy_(policy_text(fake.url, extra="escalation: {to: full}\n"))
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0)
    raw = await client.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": "hi"}]
    )
    assert raw.headers["x-router-tier"] == "full"
    assert raw.headers["x-router-route"] == "default"
    assert raw.parse().choices[0].message.content
    stream = await client.chat.completions.create(
        model="auto", messages=[{"role": "user", "content": "weather?"}], tools=TOOLS, stream=True
    )
    calls = {}
    async for chunk in stream:
        for tc in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            calls.setdefault(tc.index, "")
            calls[tc.index] += tc.function.arguments or ""
    assert calls and all(args.startswith("{") for args in calls.values())


async def test_root_answers_get_and_head_with_a_pointer_to_v1(fake, proxy_) -> None:
    """Claude Code probes reachability with HEAD /; a person opening the URL gets a pointer."""
    proxy = await proxy_(policy_text(fake.url))
    async with httpx.AsyncClient() as http:
        head = await http.head(proxy.base + "/")
        got = await http.get(proxy.base + "/")
    assert head.status_code == 200 and head.content == b""
    assert got.status_code == 200 and got.json()["api"] == "/v1"


async def test_access_log_has_one_line_per_request(fake, proxy_, caplog) -> None:
    proxy = await proxy_(policy_text(fake.url, extra="escalation: {to: full}\n"))
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0)
    with caplog.at_level("INFO", logger="router.access"):
        await client.chat.completions.create(model="auto", messages=[{"role": "user", "content": "hi"}])
        stream = await client.chat.completions.create(
            model="auto", messages=[{"role": "user", "content": "weather?"}], tools=TOOLS, stream=True
        )
        async for _ in stream:
            pass
        with_error = openai.AsyncOpenAI(base_url=proxy.base + "/nowhere", api_key="x", max_retries=0)
        with pytest.raises(openai.NotFoundError):
            await with_error.models.list()
    lines = [r.getMessage() for r in caplog.records if r.name == "router.access"]
    assert len(lines) == 3, lines
    assert lines[0].startswith("POST /v1/chat/completions 200 tier=full route=default escalated=false ")
    assert lines[1].startswith("POST /v1/chat/completions 200 tier=fast route=simple-tool-call escalated=false ")
    assert lines[2].startswith("GET /nowhere/models 404 tier=- route=- escalated=- ")
    assert all(line.endswith("ms") for line in lines)


async def test_access_log_names_the_tier_and_route_of_a_failed_call(start_fake_, proxy_, caplog) -> None:
    short = await start_fake_(FakeConfig(n_ctx=16))  # a prompt too long for it: its 400
    broken = await start_fake_(FakeConfig(error_rate=1.0))  # HTTP 500 on every call
    routes = "routes:\n  - {name: tools, when: {tools: {present: true}}, use: fast}\n  - {name: default, use: full}\n"
    proxy = await proxy_(policy_text(broken.url, short.url, routes=routes, breakers=False))
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0)
    with caplog.at_level("INFO", logger="router.access"):
        with pytest.raises(openai.BadRequestError):
            await client.chat.completions.create(model="auto", messages=[{"role": "user", "content": "word " * 50}])
        with pytest.raises(openai.APIStatusError):
            await client.chat.completions.create(model="auto", messages=[{"role": "user", "content": "x"}], tools=TOOLS)
    lines = [r.getMessage() for r in caplog.records if r.name == "router.access"]
    assert lines[0].startswith("POST /v1/chat/completions 400 tier=full route=default escalated=false "), lines
    assert lines[1].startswith("POST /v1/chat/completions 502 tier=fast route=tools escalated=false "), lines


async def test_access_log_can_be_turned_off(fake, proxy_, caplog) -> None:
    proxy = await proxy_(policy_text(fake.url), access_log=False)
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0)
    with caplog.at_level("INFO", logger="router.access"):
        await client.chat.completions.create(model="auto", messages=[{"role": "user", "content": "hi"}])
    assert [r for r in caplog.records if r.name == "router.access"] == []

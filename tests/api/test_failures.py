"""Failures an agent can live with, over every API: a call whose every attempt failed the checks tells
the client its routing (`x-router-*` headers) and, in a stream, what it already has; a repeat of it is
resampled, then refused at once (router/core/live/repeats.py); a WebSocket turn has its access log line;
streamed text names a namespaced tool as the client does. Real servers: the router in front of fakes.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import orjson
import pytest

from router.fake import FakeConfig
from tests.api.helpers import TOOLS, USER, fake_requests, get, post, sse, trailer
from tests.conftest import policy_text
from tests.responses.conftest import WEATHER as RESPONSES_WEATHER
from tests.responses.conftest import recv_response

ANNOUNCED = FakeConfig(bad_tool_rate=1.0, bad_kinds=("missing_tool_call",))  # "I will call <tool> now."
ANNOUNCED_TOO = dataclasses.replace(ANNOUNCED, seed=2)
TWICE = "escalation: {to: full, max_attempts: 2}\n"
MESSAGES_TOOLS = [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {}}}}]

# The same question in each API: path, body (streamed or not), the error of a stream as it arrives.
APIS: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/chat/completions", {"model": "auto", "messages": USER, "tools": TOOLS}),
    "responses": ("/responses", {"model": "auto", "input": "Weather in Paris?", "tools": [RESPONSES_WEATHER]}),
    "messages": ("/messages", {"model": "auto", "max_tokens": 64, "messages": USER, "tools": MESSAGES_TOOLS}),
}


def stream_error(api: str, raw: bytes) -> str:
    """The error message a stream ended with, in the API's own shape."""
    data, _, _ = sse(raw)
    if api == "chat":
        [error] = [d["error"] for d in data if "error" in d]
        return str(error["message"])
    [error] = [d for d in data if d.get("type") == "error"]
    return str(error["error"]["message"] if api == "messages" else error["message"])


def streamed_text(api: str, raw: bytes) -> str:
    data, _, _ = sse(raw)
    if api == "chat":
        return "".join(d["choices"][0]["delta"].get("content") or "" for d in data if d.get("choices"))
    if api == "responses":
        return "".join(d["delta"] for d in data if d.get("type") == "response.output_text.delta")
    return "".join(d["delta"].get("text", "") for d in data if d.get("type") == "content_block_delta")


@pytest.mark.parametrize("api", APIS)
async def test_an_exhausted_call_names_its_routing_and_a_stream_what_was_already_sent(
    start_fake_, proxy_, api: str
) -> None:
    fast, full = await start_fake_(ANNOUNCED), await start_fake_(ANNOUNCED_TOO)
    proxy = await proxy_(policy_text(fast.url, full.url, extra=TWICE))
    path, body = APIS[api]
    raw = await post(proxy.url + path, body)
    assert raw.status == 502 and "nothing was delivered" in raw.body.decode()
    h = raw.headers
    assert (h["x-router-tier"], h["x-router-route"], h["x-router-escalated"]) == ("full", "simple-tool-call", "true")
    assert (h["x-router-mistakes"], h["x-router-exhausted"]) == ("missing_tool_call,missing_tool_call", "true")
    assert h["x-should-retry"] == "true"
    # streamed (the same question: a repeat, resampled, broken again), the announcement went out as it
    # came: the error must not say that nothing did
    raw = await post(proxy.url + path, {**body, "stream": True})
    assert raw.status == 200 and raw.headers["x-router-repeat"] == "resampled"
    assert "I will call get_weather now." in streamed_text(api, raw.body)
    message = stream_error(api, raw.body)
    assert "no tool call was delivered, only the text already streamed" in message, message
    assert "nothing was delivered" not in message
    assert trailer(raw.body)["exhausted"] is True


async def test_a_repeat_is_resampled_then_refused_at_once(start_fake_, proxy_) -> None:
    fast, full = await start_fake_(ANNOUNCED), await start_fake_(ANNOUNCED_TOO)
    proxy = await proxy_(policy_text(fast.url, full.url, extra=TWICE))
    path, body = APIS["chat"]
    seen = []
    for _ in range(4):  # the agent retrying the same request, as its SDK does
        raw = await post(proxy.url + path, body)
        assert raw.status == 502
        seen.append((raw.headers.get("x-router-repeat"), raw.headers["x-should-retry"]))
    assert seen == [(None, "true"), ("resampled", "true"), ("resampled", "false"), ("refused", "false")]
    assert "change the request" in raw.json()["error"]["message"]
    sent = [r["body"] for r in await fake_requests(full.url)]
    assert len(await fake_requests(fast.url)) == 1  # the repeats start on the strongest tier
    assert [b.get("temperature") for b in sent] == [None, 0.7, 0.7, 0.7, 0.7]  # the refused one sent nothing
    metrics = (await get(proxy.base + "/metrics")).body.decode()
    assert 'router_repeats_total{outcome="resampled",route="simple-tool-call"} 2.0' in metrics
    assert 'router_repeats_total{outcome="refused",route="simple-tool-call"} 1.0' in metrics


async def test_a_greedy_repeat_tier_is_told_not_to_retry_at_once(start_fake_, proxy_) -> None:
    """full, the tier a repeat would run on, pins temperature 0: resampled there, a repeat could not
    differ, so the first error already says not to retry, and the repeat is refused with no call."""
    fast, full = await start_fake_(ANNOUNCED), await start_fake_(ANNOUNCED_TOO)
    pinned = "model: openai/full-model\n    params: {temperature: 0}"
    proxy = await proxy_(policy_text(fast.url, full.url, extra=TWICE).replace("model: openai/full-model", pinned))
    path, body = APIS["chat"]
    seen, messages = [], []
    for _ in range(2):
        raw = await post(proxy.url + path, body)
        assert raw.status == 502
        seen.append((raw.headers.get("x-router-repeat"), raw.headers["x-should-retry"]))
        messages.append(raw.json()["error"]["message"])
    assert seen == [(None, "false"), ("refused", "false")]
    assert all("answer greedily (temperature 0 on full" in m and "change the request" in m for m in messages)
    assert len(await fake_requests(fast.url)) == len(await fake_requests(full.url)) == 1


async def test_a_websocket_turn_has_its_access_log_line(start_fake_, proxy_, sdk, caplog) -> None:
    fast, full = await start_fake_(ANNOUNCED), await start_fake_(ANNOUNCED_TOO)  # text answers are fine
    proxy = await proxy_(policy_text(fast.url, full.url, extra=TWICE))
    with caplog.at_level(logging.INFO, logger="router.access"):
        async with sdk(proxy.url).responses.connect() as conn:
            await conn.response.create(model="auto", input="Hi!")
            assert (await recv_response(conn))[-1].type == "response.completed"
            await conn.response.create(model="auto", input="Weather?", tools=[RESPONSES_WEATHER])
            assert (await recv_response(conn))[-1].type == "error"  # every attempt failed the checks
    lines = [r.getMessage() for r in caplog.records if r.name == "router.access"]
    assert lines[0].startswith("WS /v1/responses 200 tier=full route=default escalated=false "), lines
    assert lines[1].startswith("WS /v1/responses 502 tier=full route=simple-tool-call escalated=true "), lines
    assert lines[2].startswith("WS /v1/responses 101 tier=- route=- escalated=- "), lines  # the connection
    assert len(lines) == 3 and all(line.endswith("ms") for line in lines)


NAMESPACED = [
    {"type": "namespace", "name": "clock", "description": "time", "tools": [
        {"type": "function", "name": "sleep", "parameters": {"type": "object", "properties": {"s": {"type": "number"}}}}
    ]},
]  # fmt: skip


@pytest.mark.parametrize("transport", ["sse", "websocket"])
async def test_streamed_text_names_a_namespaced_tool_as_the_client_does(start_fake_, proxy_, sdk, transport) -> None:
    """The tier knows `clock.sleep` as `clock__sleep` and announces it so; Codex reads `clock.sleep`."""
    config = FakeConfig(bad_tool_rate=1.0, bad_kinds=("missing_tool_call",), prefer_tools=("clock__sleep",))
    fast, full = await start_fake_(config), await start_fake_(FakeConfig(prefer_tools=("clock__sleep",)))
    proxy = await proxy_(policy_text(fast.url, full.url, extra=TWICE))
    body = {"model": "auto", "input": "Wait a second", "tools": NAMESPACED}
    if transport == "sse":
        raw = await post(proxy.url + "/responses", {**body, "stream": True})
        data, _, _ = sse(raw.body)
        events: list[dict[str, Any]] = data
    else:
        async with sdk(proxy.url).responses.connect() as conn:
            await conn.response.create(**body)
            events = [orjson.loads(e.model_dump_json()) for e in await recv_response(conn)]
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text.startswith("I will call clock.sleep now."), text
    assert "clock__sleep" not in orjson.dumps(events).decode()
    [call] = [o for o in events[-1]["response"]["output"] if o["type"] == "function_call"]
    assert (call["namespace"], call["name"]) == ("clock", "sleep")

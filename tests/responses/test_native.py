"""Responses calls passed through to a tier that serves the Responses API itself (`apis: [responses]`),
with the official openai SDK over HTTP, SSE and WebSocket mode, in front of the fake upstream's
/v1/responses."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from router.fake import FakeConfig
from tests.api.helpers import assert_valid_weather_call, fake_requests, get, post
from tests.conftest import policy_text
from tests.responses.conftest import CALL_ITEM, TEXT_ITEM, TOOLS, WEATHER, assert_order, recv_response


def native_policy(fast_url: str, full_url: str, *, native: str = "full") -> str:
    """fast/full with escalation to full; the `native` tier serves Responses itself."""
    text = policy_text(fast_url, full_url, extra="escalation: {to: full}\n")
    marker = f"    model: openai/{native}-model\n"
    assert marker in text
    return text.replace(marker, marker + "    apis: [responses]\n", 1)


async def test_text_turns_go_through_with_the_chain_written_out(start_fake_, proxy_, sdk) -> None:
    fast = await start_fake_(FakeConfig(seed=1))
    full = await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(native_policy(fast.url, full.url))
    client = sdk(proxy.url)
    raw = await client.responses.with_raw_response.create(model="auto", input="Hello there", instructions="Be brief.")
    first = raw.parse()
    assert raw.headers["x-router-tier"] == "full"
    assert first.status == "completed" and len(first.output_text.split()) == 12
    second = await client.responses.create(model="auto", previous_response_id=first.id, input="And then?")
    assert second.output_text and second.id != first.id
    assert await fake_requests(full.url) == []  # nothing went to the chat endpoint
    sent = [r["body"] for r in await fake_requests(full.url, path="/v1/responses")]
    assert [b["store"] for b in sent] == [False, False]  # the router keeps the state
    assert all("previous_response_id" not in b for b in sent)  # the tier never sees the router's ids
    assert sent[0]["input"] == "Hello there" and sent[0]["instructions"] == "Be brief."
    history = sent[1]["input"]
    assert [(i["type"], i.get("role")) for i in history] == [
        ("message", "user"), ("message", "assistant"), ("message", "user"),
    ]  # fmt: skip
    assert history[1]["content"][0]["text"] == first.output_text


async def test_a_broken_fast_call_escalates_to_the_native_tier_invisibly(start_fake_, proxy_, sdk) -> None:
    fast = await start_fake_(FakeConfig(seed=3, bad_tool_rate=1.0, bad_kinds=("invalid_json",)))
    full = await start_fake_(FakeConfig(seed=4))
    proxy = await proxy_(native_policy(fast.url, full.url))
    raw = await sdk(proxy.url).responses.with_raw_response.create(model="auto", input="Weather in Paris?", tools=TOOLS)
    assert (raw.headers["x-router-tier"], raw.headers["x-router-mistakes"]) == ("full", "invalid_json")
    [call] = raw.parse().output
    assert call.type == "function_call"
    assert_valid_weather_call(call.name, call.arguments)

    body = {"model": "auto", "input": "Weather in Rome?", "tools": TOOLS, "stream": True}
    streamed = await post(proxy.url + "/responses", body)
    events = [orjson.loads(line[6:]) for line in streamed.body.split(b"\n") if line.startswith(b"data: ")]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert_order([e["type"] for e in events], CALL_ITEM)
    done = events[-1]["response"]
    assert done["id"].startswith("resp_") and [i["type"] for i in done["output"]] == ["function_call"]
    assert_valid_weather_call(done["output"][0]["name"], done["output"][0]["arguments"])
    assert all(e.get("output_index", 0) == 0 for e in events)
    assert streamed.headers["x-router-tier"] == "full"
    assert [e["response"]["model"] for e in events if "response" in e] == ["full-model"] * 3


async def test_the_native_tier_is_checked_like_any_other(start_fake_, proxy_, sdk) -> None:
    fast = await start_fake_(FakeConfig(seed=5, bad_tool_rate=1.0, bad_kinds=("schema_violation",)))
    full = await start_fake_(FakeConfig(seed=6))
    proxy = await proxy_(native_policy(fast.url, full.url, native="fast"))
    client = sdk(proxy.url)
    raw = await client.responses.with_raw_response.create(model="auto", input="Weather in Oslo?", tools=TOOLS)
    assert (raw.headers["x-router-tier"], raw.headers["x-router-mistakes"]) == ("full", "schema_violation")
    assert_valid_weather_call(raw.parse().output[0].name, raw.parse().output[0].arguments)
    async with client.responses.stream(model="auto", input="Weather in Lima?", tools=TOOLS) as stream:
        kinds = [e.type async for e in stream]
        final = await stream.get_final_response()
    assert kinds.count("response.created") == 1 and kinds.count("response.output_item.added") == 1
    assert_valid_weather_call(final.output[0].name, final.output[0].arguments)  # full's, not fast's
    native = [r["body"] for r in await fake_requests(fast.url, path="/v1/responses")]
    assert len(native) == 2 and all(b["tools"] == TOOLS for b in native)  # fast got the request itself


async def test_websocket_turns_on_a_native_tier(start_fake_, proxy_, sdk) -> None:
    fast = await start_fake_(FakeConfig(seed=7))
    full = await start_fake_(FakeConfig(seed=8))
    proxy = await proxy_(native_policy(fast.url, full.url))
    async with sdk(proxy.url).responses.connect() as conn:
        await conn.response.create(model="auto", input="Hi")
        first = await recv_response(conn)
        assert [e.sequence_number for e in first] == list(range(len(first)))
        assert_order([e.type for e in first], TEXT_ITEM)
        await conn.response.create(model="auto", previous_response_id=first[-1].response.id, input="More")
        second = await recv_response(conn)
        assert second[-1].type == "response.completed" and second[-1].response.output_text
    sent: list[Any] = [r["body"] for r in await fake_requests(full.url, path="/v1/responses")]
    assert [len(b["input"]) if isinstance(b["input"], list) else 1 for b in sent] == [1, 3]
    assert all(b["stream"] is True for b in sent)


def _left_out(metrics: str) -> list[str]:
    return [line for line in metrics.splitlines() if line.startswith("router_left_out_total{")]


@pytest.mark.parametrize("stream", [False, True])
async def test_hosted_tools_are_named_dropped_only_when_a_chat_tier_answered(start_fake_, proxy_, sdk, stream) -> None:
    """web_search is left out only of what a chat tier sees: `x-router-dropped-tools` and
    `router_left_out_total` name it when the chat tier answered, not after an escalation to the tier
    that took the request (and the hosted tool) as it came."""
    good = await start_fake_(FakeConfig(seed=11))
    bad = await start_fake_(FakeConfig(seed=12, bad_tool_rate=1.0, bad_kinds=("invalid_json",)))
    full = await start_fake_(FakeConfig(seed=13))
    body = {"model": "auto", "input": "Weather in Paris?", "tools": [{"type": "web_search"}, WEATHER], "stream": stream}

    escalated = await proxy_(native_policy(bad.url, full.url))
    raw = await post(escalated.url + "/responses", body)
    assert raw.status == 200
    assert (raw.headers["x-router-tier"], raw.headers["x-router-mistakes"]) == ("full", "invalid_json")
    assert "x-router-dropped-tools" not in raw.headers
    [native] = [r["body"] for r in await fake_requests(full.url, path="/v1/responses")]
    assert {"type": "web_search"} in native["tools"]  # the tier that answered got it
    assert _left_out((await get(escalated.base + "/metrics")).body.decode()) == []
    if stream:  # WebSocket mode counts as HTTP does
        async with sdk(escalated.url).responses.connect() as conn:
            await conn.response.create(model="auto", input="Weather in Rome?", tools=body["tools"])
            assert (await recv_response(conn))[-1].type == "response.completed"
        assert _left_out((await get(escalated.base + "/metrics")).body.decode()) == []

    answered = await proxy_(native_policy(good.url, full.url))
    raw = await post(answered.url + "/responses", body)
    assert (raw.headers["x-router-tier"], raw.headers["x-router-dropped-tools"]) == ("fast", "web_search")
    metrics = _left_out((await get(answered.base + "/metrics")).body.decode())
    assert metrics == ['router_left_out_total{api="responses",part="tool",type="web_search"} 1.0']

"""POST /v1/responses through the official openai SDK: JSON, SSE, tool loops, escalation, errors."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import openai
import orjson
import pytest

from router.fake import FakeConfig
from tests.api.helpers import assert_valid_weather_call, fake_requests, get, post, sse
from tests.conftest import policy_text
from tests.responses.conftest import CALL_ITEM, TEXT_ITEM, TOOLS, WEATHER, assert_order, fake_stats

ESCALATE = "escalation: {to: full}\n"


async def test_json_text_and_headers(fake, proxy_, sdk) -> None:
    proxy = await proxy_(policy_text(fake.url, extra=ESCALATE))
    client = sdk(proxy.url)
    raw = await client.responses.with_raw_response.create(model="auto", input="hi", instructions="Be brief.")
    assert raw.headers["x-router-tier"] == "full" and raw.headers["x-router-route"] == "default"
    assert raw.headers["x-router-escalated"] == "false" and raw.headers["x-router-mistakes"] == ""
    response = raw.parse()
    assert response.id.startswith("resp_") and response.status == "completed"
    assert response.output_text and response.instructions == "Be brief."
    assert response.usage is not None and response.usage.output_tokens > 0
    [sent] = await fake_requests(fake.url)
    assert sent["body"]["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]


async def test_json_function_call(fake, proxy_, sdk) -> None:
    proxy = await proxy_(policy_text(fake.url, extra=ESCALATE))
    response = await sdk(proxy.url).responses.create(model="auto", input="Weather in Paris?", tools=TOOLS)
    [call] = response.output
    assert call.type == "function_call" and call.call_id and call.status == "completed"
    assert_valid_weather_call(call.name, call.arguments)
    [sent] = await fake_requests(fake.url)
    assert sent["body"]["tools"] == [
        {"type": "function", "function": {k: TOOLS[0][k] for k in ("name", "description", "parameters")}}
    ]


async def test_escalation_is_visible_in_headers(start_fake_, proxy_, sdk) -> None:
    fast = await start_fake_(FakeConfig(seed=1, bad_tool_rate=1.0, bad_kinds=("invalid_json",)))
    full = await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(policy_text(fast.url, full.url, extra=ESCALATE))
    client = sdk(proxy.url)
    raw = await client.responses.with_raw_response.create(model="auto", input="Weather in Paris?", tools=TOOLS)
    assert raw.headers["x-router-tier"] == "full" and raw.headers["x-router-escalated"] == "true"
    assert "invalid_json" in raw.headers["x-router-mistakes"].split(",")
    [call] = raw.parse().output
    assert_valid_weather_call(call.name, call.arguments)
    stream = await client.responses.create(model="auto", input="Weather in Paris?", tools=TOOLS, stream=True)
    events = [e async for e in stream]
    final = events[-1]
    assert final.type == "response.completed"
    assert final.model_extra["router"]["escalated"] is True and final.model_extra["router"]["tier"] == "full"
    assert_valid_weather_call(final.response.output[0].name, final.response.output[0].arguments)


async def test_sse_text_events_in_order(fake, proxy_, sdk) -> None:
    proxy = await proxy_(policy_text(fake.url, extra=ESCALATE))
    stream = await sdk(proxy.url).responses.create(model="auto", input="hi", stream=True)
    events = [e async for e in stream]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert_order([e.type for e in events], TEXT_ITEM)
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = next(e for e in events if e.type == "response.output_text.done")
    final = events[-1].response
    assert text and done.text == text and final.output_text == text and final.status == "completed"
    assert final.usage is not None and final.usage.input_tokens > 0 and final.usage.output_tokens > 0
    assert len({e.item_id for e in events if hasattr(e, "item_id")}) == 1


async def test_sse_function_call_events(fake, proxy_, sdk) -> None:
    proxy = await proxy_(policy_text(fake.url, extra=ESCALATE))
    stream = await sdk(proxy.url).responses.create(model="auto", input="Weather?", tools=TOOLS, stream=True)
    events = [e async for e in stream]
    assert_order([e.type for e in events], CALL_ITEM)
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    added = next(e for e in events if e.type == "response.output_item.added")
    assert done.arguments == args and done.name == "get_weather" and added.item.call_id
    assert events[-1].response.output[0].arguments == args
    assert_valid_weather_call(done.name, args)


async def test_sse_wire_format(fake, proxy_) -> None:
    """`event:` lines name each event; the router's decision trails as a comment; no [DONE]."""
    proxy = await proxy_(policy_text(fake.url, extra=ESCALATE))
    raw = await post(proxy.url + "/responses", {"model": "auto", "input": "hi", "stream": True})
    assert raw.status == 200 and raw.headers["content-type"].startswith("text/event-stream")
    assert raw.headers["x-router-tier"] == "full"
    data, comments, done = sse(raw.body)
    names = [line[7:].decode() for line in raw.body.split(b"\n") if line.startswith(b"event: ")]
    assert names == [d["type"] for d in data] and not done
    assert [c for c in comments if c.startswith(b"router ")] and orjson.loads(comments[-1][7:])["tier"] == "full"


ENVELOPE = ("response.created", "response.in_progress", "response.completed")


async def test_sse_envelope_names_the_answering_model_throughout(start_fake_, proxy_, sdk) -> None:
    """created, in_progress and completed name one model, as OpenAI's do: the one that answered (never
    the `auto` the client asked for), after an invisible escalation too."""
    good = await start_fake_(FakeConfig(seed=21))
    bad = await start_fake_(FakeConfig(seed=22, bad_tool_rate=1.0, bad_kinds=("invalid_json",)))
    for fast, model in ((good, "fast-model"), (bad, "full-model")):
        proxy = await proxy_(policy_text(fast.url, good.url, extra=ESCALATE))
        async with sdk(proxy.url).responses.stream(model="auto", input="Weather?", tools=TOOLS) as stream:
            envelope = [e.response.model async for e in stream if e.type in ENVELOPE]
        assert envelope == [model] * 3


async def test_tool_loop_with_previous_response_id(fake, proxy_, sdk) -> None:
    """Each turn sends only its new items; the upstream gets the whole conversation every time."""
    proxy = await proxy_(policy_text(fake.url, extra=ESCALATE))
    client = sdk(proxy.url)
    first = await client.responses.create(model="auto", input="Weather in Paris?", tools=TOOLS, instructions="Brief.")
    call = first.output[0]
    second = await client.responses.create(
        model="auto",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
        tools=TOOLS,
    )
    assert second.previous_response_id == first.id and second.output[0].type == "function_call"
    call2 = second.output[0]
    third = await client.responses.create(
        model="auto",
        previous_response_id=second.id,
        input=[{"type": "function_call_output", "call_id": call2.call_id, "output": "still sunny"}],
    )
    assert third.output_text
    sent = [r["body"]["messages"] for r in await fake_requests(fake.url)]

    def assistant(c: Any) -> dict[str, Any]:
        fn = {"name": c.name, "arguments": c.arguments}
        return {  # content "": what the router sends beside tool calls (llama.cpp refuses null)
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": c.call_id, "type": "function", "function": fn}],
        }

    turn1 = [{"role": "user", "content": "Weather in Paris?"}]
    turn2 = [*turn1, assistant(call), {"role": "tool", "tool_call_id": call.call_id, "content": "sunny"}]
    turn3 = [*turn2, assistant(call2), {"role": "tool", "tool_call_id": call2.call_id, "content": "still sunny"}]
    assert sent == [[{"role": "system", "content": "Brief."}, *turn1], turn2, turn3]  # instructions are per request


async def test_unknown_previous_id_and_store_false(fake, proxy_, sdk) -> None:
    proxy = await proxy_(policy_text(fake.url, extra=ESCALATE))
    client = sdk(proxy.url)
    with pytest.raises(openai.BadRequestError) as err:
        await client.responses.create(model="auto", input="x", previous_response_id="resp_nope")
    assert err.value.code == "previous_response_not_found" and err.value.param == "previous_response_id"
    unstored = await client.responses.create(model="auto", input="x", store=False)
    assert unstored.store is False
    with pytest.raises(openai.BadRequestError):
        await client.responses.create(model="auto", input="y", previous_response_id=unstored.id)
    assert len(await fake_requests(fake.url)) == 1


async def test_bad_requests_are_400_and_never_reach_upstream(fake, proxy_, sdk) -> None:
    proxy = await proxy_(policy_text(fake.url, extra=ESCALATE))
    client = sdk(proxy.url)
    with pytest.raises(openai.BadRequestError) as err:  # malformed by the published API
        await client.responses.create(model="auto", input="x", tools=[{"type": "function"}])  # type: ignore[list-item]
    assert err.value.param == "tools[0].name"
    with pytest.raises(openai.BadRequestError) as err:
        await client.responses.create(model="auto", input=["not an item"])  # type: ignore[list-item]
    assert err.value.param == "input[0]"
    raw = await post(proxy.url + "/responses", data=b"{nope")
    assert raw.status == 400 and raw.json()["error"]["code"] == "invalid_json"
    plain_get = await get(proxy.url + "/responses")  # no upgrade: not the WebSocket route
    assert plain_get.status == 405 and set(plain_get.json()) == {"error"}
    assert await fake_requests(fake.url) == []


async def test_hosted_tools_and_unknown_items_are_left_out_for_chat_tiers(fake, proxy_, sdk) -> None:
    """A chat tier cannot run web_search or resolve an item_reference: it sees neither, the client gets
    its answer, the header names the tool types left out, the metric counts them."""
    proxy = await proxy_(policy_text(fake.url, extra=ESCALATE))
    tools = [{"type": "web_search"}, {"type": "code_interpreter", "container": {"type": "auto"}}, WEATHER]
    items = [{"type": "item_reference", "id": "msg_1"}, {"role": "user", "content": "Weather in Paris?"}]
    raw = await sdk(proxy.url).responses.with_raw_response.create(model="auto", input=items, tools=tools)
    assert raw.headers["x-router-dropped-tools"] == "code_interpreter, web_search"
    assert [i.type for i in raw.parse().output] == ["function_call"]
    [seen] = await fake_requests(fake.url)
    assert [t["function"]["name"] for t in seen["body"]["tools"]] == ["get_weather"]
    assert seen["body"]["messages"] == [{"role": "user", "content": "Weather in Paris?"}]
    metrics = (await get(proxy.base + "/metrics")).body.decode()
    assert 'router_left_out_total{api="responses",part="tool",type="web_search"} 1.0' in metrics
    assert 'router_left_out_total{api="responses",part="item",type="item_reference"} 1.0' in metrics


@pytest.mark.parametrize("stream", [False, True])
async def test_a_tool_type_no_header_can_hold_is_named_escaped(fake, proxy_, stream: bool) -> None:
    """A tool type with a line break (or beyond Latin-1) is still named in x-router-dropped-tools,
    escaped: the answer is sent, and nothing stays in flight."""
    proxy = await proxy_(policy_text(fake.url, extra=ESCALATE))
    body = {"model": "auto", "input": "hi", "tools": [{"type": "a\nb"}, {"type": "\u2603"}], "stream": stream}
    async with aiohttp.ClientSession() as s, s.post(proxy.url + "/responses", json=body) as r:
        await r.read()
        assert r.status == 200
        assert r.headers["x-router-dropped-tools"] == "a\\nb, \\u2603"
    assert proxy.runtime.inflight == 0


async def test_unauthorized(fake, proxy_, sdk) -> None:
    proxy = await proxy_(policy_text(fake.url, extra=ESCALATE), client_keys=["k-right"])
    with pytest.raises(openai.AuthenticationError):
        await sdk(proxy.url, api_key="k-wrong").responses.create(model="auto", input="x")
    ok = await sdk(proxy.url, api_key="k-right").responses.create(model="auto", input="x")
    assert ok.status == "completed"


async def test_sse_client_disconnect_cancels_the_upstream_stream(start_fake_, proxy_) -> None:
    slow = await start_fake_(FakeConfig(words=400, chunk_delay_ms=20))  # ~8 s of stream
    proxy = await proxy_(policy_text(slow.url, extra=ESCALATE))
    body = {"model": "auto", "input": "a long story", "stream": True}
    async with aiohttp.ClientSession() as s, s.post(proxy.url + "/responses", json=body) as r:
        async for line in r.content:
            if b"response.output_text.delta" in line:
                break
        during = (await fake_stats(slow.url))["open_connections"]
    for _ in range(200):  # bounded: 4 s
        now = (await fake_stats(slow.url))["open_connections"]
        if now < during:
            break
        await asyncio.sleep(0.02)
    assert now < during, (during, now)
    assert proxy.runtime.inflight == 0

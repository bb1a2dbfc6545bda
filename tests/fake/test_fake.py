"""The fake upstream, exercised as a real server with the official SDKs and aiohttp."""

from __future__ import annotations

import json
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import anthropic
import httpx
import jsonschema
import openai
import pytest

from router.fake import FakeConfig, FakeServer, start_fake
from router.fake.tools import BAD_KINDS, make_args, violate

WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "location": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "options": {
            "type": "object",
            "properties": {
                "hourly": {"type": "boolean"},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["hourly"],
        },
    },
    "required": ["location", "unit", "options"],
    "additionalProperties": False,
}
SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string"}, "limit": {"type": "number", "exclusiveMinimum": 0}},
    "required": ["query"],
}
SCHEMAS = {"get_weather": WEATHER_SCHEMA, "search": SEARCH_SCHEMA}
TOOLS: Any = [
    {"type": "function", "function": {"name": n, "description": n, "parameters": s}} for n, s in SCHEMAS.items()
]
MESSAGES: list[Any] = [{"role": "user", "content": "What's the weather in Paris?"}]

Factory = Callable[..., Awaitable[FakeServer]]


@pytest.fixture
async def make_fake() -> AsyncIterator[Factory]:
    servers: list[FakeServer] = []

    async def make(**kwargs: Any) -> FakeServer:
        server = await start_fake(FakeConfig(**kwargs))
        servers.append(server)
        return server

    yield make
    for server in servers:
        await server.close()


@pytest.fixture
async def server(make_fake: Factory) -> FakeServer:
    return await make_fake(seed=7)


def client(server: FakeServer, **kwargs: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.url, api_key=kwargs.pop("api_key", "x"), max_retries=0, **kwargs)


async def post(session: aiohttp.ClientSession, server: FakeServer, body: dict[str, Any], fault: str = "") -> Any:
    headers = {"x-fake-fault": fault} if fault else {}
    async with session.post(f"{server.url}/chat/completions", json=body, headers=headers) as resp:
        assert resp.status == 200
        return await resp.json(), resp.headers.get("x-fake-defect")


async def test_json_text_answer(server: FakeServer) -> None:
    async with client(server) as oa:
        result = await oa.chat.completions.create(model="m1", messages=MESSAGES)
    assert result.object == "chat.completion" and result.id.startswith("chatcmpl-")
    assert result.model == "m1"
    choice = result.choices[0]
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    assert choice.message.tool_calls is None
    assert len((choice.message.content or "").split()) == 12
    assert result.usage is not None and result.usage.total_tokens > 0


async def test_stream_text_matches_json_for_same_seed(make_fake: Factory) -> None:
    first, second = await make_fake(seed=3, words=20), await make_fake(seed=3, words=20)
    async with client(first) as oa:
        expected = (await oa.chat.completions.create(model="m", messages=MESSAGES)).choices[0].message.content
    async with client(second) as oa:
        stream = await oa.chat.completions.create(
            model="m", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
        chunks = [chunk async for chunk in stream]
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(pieces) == 20
    assert "".join(pieces) == expected
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


async def test_streamed_tool_call_reassembles_to_valid_args(server: FakeServer) -> None:
    async with client(server) as oa:
        for _ in range(10):
            stream = await oa.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS, stream=True)
            chunks = [chunk async for chunk in stream]
            first = chunks[0].choices[0].delta
            assert first.role == "assistant" and first.tool_calls is not None
            head = first.tool_calls[0]
            assert head.index == 0 and (head.id or "").startswith("call_") and head.type == "function"
            assert head.function is not None and head.function.arguments == ""
            fragments = [
                c.choices[0].delta.tool_calls[0].function.arguments or ""
                for c in chunks[1:]
                if c.choices[0].delta.tool_calls and c.choices[0].delta.tool_calls[0].function
            ]
            assert len(fragments) >= 2
            assert chunks[-1].choices[0].finish_reason == "tool_calls"
            jsonschema.validate(json.loads("".join(fragments)), SCHEMAS[head.function.name or ""])


async def test_named_tool_choice_and_none(server: FakeServer) -> None:
    async with client(server) as oa:
        for _ in range(5):
            result = await oa.chat.completions.create(
                model="m",
                messages=MESSAGES,
                tools=TOOLS,
                tool_choice={"type": "function", "function": {"name": "search"}},
            )
            calls = result.choices[0].message.tool_calls
            assert calls and calls[0].type == "function" and calls[0].function.name == "search"
            assert result.choices[0].finish_reason == "tool_calls"
            jsonschema.validate(json.loads(calls[0].function.arguments), SEARCH_SCHEMA)
        plain = await oa.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS, tool_choice="none")
        assert plain.choices[0].message.tool_calls is None and plain.choices[0].message.content


def check_defect(kind: str, name: str | None, args: str | None, content: str | None, finish: str) -> None:
    if kind in ("invalid_json", "unknown_tool", "schema_violation"):
        assert finish == "tool_calls" and name is not None and args is not None
    if kind == "invalid_json":
        with pytest.raises(json.JSONDecodeError):
            json.loads(args or "")
    elif kind == "unknown_tool":
        assert name not in SCHEMAS
        json.loads(args or "")
    elif kind == "schema_violation":
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(json.loads(args or ""), SCHEMAS[name or ""])
    elif kind == "missing_tool_call":
        assert name is None and finish == "stop"
        assert content and any(tool in content for tool in SCHEMAS)
    elif kind == "tool_sweep":  # every offered tool in turn, each valid (two offered: no sweep the router finds)
        assert name is None and finish == "stop"
        written = [json.loads(line) for line in (content or "").split(",\n")]
        assert [c["name"] for c in written] == list(SCHEMAS)
        for c in written:
            jsonschema.validate(c["arguments"], SCHEMAS[c["name"]])
    else:
        assert name is None and finish == "stop"
        leaked = json.loads(content or "")
        jsonschema.validate(leaked["arguments"], SCHEMAS[leaked["name"]])


@pytest.mark.parametrize("kind", BAD_KINDS)
async def test_each_bad_kind_via_header(server: FakeServer, kind: str) -> None:
    headers = {"x-fake-fault": f"bad-tool:{kind}"}
    async with client(server) as oa:
        for _ in range(3):
            raw = await oa.chat.completions.with_raw_response.create(
                model="m", messages=MESSAGES, tools=TOOLS, extra_headers=headers
            )
            assert raw.headers["x-fake-defect"] == kind
            choice = raw.parse().choices[0]
            call = choice.message.tool_calls[0] if choice.message.tool_calls else None
            fn = call.function if call is not None and call.type == "function" else None
            check_defect(
                kind,
                fn.name if fn else None,
                fn.arguments if fn else None,
                choice.message.content,
                choice.finish_reason,
            )
            stream = await oa.chat.completions.create(
                model="m", messages=MESSAGES, tools=TOOLS, stream=True, extra_headers=headers
            )
            name, args, content, finish = None, None, "", ""
            async for chunk in stream:
                delta = chunk.choices[0].delta
                content += delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
                for tc in delta.tool_calls or []:
                    name = (tc.function.name if tc.function else None) or name
                    args = (args or "") + ((tc.function.arguments if tc.function else None) or "")
            check_defect(kind, name, args, content, finish)


async def classify_run(server: FakeServer, n: int) -> list[tuple[str, str, str | None]]:
    out = []
    async with aiohttp.ClientSession() as session:
        for _ in range(n):
            body, defect = await post(session, server, {"model": "m", "messages": MESSAGES, "tools": TOOLS})
            message = body["choices"][0]["message"]
            call = (message.get("tool_calls") or [{}])[0].get("function", {})
            out.append((call.get("name", ""), call.get("arguments") or message["content"], defect))
    return out


async def test_bad_tool_rate_band_and_determinism(make_fake: Factory) -> None:
    first = await classify_run(await make_fake(seed=11, bad_tool_rate=0.5), 200)
    bad = [defect for _, _, defect in first if defect]
    assert 0.38 <= len(bad) / 200 <= 0.62
    assert set(bad) == set(BAD_KINDS)  # all kinds drawn
    assert await classify_run(await make_fake(seed=11, bad_tool_rate=0.5), 200) == first
    assert await classify_run(await make_fake(seed=12, bad_tool_rate=0.5), 200) != first
    for name, args, defect in first:  # the defect header matches what the answer shows
        if defect is None:
            jsonschema.validate(json.loads(args), SCHEMAS[name])


async def test_forced_faults_do_not_shift_the_sequence(make_fake: Factory) -> None:
    plain, forced = await make_fake(seed=2, bad_tool_rate=0.3), await make_fake(seed=2, bad_tool_rate=0.3)
    body = {"model": "m", "messages": MESSAGES, "tools": TOOLS}
    async with aiohttp.ClientSession() as session:
        expected = [await post(session, plain, body) for _ in range(6)]
        got = []
        for i in range(6):
            if i == 2:  # answered with an injected error: the draws still happen
                async with session.post(
                    f"{forced.url}/chat/completions", json=body, headers={"x-fake-fault": "500"}
                ) as r:
                    assert r.status == 500
                got.append(expected[2])
            else:
                got.append(await post(session, forced, body))
    strip = [(b["choices"], d) for b, d in expected]
    assert [(b["choices"], d) for b, d in got] == strip


async def test_per_tool_rates_and_kinds(make_fake: Factory) -> None:
    server = await make_fake(seed=5, bad_tool_rates={"get_weather": 1.0}, bad_kinds=("invalid_json",))
    async with aiohttp.ClientSession() as session:
        for tool, expect in (("get_weather", "invalid_json"), ("search", None)):
            for _ in range(20):
                choice = {"type": "function", "function": {"name": tool}}
                body = {"model": "m", "messages": MESSAGES, "tools": TOOLS, "tool_choice": choice}
                _, defect = await post(session, server, body)
                assert defect == expect


async def test_injected_errors(make_fake: Factory, server: FakeServer) -> None:
    async with client(server) as oa:
        for fault, exc in (
            ("500", openai.InternalServerError),
            ("429", openai.RateLimitError),
            ("400", openai.BadRequestError),
            ("503", openai.InternalServerError),
        ):
            with pytest.raises(exc) as info:
                await oa.chat.completions.create(model="m", messages=MESSAGES, extra_headers={"x-fake-fault": fault})
            assert isinstance(info.value.body, dict) and {"message", "type", "param", "code"} <= info.value.body.keys()
        with pytest.raises(openai.BadRequestError, match="unknown fault"):
            await oa.chat.completions.create(model="m", messages=MESSAGES, extra_headers={"x-fake-fault": "nope"})
    always = await make_fake(error_rate=1.0)
    async with client(always) as oa:
        with pytest.raises(openai.InternalServerError):
            await oa.chat.completions.create(model="m", messages=MESSAGES)


async def test_reset_before_first_byte(make_fake: Factory, server: FakeServer) -> None:
    async with client(server) as oa:
        with pytest.raises(openai.APIConnectionError):
            await oa.chat.completions.create(model="m", messages=MESSAGES, extra_headers={"x-fake-fault": "reset"})
        assert (await oa.chat.completions.create(model="m", messages=MESSAGES)).choices  # server still fine
    always = await make_fake(reset_before_first_byte=1.0)
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectionError):
            await post(session, always, {"model": "m", "messages": MESSAGES})


async def test_reset_mid_stream(make_fake: Factory, server: FakeServer) -> None:
    got: list[str] = []
    async with client(server) as oa:
        stream = await oa.chat.completions.create(
            model="m", messages=MESSAGES, stream=True, extra_headers={"x-fake-fault": "reset-mid-stream"}
        )
        with pytest.raises(httpx.TransportError):  # the SDK does not wrap errors raised mid-iteration
            async for chunk in stream:
                got.append(chunk.choices[0].delta.content or "")
    assert any(got)
    always = await make_fake(reset_mid_stream=1.0)
    async with aiohttp.ClientSession() as session:
        received = b""
        with pytest.raises(aiohttp.ClientPayloadError):  # non-streaming: half a body, then RST
            async with session.post(f"{always.url}/chat/completions", json={"messages": MESSAGES}) as resp:
                assert resp.status == 200
                async for piece in resp.content.iter_any():
                    received += piece
        assert received.startswith(b'{"id":"chatcmpl-')


async def test_malformed_sse(server: FakeServer) -> None:
    async with aiohttp.ClientSession() as session:
        body = {"model": "m", "messages": MESSAGES, "stream": True}
        headers = {"x-fake-fault": "malformed-sse"}
        async with session.post(f"{server.url}/chat/completions", json=body, headers=headers) as resp:
            text = (await resp.read()).decode()
    events = [e.removeprefix("data: ") for e in text.split("\n\n") if e]
    assert events[-1] == "[DONE]"
    broken = 0
    for event in events[:-1]:
        try:
            json.loads(event)
        except json.JSONDecodeError:
            broken += 1
    assert broken == 1


async def test_delays_are_applied(make_fake: Factory) -> None:
    server = await make_fake(chunk_delay_ms=5)
    async with aiohttp.ClientSession() as session:
        start = time.perf_counter()
        headers = {"x-fake-fault": "slow-first-token:150"}
        body = {"messages": MESSAGES, "stream": True}
        async with session.post(f"{server.url}/chat/completions", json=body, headers=headers) as resp:
            headers_at = time.perf_counter() - start
            first = await resp.content.readuntil(b"\n\n")
            first_at = time.perf_counter() - start
            rest = await resp.read()
    assert first.startswith(b"data: ") and rest.endswith(b"data: [DONE]\n\n")
    assert headers_at < first_at and first_at >= 0.14  # lower bounds only; timing is never asserted upward


async def test_introspection_and_stats(server: FakeServer) -> None:
    async with client(server, default_headers={"X-Trace": "abc"}) as oa:
        await oa.chat.completions.create(model="rec", messages=MESSAGES, temperature=0.5)
        models = await oa.models.list()
    assert [m.id for m in models.data] == ["fake-model"]
    async with aiohttp.ClientSession() as session:
        base = server.url.removesuffix("/v1")
        async with session.get(f"{base}/health") as resp:
            assert await resp.json() == {"status": "ok"}
        async with session.get(f"{base}/_fake/requests") as resp:
            log = await resp.json()
        assert [(r["method"], r["path"]) for r in log] == [
            ("POST", "/v1/chat/completions"),
            ("GET", "/v1/models"),
        ]
        assert log[0]["body"]["model"] == "rec" and log[0]["body"]["temperature"] == 0.5
        assert log[0]["headers"]["x-trace"] == "abc" and log[0]["headers"]["authorization"] == "Bearer x"
        async with session.get(f"{base}/_fake/stats") as resp:
            stats = await resp.json()
        assert stats["requests"] == 2 and stats["streams"] == 0 and stats["open_connections"] >= 1
        async with session.delete(f"{base}/_fake/requests") as resp:
            assert resp.status == 200
        async with session.get(f"{base}/_fake/requests") as resp:
            assert await resp.json() == []


async def test_api_key(make_fake: Factory) -> None:
    server = await make_fake(api_key="secret")
    async with client(server, api_key="wrong") as oa:
        with pytest.raises(openai.AuthenticationError):
            await oa.chat.completions.create(model="m", messages=MESSAGES)
    async with client(server, api_key="secret") as oa:
        assert (await oa.chat.completions.create(model="m", messages=MESSAGES)).choices
    base = server.url.removesuffix("/v1")
    async with anthropic.AsyncAnthropic(base_url=base, api_key="wrong", max_retries=0) as an:
        with pytest.raises(anthropic.AuthenticationError):
            await an.messages.create(model="c", max_tokens=50, messages=MESSAGES)


async def test_anthropic_messages(server: FakeServer) -> None:
    tools: Any = [{"name": n, "description": n, "input_schema": s} for n, s in SCHEMAS.items()]
    base = server.url.removesuffix("/v1")
    async with anthropic.AsyncAnthropic(base_url=base, api_key="x", max_retries=0) as an:
        text = await an.messages.create(model="claude-x", max_tokens=50, messages=MESSAGES)
        assert text.id.startswith("msg_") and text.model == "claude-x" and text.stop_reason == "end_turn"
        assert text.content[0].type == "text" and len(text.content[0].text.split()) == 12
        assert text.usage.input_tokens > 0 and text.usage.output_tokens > 0
        used = await an.messages.create(
            model="c",
            max_tokens=50,
            messages=MESSAGES,
            tools=tools,
            tool_choice={"type": "tool", "name": "search"},
        )
        block = used.content[0]
        assert used.stop_reason == "tool_use" and block.type == "tool_use" and block.name == "search"
        assert block.id.startswith("toolu_")
        jsonschema.validate(block.input, SEARCH_SCHEMA)
        async with an.messages.stream(model="c", max_tokens=50, messages=MESSAGES, tools=tools) as stream:
            final = await stream.get_final_message()
        block = final.content[0]
        assert final.stop_reason == "tool_use" and block.type == "tool_use"
        jsonschema.validate(block.input, SCHEMAS[block.name])
        async with an.messages.stream(model="c", max_tokens=50, messages=MESSAGES) as stream:
            streamed = "".join([piece async for piece in stream.text_stream])
        assert len(streamed.split()) == 12
        broken = await an.messages.create(
            model="c", max_tokens=50, messages=MESSAGES, tools=tools,
            extra_headers={"x-fake-fault": "bad-tool:unknown_tool"},
        )  # fmt: skip
        assert broken.content[0].type == "tool_use" and broken.content[0].name not in SCHEMAS
        with pytest.raises(anthropic.InternalServerError):
            await an.messages.create(model="c", max_tokens=5, messages=MESSAGES, extra_headers={"x-fake-fault": "500"})


async def test_openai_responses(server: FakeServer) -> None:
    tools: Any = [{"type": "function", "name": n, "description": n, "parameters": s} for n, s in SCHEMAS.items()]
    async with client(server) as sdk:
        text = await sdk.responses.create(model="gpt-x", input="Say something.")
        assert text.id.startswith("resp_") and text.status == "completed" and text.model == "gpt-x"
        assert len(text.output_text.split()) == 12 and text.usage is not None and text.usage.input_tokens > 0
        used = await sdk.responses.create(
            model="m", input=MESSAGES, tools=tools, tool_choice={"type": "function", "name": "search"}
        )
        [call] = used.output
        assert call.type == "function_call" and call.name == "search"
        jsonschema.validate(json.loads(call.arguments), SEARCH_SCHEMA)
        async with sdk.responses.stream(model="m", input=MESSAGES, tools=tools) as stream:
            kinds = [event.type async for event in stream]
            final = await stream.get_final_response()
        assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
        [call] = final.output
        assert call.type == "function_call" and "response.function_call_arguments.delta" in kinds
        jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])
        async with sdk.responses.stream(model="m", input="hi") as stream:
            deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
        assert len("".join(deltas).split()) == 12
        with pytest.raises(openai.InternalServerError):
            await sdk.responses.create(model="m", input="hi", extra_headers={"x-fake-fault": "500"})


async def test_invalid_requests(server: FakeServer) -> None:
    with pytest.raises(ValueError, match="bad_tool_rate"):
        FakeConfig(bad_tool_rate=1.5)
    with pytest.raises(ValueError, match="bad_kinds"):
        FakeConfig(bad_kinds=("nope",))
    url = f"{server.url}/chat/completions"
    async with aiohttp.ClientSession() as session:
        async with session.post(url, data=b"not json") as resp:
            assert resp.status == 400 and (await resp.json())["error"]["type"] == "invalid_request_error"
        choice = {"type": "function", "function": {"name": "nope"}}
        async with session.post(url, json={"messages": MESSAGES, "tools": TOOLS, "tool_choice": choice}) as resp:
            assert resp.status == 400 and "nope" in (await resp.json())["error"]["message"]


SCHEMA_CASES: list[dict[str, Any]] = [
    WEATHER_SCHEMA,
    {"type": "object", "properties": {}},
    {
        "type": "object",
        "properties": {"x": {"$ref": "#/$defs/Point"}},
        "required": ["x"],
        "$defs": {
            "Point": {
                "type": "object",
                "properties": {"a": {"type": "integer", "multipleOf": 5, "exclusiveMaximum": 12}},
                "required": ["a"],
            }
        },
    },
    {
        "type": "object",
        "required": ["v", "w", "t"],
        "properties": {
            "v": {"anyOf": [{"type": "string", "format": "date"}, {"type": "null"}]},
            "w": {
                "type": "array",
                "items": {"type": "integer", "minimum": 0, "maximum": 3},
                "minItems": 3,
                "uniqueItems": True,
            },
            "t": {"type": ["string", "null"], "minLength": 30, "maxLength": 40},
            "c": {"const": "fixed"},
            "f": {"type": "number", "minimum": 0.5, "maximum": 0.6},
        },
    },
    {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
            {"properties": {"b": {"type": "boolean"}}, "required": ["b"]},
        ]
    },
]


@pytest.mark.parametrize("schema", SCHEMA_CASES)
def test_generated_args_validate_and_violations_fail(schema: dict[str, Any]) -> None:
    rng = random.Random(0)
    for _ in range(50):
        args = make_args(schema, rng)
        jsonschema.validate(args, schema)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(violate(schema, args, rng), schema)


async def test_finish_after_ends_the_tool_loop_in_every_api(make_fake: Factory) -> None:
    """With finish_after=1, a conversation holding a tool result gets text; one without gets a call."""
    fake = await make_fake(finish_after=1)
    oai = openai.AsyncOpenAI(base_url=fake.url, api_key="k")
    first = await oai.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
    turn: Any = [*MESSAGES, first.choices[0].message.model_dump(exclude_none=True)]
    turn.append({"role": "tool", "tool_call_id": call.id, "content": "18 C"})
    second = await oai.chat.completions.create(model="m", messages=turn, tools=TOOLS)
    assert second.choices[0].message.tool_calls is None and second.choices[0].message.content
    forced = await oai.chat.completions.create(model="m", messages=turn, tools=TOOLS, tool_choice="required")
    assert forced.choices[0].message.tool_calls

    fn = [{"type": "function", "name": "search", "parameters": SEARCH_SCHEMA}]
    items: Any = [
        {"role": "user", "content": "find it"},
        {"type": "function_call", "call_id": "c1", "name": "search", "arguments": '{"query": "x"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "found"},
    ]
    done = await oai.responses.create(model="m", input=items, tools=fn)
    assert done.output_text and not [o for o in done.output if o.type == "function_call"]

    ant = anthropic.AsyncAnthropic(base_url=fake.url.removesuffix("/v1"), api_key="k")
    tools: Any = [{"name": "search", "input_schema": SEARCH_SCHEMA}]
    msgs: Any = [
        {"role": "user", "content": "find it"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "search", "input": {"query": "x"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "found"}]},
    ]
    message = await ant.messages.create(model="m", max_tokens=64, messages=msgs, tools=tools)
    assert [b.type for b in message.content] == ["text"] and message.stop_reason == "end_turn"
    opening = await ant.messages.create(model="m", max_tokens=64, messages=msgs[:1], tools=tools)
    assert [b.type for b in opening.content] == ["tool_use"]
    await oai.close()
    await ant.close()


async def test_a_call_whose_result_came_back_is_not_asked_for_again_in_any_api(make_fake: Factory) -> None:
    """Tell it the result of the call it would make, and the fake asks for something else ("x 2"), as
    a model does; the router's checks would take its last call again for a model going round."""
    fake = await make_fake()
    query = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
    chat_tools: Any = [{"type": "function", "function": {"name": "search", "parameters": query}}]
    oai = openai.AsyncOpenAI(base_url=fake.url, api_key="k")
    first = await oai.chat.completions.create(model="m", messages=MESSAGES, tools=chat_tools)
    call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
    turn: Any = [*MESSAGES, first.choices[0].message.model_dump(exclude_none=True)]
    turn.append({"role": "tool", "tool_call_id": call.id, "content": "found"})
    second = await oai.chat.completions.create(model="m", messages=turn, tools=chat_tools)
    again = second.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert again.function.name == call.function.name == "search"
    assert json.loads(again.function.arguments)["query"] == json.loads(call.function.arguments)["query"] + " 2"
    before = [*MESSAGES, {"role": "assistant", "content": "Let me look."}]  # no result of it came back
    unasked = await oai.chat.completions.create(model="m", messages=before, tools=chat_tools)
    assert unasked.choices[0].message.tool_calls[0].function.arguments == call.function.arguments  # type: ignore[index]

    fn = [{"type": "function", "name": "search", "parameters": query}]
    items: Any = [
        {"role": "user", "content": "find it"},
        {"type": "function_call", "call_id": "c1", "name": "search", "arguments": '{"query": "weather today"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "found"},
    ]
    done = await oai.responses.create(model="m", input=items, tools=fn)
    [made] = [o for o in done.output if o.type == "function_call"]
    assert json.loads(made.arguments) == {"query": "weather today 2"}

    ant = anthropic.AsyncAnthropic(base_url=fake.url.removesuffix("/v1"), api_key="k")
    tools: Any = [{"name": "search", "input_schema": query}]
    use = {"type": "tool_use", "id": "t1", "name": "search", "input": {"query": "weather today"}}
    msgs: Any = [
        {"role": "user", "content": "find it"},
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "found"}]},
    ]
    message = await ant.messages.create(model="m", max_tokens=64, messages=msgs, tools=tools)
    assert [b.input for b in message.content if b.type == "tool_use"] == [{"query": "weather today 2"}]
    await oai.close()
    await ant.close()


async def test_prefer_tools_picks_the_first_offered_and_keeps_the_draws(make_fake: Factory) -> None:
    """prefer_tools steers the call to a named tool when it is offered; the seeded draws are the same,
    so the rest of the answers do not change; tool_choice still wins."""
    tools: Any = [{"type": "function", "function": {"name": n, "parameters": SEARCH_SCHEMA}} for n in "abc"]
    plain, steered = await make_fake(seed=3), await make_fake(seed=3, prefer_tools=("zzz", "c", "b"))
    names, ids = [], []
    for fake in (plain, steered):
        async with openai.AsyncOpenAI(base_url=fake.url, api_key="k") as oai:
            answers = [await oai.chat.completions.create(model="m", messages=MESSAGES, tools=tools) for _ in range(3)]
            calls = [a.choices[0].message.tool_calls[0] for a in answers]  # type: ignore[index]
            names.append([c.function.name for c in calls])  # type: ignore[union-attr]
            ids.append([c.id for c in calls])
            chosen = {"type": "function", "function": {"name": "a"}}
            forced = await oai.chat.completions.create(model="m", messages=MESSAGES, tools=tools, tool_choice=chosen)  # type: ignore[arg-type]
            assert forced.choices[0].message.tool_calls[0].function.name == "a"  # type: ignore[index,union-attr]
    assert names[1] == ["c", "c", "c"] and ids[0] == ids[1]


# ------------------------------------------------------------------------------ a context (n_ctx), as llama-server


async def test_a_fake_with_a_context_serves_llama_servers_endpoints_and_refuses_as_it_does(make_fake: Factory) -> None:
    fake = await make_fake(n_ctx=64)
    root = fake.url.removesuffix("/v1")
    short = {"model": "m", "messages": [{"role": "user", "content": "Hi there!"}]}
    long = {"model": "m", "messages": [{"role": "user", "content": "word " * 100}]}
    async with aiohttp.ClientSession() as http:
        async with http.get(root + "/props") as r:
            assert (await r.json())["default_generation_settings"]["n_ctx"] == 64
        async with http.get(fake.url + "/models") as r:
            assert (await r.json())["data"][0]["meta"]["n_ctx"] == 64
        async with http.post(root + "/apply-template", json=short) as r:
            prompt = (await r.json())["prompt"]
        assert "Hi there!" in prompt
        async with http.post(root + "/tokenize", json={"content": prompt, "add_special": True}) as r:
            counted = len((await r.json())["tokens"])
    answer = await client(fake).chat.completions.create(**short)
    assert answer.usage is not None and answer.usage.prompt_tokens == counted  # the count a completion makes
    with pytest.raises(openai.BadRequestError) as info:
        await client(fake).chat.completions.create(**long)
    error = info.value.body
    assert isinstance(error, dict) and error["type"] == "exceed_context_size_error" and error["n_ctx"] == 64
    assert error["n_prompt_tokens"] > 64
    assert error["message"].startswith(f"request ({error['n_prompt_tokens']} tokens) exceeds the available context")
    with pytest.raises(openai.BadRequestError):  # streamed alike: refused before the stream starts
        await client(fake).chat.completions.create(**long, stream=True)


async def test_a_fake_with_a_context_answers_messages_as_anthropic_does(make_fake: Factory) -> None:
    fake = await make_fake(n_ctx=64)
    sdk = anthropic.AsyncAnthropic(base_url=fake.url.removesuffix("/v1"), api_key="x", max_retries=0)
    long = [{"role": "user", "content": "word " * 100}]
    counted = await sdk.messages.count_tokens(model="m", messages=long)
    assert counted.input_tokens > 64
    with pytest.raises(anthropic.BadRequestError) as info:
        await sdk.messages.create(model="m", max_tokens=8, messages=long)
    body = info.value.body
    assert isinstance(body, dict)
    assert body["error"] == {"type": "invalid_request_error",
                             "message": f"prompt is too long: {counted.input_tokens} tokens > 64 maximum"}  # fmt: skip
    info = await sdk.models.retrieve("m")
    assert (getattr(info, "max_input_tokens", None) or (info.model_extra or {}).get("max_input_tokens")) == 64


async def test_without_a_context_the_fake_has_no_llama_server_endpoints(make_fake: Factory) -> None:
    fake = await make_fake()
    root = fake.url.removesuffix("/v1")
    async with aiohttp.ClientSession() as http:
        for method, path in (("GET", "/props"), ("POST", "/apply-template"), ("POST", "/tokenize")):
            async with http.request(method, root + path, json={}) as r:
                assert r.status == 404
        async with http.get(fake.url + "/models") as r:
            assert "meta" not in (await r.json())["data"][0]
    long = [{"role": "user", "content": "word " * 10_000}]
    assert (await client(fake).chat.completions.create(model="m", messages=long)).choices  # no limit


async def test_greedy_answers_are_a_function_of_the_request_unless_it_samples(make_fake: Factory) -> None:
    """`greedy`: the same request, the same answer (its breakage included), as a greedy model's; a
    request that asks for a temperature above 0 is a sample of the fake's sequence."""
    fake = await make_fake(seed=5, bad_tool_rate=0.5, greedy=True)
    questions = [{"model": "m", "messages": [{"role": "user", "content": f"q{n}"}], "tools": TOOLS} for n in range(40)]
    async with aiohttp.ClientSession() as session:
        first = [await post(session, fake, body) for body in questions]
        again = [await post(session, fake, body) for body in reversed(questions)]
        sampled = [await post(session, fake, {**questions[0], "temperature": 0.7}) for _ in range(8)]
    def said(answers: list[Any]) -> list[Any]:  # `created` is the clock's
        return [(answer["id"], answer["choices"], defect) for answer, defect in answers]

    assert said(again[::-1]) == said(first)  # in any order
    defects = [defect for _, defect in first]
    assert any(defects) and not all(defects)  # the rate still applies across requests
    assert len({answer["id"] for answer, _ in sampled}) == 8  # samples differ

"""POST /v1/messages and /v1/messages/count_tokens with the official anthropic SDK, in front of the
fake upstream: chat tiers (translated) and an `anthropic/*` tier (passed through)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anthropic
import orjson
import pytest

from router.fake import FakeConfig
from tests.api.helpers import fake_requests, get, post
from tests.conftest import policy_text

WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
ANTHROPIC_KEY = "sk-ant-test-key-for-the-fake"


@pytest.fixture
async def sdk() -> AsyncIterator[Callable[..., anthropic.AsyncAnthropic]]:
    """Factory of official SDK clients pointed at a proxy (closed after the test)."""
    clients: list[anthropic.AsyncAnthropic] = []

    def make(proxy: Any, key: str = "x") -> anthropic.AsyncAnthropic:
        clients.append(anthropic.AsyncAnthropic(base_url=proxy.base, api_key=key, max_retries=0))
        return clients[-1]

    yield make
    for client in clients:
        await client.close()


def native_policy(fast_url: str, claude_root: str, *, claude_is: str = "full") -> str:
    """fast/full policy where one tier is `anthropic/claude-test` on the fake's Messages endpoint."""
    policy = policy_text(fast_url, extra="escalation: {to: full}\n")
    marker = f"  {claude_is}:\n    model: openai/{claude_is}-model\n    api_base: {fast_url}\n"
    assert marker in policy
    tier = f"  {claude_is}:\n    model: anthropic/claude-test\n    api_base: {claude_root}\n"
    tier += f"    api_key: {ANTHROPIC_KEY}\n"
    return policy.replace(marker, tier)


async def sse_events(proxy: Any, body: dict[str, Any], **headers: str) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """The raw stream of a call: response headers and every event's data, in order."""
    raw = await post(proxy.base + "/v1/messages", {**body, "stream": True}, headers=headers)
    assert raw.status == 200, raw.body
    events = []
    for frame in raw.body.split(b"\n\n"):
        lines = frame.split(b"\n")
        kinds = [line[7:] for line in lines if line.startswith(b"event: ")]
        data = [line[6:] for line in lines if line.startswith(b"data: ")]
        if data:
            event = orjson.loads(data[0])
            assert kinds == [event["type"].encode()]  # `event:` names the data's type
            events.append(event)
    return raw.headers, events


def block_sequence(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


async def test_text_answer_from_a_chat_tier(fake, proxy_, sdk) -> None:
    proxy = await proxy_(policy_text(fake.url))
    raw = await sdk(proxy).messages.with_raw_response.create(model="auto", max_tokens=64, messages=ASK)
    message = await raw.parse()
    assert raw.headers["x-router-tier"] == "full"
    assert message.type == "message" and message.role == "assistant"
    assert message.id.startswith("msg_")
    [block] = message.content
    assert block.type == "text" and block.text
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0
    [seen] = await fake_requests(fake.url)
    assert seen["body"]["messages"] == [{"role": "user", "content": "What is the weather in Paris?"}]
    assert seen["body"]["max_tokens"] == 64


async def test_broken_fast_tool_call_is_escalated_before_the_agent_sees_it(start_fake_, proxy_, sdk) -> None:
    fast = await start_fake_(FakeConfig(seed=3, bad_tool_rate=1.0, bad_kinds=("invalid_json",)))
    full = await start_fake_(FakeConfig(seed=4))
    proxy = await proxy_(policy_text(fast.url, full.url, extra="escalation: {to: full}\n"))
    raw = await sdk(proxy).messages.with_raw_response.create(model="auto", max_tokens=64, messages=ASK, tools=[WEATHER])
    assert (raw.headers["x-router-tier"], raw.headers["x-router-escalated"]) == ("full", "true")
    assert raw.headers["x-router-mistakes"] == "invalid_json"
    message = await raw.parse()
    [call] = [b for b in message.content if b.type == "tool_use"]
    assert call.name == "get_weather" and isinstance(call.input, dict) and isinstance(call.input["city"], str)
    assert message.stop_reason == "tool_use"
    [fast_request] = await fake_requests(fast.url)
    assert fast_request["body"]["tools"][0]["function"]["parameters"] == WEATHER["input_schema"]


async def test_stream_events_follow_anthropics_order(start_fake_, proxy_) -> None:
    fast = await start_fake_(FakeConfig(seed=5, bad_tool_rate=1.0, bad_kinds=("schema_violation",)))
    full = await start_fake_(FakeConfig(seed=6))
    proxy = await proxy_(policy_text(fast.url, full.url, extra="escalation: {to: full}\n"))
    body = {"model": "auto", "max_tokens": 64, "messages": ASK, "tools": [WEATHER]}
    headers, events = await sse_events(proxy, body)
    assert headers["x-router-route"] == "simple-tool-call"
    kinds = block_sequence(events)
    assert kinds[:2] == ["message_start", "ping"]
    assert kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds.count("message_start") == 1  # the escalation was invisible
    start = events[kinds.index("content_block_start")]
    assert start["content_block"]["type"] == "tool_use" and start["content_block"]["name"] == "get_weather"
    arguments = "".join(e["delta"]["partial_json"] for e in events if e["type"] == "content_block_delta")
    assert isinstance(orjson.loads(arguments)["city"], str)  # the broken fast arguments never reached us
    assert events[-2]["delta"]["stop_reason"] == "tool_use"

    text_headers, text_events = await sse_events(proxy, {"model": "auto", "max_tokens": 64, "messages": ASK})
    assert text_headers["x-router-tier"] == "full"
    kinds = block_sequence(text_events)
    assert kinds == ["message_start", "ping", "content_block_start", *["content_block_delta"] * (len(kinds) - 6),
                     "content_block_stop", "message_delta", "message_stop"]  # fmt: skip
    assert all(e["index"] == 0 for e in text_events if "index" in e)


async def test_sdk_stream_helper_assembles_the_message(fake, proxy_, sdk) -> None:
    proxy = await proxy_(policy_text(fake.url))
    async with sdk(proxy).messages.stream(model="auto", max_tokens=64, messages=ASK) as stream:
        texts = [t async for t in stream.text_stream]
        final = await stream.get_final_message()
    assert "".join(texts) == final.content[0].text and texts
    async with sdk(proxy).messages.stream(model="auto", max_tokens=64, messages=ASK, tools=[WEATHER]) as stream:
        final = await stream.get_final_message()
    [call] = final.content
    assert call.type == "tool_use" and call.name == "get_weather" and "city" in call.input  # type: ignore[operator]


async def test_tool_result_with_is_error_makes_the_session_sticky(fake, proxy_, sdk) -> None:
    proxy = await proxy_(policy_text(fake.url, extra="escalation: {to: full}\n"))
    client = sdk(proxy)
    first = await client.messages.with_raw_response.create(
        model="auto", max_tokens=64, messages=ASK, tools=[WEATHER], metadata={"user_id": "session-42"}
    )
    assert first.headers["x-router-tier"] == "fast"
    [call] = (await first.parse()).content
    history: list[Any] = [
        *ASK,
        {"role": "assistant", "content": [call.model_dump()]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "no such city", "is_error": True}],
        },
    ]
    second = await client.messages.with_raw_response.create(
        model="auto", max_tokens=64, messages=history, tools=[WEATHER], metadata={"user_id": "session-42"}
    )
    assert second.headers["x-router-tier"] == "full"  # sticky: the fast tier's call failed
    await proxy.runtime.store.flush()
    stats = await proxy.runtime.store.stats()
    assert stats["tiers"]["fast"]["mistakes"] == {"agent_reported_error": 1}
    assert stats["tools"]["fast"]["get_weather"]["mistakes"] == {"agent_reported_error": 1}


async def test_count_tokens(fake, proxy_, sdk) -> None:
    proxy = await proxy_(policy_text(fake.url))
    client = sdk(proxy)
    bare = await client.messages.count_tokens(model="auto", messages=ASK)
    with_tools = await client.messages.count_tokens(model="auto", messages=ASK, tools=[WEATHER], system="Be brief.")
    assert 0 < bare.input_tokens < with_tools.input_tokens
    assert await fake_requests(fake.url) == []  # counted here, no model called


@pytest.mark.parametrize(
    ("body", "status", "kind", "needle"),
    [
        ({"model": "auto", "messages": ASK}, 400, "invalid_request_error", "max_tokens"),
        ({"model": "auto", "max_tokens": 8, "messages": []}, 400, "invalid_request_error", "messages"),
        ({"model": "auto", "max_tokens": 8, "messages": [{"role": "robot", "content": "hi"}]}, 400,
         "invalid_request_error", "role"),
        ({"model": "auto", "max_tokens": 8, "messages": ASK, "api_base": "http://evil"}, 400,
         "invalid_request_error", "api_base"),
        ({"model": "no-such-model", "max_tokens": 8, "messages": ASK}, 404, "not_found_error", "no-such-model"),
    ],
)  # fmt: skip
async def test_errors_have_anthropics_shape(fake, proxy_, body, status, kind, needle) -> None:
    proxy = await proxy_(policy_text(fake.url, extra='aliases: {auto: auto, "claude-*": auto}\n'))
    raw = await post(proxy.base + "/v1/messages", body)
    assert raw.status == status
    error = raw.json()
    assert error["type"] == "error" and error["error"]["type"] == kind
    assert needle in error["error"]["message"]
    assert await fake_requests(fake.url) == []


async def test_sdk_raises_typed_errors(fake, proxy_, sdk) -> None:
    proxy = await proxy_(policy_text(fake.url, extra="client_keys: [good-key]\naliases: {auto: auto}\n"))
    with pytest.raises(anthropic.AuthenticationError) as denied:
        await sdk(proxy, key="wrong").messages.create(model="auto", max_tokens=8, messages=ASK)
    assert denied.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    with pytest.raises(anthropic.NotFoundError):
        await sdk(proxy, key="good-key").messages.create(model="missing", max_tokens=8, messages=ASK)
    ok = await sdk(proxy, key="good-key").messages.create(model="auto", max_tokens=8, messages=ASK)
    assert ok.content[0].type == "text"


# ------------------------------------------------------------------ what Claude Code sends
# captured from the real CLI (tests/data/claude_code.json says how): its betas, and its main loop's body
CAPTURED = orjson.loads((Path(__file__).parents[1] / "data" / "claude_code.json").read_bytes())
CLAUDE_CODE_HEADERS: dict[str, str] = CAPTURED["headers"]
CLAUDE_CODE_BODY: dict[str, Any] = {**CAPTURED["body"], "stream": False}
DEFERRED = next(t["name"] for t in CLAUDE_CODE_BODY["tools"] if t.get("defer_loading"))
# what a chat-completions request may hold (OpenAI's own refuses any other field: "Unrecognized request argument")
CHAT_FIELDS = {"model", "messages", "max_tokens", "temperature", "top_p", "stop", "tools", "tool_choice",
               "parallel_tool_calls", "user", "stream", "stream_options", "response_format"}  # fmt: skip


def without_thinking(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` without thinking blocks (what a tier of no known model gets of them: provenance.py)."""
    out = []
    for m in messages:
        if isinstance(m["content"], list):
            m = {**m, "content": [b for b in m["content"] if b.get("type") != "thinking"]}
        out.append(m)
    return out


async def test_claude_code_request_reaches_a_chat_tier(fake, proxy_, caplog: pytest.LogCaptureFixture) -> None:
    """The system message keeps its place, the deferred tool waits for a tool search, fields with no
    chat equivalent stay out — counted, and said in the log the first time, with the betas they came with."""
    proxy = await proxy_(policy_text(fake.url, extra='aliases: {"claude-*": auto}\n'))
    caplog.set_level(logging.INFO, logger="router.flow")
    for _ in range(2):
        raw = await post(proxy.base + "/v1/messages", CLAUDE_CODE_BODY, headers=CLAUDE_CODE_HEADERS)
        assert raw.status == 200, raw.body
    seen = (await fake_requests(fake.url))[0]
    body = seen["body"]
    assert set(body) <= CHAT_FIELDS and not {k for k in seen["headers"] if k.startswith("anthropic")}
    assert [m["role"] for m in body["messages"]] == ["system", "user", "system", "assistant", "tool"]
    offered = [t["name"] for t in CLAUDE_CODE_BODY["tools"] if not t.get("defer_loading")]
    assert [t["function"]["name"] for t in body["tools"]] == offered
    said = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert said == [
        f"tier 'full' takes no messages request as it is: left out context_management, output_config.effort, "
        f"thinking (anthropic-beta: {CLAUDE_CODE_HEADERS['anthropic-beta']})"
    ]  # the first time each is left out
    metrics = (await get(proxy.base + "/metrics")).body.decode()
    assert 'router_left_out_total{api="messages",part="field",type="thinking"} 2.0' in metrics
    advised = {**CLAUDE_CODE_BODY, "tools": [*CLAUDE_CODE_BODY["tools"], {"type": "advisor_20260301", "name": "advisor",
               "model": "claude-opus-4-6"}]}  # fmt: skip
    assert (await post(proxy.base + "/v1/messages", advised, headers=CLAUDE_CODE_HEADERS)).status == 200
    offered_then = [t["function"]["name"] for t in (await fake_requests(fake.url))[-1]["body"]["tools"]]
    assert offered_then == offered  # the advisor is Anthropic's servers' to run: no function a chat tier could call
    found = [{"type": "tool_reference", "tool_name": DEFERRED}]
    call_id = CLAUDE_CODE_BODY["messages"][-1]["content"][0]["tool_use_id"]
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": found}]}
    loaded = {**CLAUDE_CODE_BODY, "messages": [*CLAUDE_CODE_BODY["messages"][:3], result]}
    assert (await post(proxy.base + "/v1/messages", loaded)).status == 200
    body = (await fake_requests(fake.url))[-1]["body"]
    every = [t["name"] for t in CLAUDE_CODE_BODY["tools"]]
    assert [t["function"]["name"] for t in body["tools"]] == every  # the deferred one found by the tool search
    assert body["messages"][-1]["content"] == f"Tool {DEFERRED} is now available."


@pytest.mark.parametrize("tier", ["chat", "anthropic"])
async def test_claude_codes_subagent_request_is_answered_on_every_tier(start_fake_, proxy_, tier: str) -> None:
    """Thinking off beside the session's effort and display (refused as such by Anthropic's newest
    models: router/upstream/effort.py); and a structured output, which a chat tier gets as its own."""
    fast = await start_fake_(FakeConfig(seed=7))
    claude = await start_fake_(FakeConfig(seed=8, api_key=ANTHROPIC_KEY, effort_without_thinking="high"))
    chat = policy_text(fast.url, extra='aliases: {"claude-*": auto}\n')
    proxy = await proxy_(native_policy(fast.url, claude.url.removesuffix("/v1")) if tier == "anthropic" else chat)
    schema = {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}
    subagent = {**CLAUDE_CODE_BODY, **CAPTURED["subagent"], "tools": []}
    subagent["output_config"] = {**subagent["output_config"], "format": {"type": "json_schema", "schema": schema}}
    raw = await post(proxy.base + "/v1/messages", subagent, headers=CLAUDE_CODE_HEADERS)
    assert raw.status == 200, raw.body
    if tier == "chat":
        [seen] = await fake_requests(fast.url)
        assert seen["body"]["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": schema},
        }
    else:
        *_, seen = await fake_requests(claude.url, path="/v1/messages")
        assert seen["body"]["thinking"] == {"type": "disabled"} and seen["body"]["output_config"] == {
            "format": {"type": "json_schema", "schema": schema}
        }  # xhigh refused beside thinking off: sent again without it, the format kept
        assert seen["headers"]["anthropic-beta"] == CLAUDE_CODE_HEADERS["anthropic-beta"]


async def test_claude_code_request_reaches_a_native_tier_unchanged(start_fake_, proxy_) -> None:
    fast = await start_fake_(FakeConfig(seed=7))
    claude = await start_fake_(FakeConfig(seed=8, api_key=ANTHROPIC_KEY))
    proxy = await proxy_(native_policy(fast.url, claude.url.removesuffix("/v1")))
    raw = await post(proxy.base + "/v1/messages", CLAUDE_CODE_BODY, headers=CLAUDE_CODE_HEADERS)
    assert raw.status == 200, raw.body
    [seen] = await fake_requests(claude.url, path="/v1/messages")
    # the system turn and its per-turn `output_config` too, as they came; the thinking block of no known model left out
    assert seen["body"]["messages"] == without_thinking(CLAUDE_CODE_BODY["messages"])
    assert seen["body"]["tools"] == CLAUDE_CODE_BODY["tools"] and seen["body"]["thinking"]["type"] == "adaptive"
    for header in ("anthropic-beta", "anthropic-version"):
        assert seen["headers"][header] == CLAUDE_CODE_HEADERS[header]  # unchanged


@pytest.mark.parametrize(
    ("messages", "wording"),
    [
        ([{"role": "tool", "content": "x"}], "messages.0.role: Input should be 'user', 'assistant' or 'system'"),
        (["x"], "messages.0: Input should be a valid dictionary"),
        ([{"role": "user", "content": [{"type": "tool_result"}]}],
         "messages.0.content.0.tool_result.tool_use_id: Field required"),
    ],
)  # fmt: skip
async def test_malformed_messages_are_worded_as_anthropic_does(fake, proxy_, messages, wording) -> None:
    proxy = await proxy_(policy_text(fake.url, extra="aliases: {auto: auto}\n"))
    raw = await post(proxy.base + "/v1/messages", {"model": "auto", "max_tokens": 8, "messages": messages})
    assert raw.status == 400
    assert raw.json() == {"type": "error", "error": {"type": "invalid_request_error", "message": wording}}


# ------------------------------------------------------------------ an anthropic/* tier: pass-through


async def test_native_tier_gets_the_request_unchanged(start_fake_, proxy_, sdk) -> None:
    fast = await start_fake_(FakeConfig(seed=7))
    claude = await start_fake_(FakeConfig(seed=8, api_key=ANTHROPIC_KEY))
    proxy = await proxy_(native_policy(fast.url, claude.url.removesuffix("/v1")))
    system = [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}]
    raw = await sdk(proxy).messages.with_raw_response.create(
        model="auto", max_tokens=64, messages=ASK, system=system, extra_body={"top_k": 5}, metadata={"user_id": "u-1"},
        extra_headers={"anthropic-beta": "fast-mode-2026-02-01"},
    )  # fmt: skip
    assert raw.headers["x-router-tier"] == "full"
    assert (await raw.parse()).content[0].type == "text"
    [seen] = await fake_requests(claude.url, path="/v1/messages")
    assert seen["body"]["system"] == system and seen["body"]["top_k"] == 5  # nothing lost in translation
    assert seen["body"]["model"] == "claude-test" and seen["body"]["metadata"] == {"user_id": "u-1"}
    assert seen["headers"]["x-api-key"] == ANTHROPIC_KEY
    assert seen["headers"]["anthropic-beta"] == "fast-mode-2026-02-01"


async def test_native_stream_is_forwarded_event_by_event(start_fake_, proxy_) -> None:
    fast = await start_fake_(FakeConfig(seed=9, bad_tool_rate=1.0, bad_kinds=("unknown_tool",)))
    claude = await start_fake_(FakeConfig(seed=10, api_key=ANTHROPIC_KEY))
    proxy = await proxy_(native_policy(fast.url, claude.url.removesuffix("/v1")))
    body = {"model": "auto", "max_tokens": 64, "messages": ASK, "tools": [WEATHER]}
    headers, events = await sse_events(proxy, body)
    assert (headers["x-router-tier"], headers["x-router-escalated"]) == ("full", "true")
    kinds = block_sequence(events)
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
    assert deltas and all(d["type"] == "input_json_delta" for d in deltas)
    assert len(deltas) > 1  # the tier's own deltas, as it sent them
    assert isinstance(orjson.loads("".join(d["partial_json"] for d in deltas))["city"], str)
    [request] = await fake_requests(claude.url, path="/v1/messages")
    assert request["body"]["tools"] == [WEATHER] and request["body"]["stream"] is True


async def test_native_checked_tier_escalates_its_own_mistakes(start_fake_, proxy_, sdk) -> None:
    claude = await start_fake_(FakeConfig(seed=11, api_key=ANTHROPIC_KEY, bad_tool_rate=1.0,
                                          bad_kinds=("schema_violation",)))  # fmt: skip
    full = await start_fake_(FakeConfig(seed=12))
    proxy = await proxy_(native_policy(full.url, claude.url.removesuffix("/v1"), claude_is="fast"))
    client = sdk(proxy)
    raw = await client.messages.with_raw_response.create(model="auto", max_tokens=64, messages=ASK, tools=[WEATHER])
    assert (raw.headers["x-router-tier"], raw.headers["x-router-mistakes"]) == ("full", "schema_violation")
    [call] = (await raw.parse()).content
    assert call.type == "tool_use" and isinstance(call.input["city"], str)  # type: ignore[index]
    headers, events = await sse_events(proxy, {"model": "auto", "max_tokens": 64, "messages": ASK, "tools": [WEATHER]})
    assert (headers["x-router-tier"], headers["x-router-mistakes"]) == ("full", "schema_violation")
    assert block_sequence(events).count("message_start") == 1
    starts = [e["content_block"] for e in events if e["type"] == "content_block_start"]
    assert [b["type"] for b in starts] == ["tool_use"]


def test_text_after_a_closed_native_text_block_opens_a_block_of_its_own() -> None:
    """An escalation can join a native attempt's closed text block and a chat attempt's text."""
    from router.messages.events import MessageEvents
    from router.upstream.base import Chunk

    events = MessageEvents("msg_1", "m")
    start = {"type": "message_start", "message": {"id": "x", "type": "message", "role": "assistant", "model": "m",
                                                  "content": [], "usage": {"input_tokens": 3}}}  # fmt: skip
    native = [
        start,
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
        {"type": "content_block_stop", "index": 0},
    ]
    out = [e for n in native for e in events.feed(Chunk({}, native=n))]
    chat = {"choices": [{"index": 0, "delta": {"content": "\n\nMore"}, "finish_reason": None}]}
    out += events.feed(Chunk(chat)) + events.close()
    kinds = [(e["type"], e.get("index")) for e in out]
    assert kinds == [
        ("message_start", None), ("ping", None),
        ("content_block_start", 0), ("content_block_delta", 0), ("content_block_stop", 0),
        ("content_block_start", 1), ("content_block_delta", 1), ("content_block_stop", 1),
        ("message_delta", None), ("message_stop", None),
    ]  # fmt: skip
    assert out[0]["message"]["id"] == "msg_1" and out[-2]["usage"]["input_tokens"] == 3

"""A stream whose first chunk is slow to come (a cold agent prompt read on a CPU server takes minutes)
starts with keep-alives, in each API's own way, so that the agent does not give up on a silent
stream; an escalation meanwhile stays invisible, and the answer is whole. Real SDKs read them."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from router.fake import FakeConfig
from tests.api.helpers import TOOLS, USER, post, sse
from tests.api.test_stream_tiers import ANTHROPIC_TOOLS, ESCALATE
from tests.conftest import policy_text

SLOW = FakeConfig(seed=2, delay_ms=1500)  # 1.5 s before its headers: several keep-alives of 0.2 s


async def slow_proxy(start_fake_: Any, proxy_: Any, fast: FakeConfig = SLOW) -> Any:
    full = await start_fake_(SLOW)
    first = await start_fake_(fast)
    return await proxy_(policy_text(first.url, full.url, extra=ESCALATE), stream_keepalive=0.2)


async def test_chat_keepalives_are_sse_comments(start_fake_: Any, proxy_: Any) -> None:
    proxy = await slow_proxy(start_fake_, proxy_)
    body = {"model": "auto", "messages": USER, "tools": TOOLS, "stream": True}
    raw = await post(f"{proxy.url}/chat/completions", body)
    assert raw.status == 200
    _, comments, done = sse(raw.body)
    assert comments.count(b"keep-alive") >= 2 and done
    assert raw.body.index(b": keep-alive") < raw.body.index(b"data: ")  # before the answer, never within
    sdk = openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0)
    stream = await sdk.chat.completions.create(model="auto", messages=USER, tools=TOOLS, stream=True)  # type: ignore[arg-type]
    calls = [tc for chunk in [c async for c in stream] for ch in chunk.choices for tc in ch.delta.tool_calls or []]
    assert calls and calls[0].function and calls[0].function.name == "get_weather"


async def test_an_escalation_behind_keepalives_stays_invisible(start_fake_: Any, proxy_: Any) -> None:
    proxy = await slow_proxy(
        start_fake_, proxy_, FakeConfig(seed=1, delay_ms=500, bad_tool_rate=1.0, bad_kinds=("invalid_json",))
    )
    body = {"model": "auto", "messages": USER, "tools": TOOLS, "stream": True}
    raw = await post(f"{proxy.url}/chat/completions", body)
    data, comments, _ = sse(raw.body)
    names = [
        tc["function"]["name"]
        for e in data
        for c in e["choices"]
        for tc in c["delta"].get("tool_calls") or []
        if tc.get("id")
    ]
    assert names == ["get_weather"] and b"keep-alive" in comments
    summary = [c for c in comments if c.startswith(b"router ")]
    assert b'"escalated":true' in summary[0]


async def test_messages_keepalives_are_pings(start_fake_: Any, proxy_: Any) -> None:
    proxy = await slow_proxy(start_fake_, proxy_)
    body = {"model": "auto", "max_tokens": 64, "messages": USER, "tools": ANTHROPIC_TOOLS, "stream": True}
    raw = await post(f"{proxy.base}/v1/messages", body)
    kinds = [line[7:].decode() for line in raw.body.split(b"\n") if line.startswith(b"event: ")]
    assert kinds[0] == "message_start" and kinds.count("message_start") == 1 and kinds.count("ping") >= 3
    assert kinds.index("content_block_start") > max(i for i, k in enumerate(kinds) if k == "ping")
    sdk = anthropic.AsyncAnthropic(base_url=proxy.base, api_key="x", max_retries=0)
    async with sdk.messages.stream(model="auto", max_tokens=64, messages=USER, tools=ANTHROPIC_TOOLS) as stream:  # type: ignore[arg-type]
        final = await stream.get_final_message()
    assert [b.name for b in final.content if b.type == "tool_use"] == ["get_weather"]


async def test_responses_keepalives_are_in_progress_events(start_fake_: Any, proxy_: Any) -> None:
    proxy = await slow_proxy(start_fake_, proxy_)
    sdk = openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0)
    tools = [{"type": "function", **t["function"]} for t in TOOLS]
    stream = await sdk.responses.create(model="auto", input=USER[0]["content"], tools=tools, stream=True)  # type: ignore[arg-type]
    events = [e async for e in stream]
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds.count("response.in_progress") >= 3
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert kinds[-1] == "response.completed"
    assert [i.name for i in events[-1].response.output if i.type == "function_call"] == ["get_weather"]


@pytest.mark.parametrize("keepalive", [0.0, 5.0])
async def test_no_keepalive_when_off_or_the_answer_is_quick(start_fake_: Any, proxy_: Any, keepalive: float) -> None:
    fake = await start_fake_(FakeConfig(seed=2, delay_ms=300))
    proxy = await proxy_(policy_text(fake.url), stream_keepalive=keepalive)
    raw = await post(
        f"{proxy.url}/chat/completions", {"model": "auto", "messages": USER, "tools": TOOLS, "stream": True}
    )
    assert b"keep-alive" not in raw.body and raw.status == 200

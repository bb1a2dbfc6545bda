"""Which tier a stream names, on chat, Responses and Messages SSE, when the answer came from another.

An invisible escalation (the fast tier's call was held and failed its checks) is told in the headers:
they wait for the first chunk that reaches the client. After a visible one (the fast tier's text went
out, then its missing call was answered by the full tier) the headers had left already: they name the
fast tier, and everything written when the call ends names the tier that answered — the final
`router` summary, the access log line, the call metrics (docs/clients.md, "Which tier answered").
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from router.fake import FakeConfig
from tests.api.helpers import TOOLS, USER, get, post, sse, trailer
from tests.conftest import Proxy, policy_text

ESCALATE = "escalation: {to: full}\n"
NO_SALVAGE = """
    routes:
      - name: simple-tool-call
        when: {tools: {present: true, max_count: 8}, last_role: [user, tool]}
        use: fast
        salvage: false
      - name: default
        use: full
"""
ANTHROPIC_TOOLS = [{"name": t["function"]["name"], "input_schema": t["function"]["parameters"]} for t in TOOLS]
TRANSPORTS = ("chat", "responses", "messages")


def request(transport: str) -> tuple[str, dict[str, Any]]:
    """The path and streamed body of one weather call on `transport`."""
    if transport == "chat":
        return "/v1/chat/completions", {"model": "auto", "messages": USER, "tools": TOOLS, "stream": True}
    if transport == "responses":
        tools = [{"type": "function", **t["function"]} for t in TOOLS]
        return "/v1/responses", {"model": "auto", "input": USER[0]["content"], "tools": tools, "stream": True}
    body = {"model": "auto", "max_tokens": 64, "messages": USER, "tools": ANTHROPIC_TOOLS, "stream": True}
    return "/v1/messages", body


def read(transport: str, events: list[dict[str, Any]]) -> tuple[list[str], str, list[str]]:
    """(the models the stream names, its text, the names of its calls) as the client reads them."""
    if transport == "chat":
        choices = [c for e in events for c in e["choices"]]
        text = "".join(c["delta"].get("content") or "" for c in choices)
        calls = [tc["function"]["name"] for c in choices for tc in c["delta"].get("tool_calls") or [] if tc.get("id")]
        return sorted({e["model"] for e in events}), text, calls
    if transport == "responses":
        models = sorted({e["response"]["model"] for e in events if "response" in e})
        output = events[-1]["response"]["output"]
        text = "".join(p["text"] for i in output if i["type"] == "message" for p in i["content"])
        return models, text, [i["name"] for i in output if i["type"] == "function_call"]
    [start] = [e["message"] for e in events if e["type"] == "message_start"]
    blocks = [e["content_block"] for e in events if e["type"] == "content_block_start"]
    text = "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta" and "text" in e["delta"])
    return [start["model"]], text, [b["name"] for b in blocks if b["type"] == "tool_use"]


async def two_tiers(start_fake_, proxy_, kind: str) -> Proxy:
    fast = await start_fake_(FakeConfig(seed=1, bad_tool_rate=1.0, bad_kinds=(kind,)))
    full = await start_fake_(FakeConfig(seed=2))
    return await proxy_(policy_text(fast.url, full.url, extra=ESCALATE, routes=NO_SALVAGE))  # type: ignore[no-any-return]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_headers_wait_for_the_first_chunk_and_name_the_tier_that_answered(
    start_fake_, proxy_, transport: str
) -> None:
    proxy = await two_tiers(start_fake_, proxy_, "invalid_json")
    path, body = request(transport)
    raw = await post(proxy.base + path, body)
    h = raw.headers
    assert (h["x-router-tier"], h["x-router-escalated"], h["x-router-mistakes"]) == ("full", "true", "invalid_json")
    models, text, calls = read(transport, sse(raw.body)[0])
    assert (models, text, calls) == (["full-model"], "", ["get_weather"])
    assert trailer(raw.body)["tier"] == "full"


async def _access_lines(caplog: pytest.LogCaptureFixture, n: int) -> list[str]:
    for _ in range(200):  # a stream's line is written once its last byte went out: bounded, 2 s
        lines = [r.getMessage() for r in caplog.records if r.name == "router.access"]
        if len(lines) >= n:
            return lines
        await asyncio.sleep(0.01)
    raise AssertionError(f"{n} access log lines expected, got {lines}")


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_after_text_the_final_records_name_the_tier_that_answered(
    start_fake_, proxy_, caplog: pytest.LogCaptureFixture, transport: str
) -> None:
    proxy = await two_tiers(start_fake_, proxy_, "missing_tool_call")
    path, body = request(transport)
    with caplog.at_level(logging.INFO, logger="router.access"):
        raw = await post(proxy.base + path, body)
        [line] = await _access_lines(caplog, 1)
    h = raw.headers  # sent with the fast tier's text, before its mistake was known
    assert (h["x-router-tier"], h["x-router-escalated"], h["x-router-mistakes"]) == ("fast", "false", "")
    t = trailer(raw.body)
    final = (t["tier"], t["escalated"], t["mistakes"], t["tiers"])
    assert final == ("full", True, ["missing_tool_call"], ["fast", "full"])
    if transport == "responses":
        assert sse(raw.body)[0][-1]["router"] == t
    assert f"{path} 200 tier=full route=simple-tool-call escalated=true " in line
    metrics = (await get(proxy.base + "/metrics")).body.decode()
    assert 'router_calls_total{escalated="true",route="simple-tool-call",tier="full"} 1.0' in metrics
    assert 'router_calls_total{escalated="false",route="simple-tool-call",tier="fast"}' not in metrics


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_announced_call_reads_as_its_text_then_the_next_tiers_call(start_fake_, proxy_, transport) -> None:
    """The fast tier's "I will call get_weather now." is not held (text never waits for its check: it
    would delay every text stream), so it reached the client before the answer was found to make no
    call; the full tier's call follows in the same message, a valid text-then-call answer in each API
    (docs/policy.md, "After text was sent")."""
    proxy = await two_tiers(start_fake_, proxy_, "missing_tool_call")
    path, body = request(transport)
    raw = await post(proxy.base + path, body)
    events = sse(raw.body)[0]
    models, text, calls = read(transport, events)
    assert (text, calls) == ("I will call get_weather now.", ["get_weather"])
    if transport == "chat":
        assert models == ["fast-model", "full-model"]  # each chunk as its tier wrote it
        assert [c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]] == ["tool_calls"]
    elif transport == "responses":
        assert models == ["fast-model"]  # every envelope event: the model of the first chunk, as the headers
        assert [i["type"] for i in events[-1]["response"]["output"]] == ["message", "function_call"]
    else:
        assert models == ["fast-model"]
        blocks = [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"]
        assert blocks == ["text", "tool_use"]
        [stop] = [e["delta"]["stop_reason"] for e in events if e["type"] == "message_delta"]
        assert stop == "tool_use"

"""POST /v1/chat/completions end to end: pass-through fidelity, SSE, routing, headers, models, health.

Real servers: the proxy (uvicorn) in front of fake upstreams (router/fake/server.py); the client is
the official openai SDK, raw HTTP (aiohttp) where bytes matter.
"""

from __future__ import annotations

import re
from typing import Any

import openai
import orjson
import pytest

from router.fake import FakeConfig
from tests.api.helpers import (
    READ_FILE,
    TOOLS,
    USER,
    WEATHER,
    assert_valid_weather_call,
    fake_requests,
    get,
    post,
    sse,
    stream_reassembled,
    trailer,
    with_key,
)
from tests.conftest import policy_text

ESCALATE = "escalation: {to: full}\n"
ALL_FAST = """
    routes:
      - name: everything
        use: fast
"""


# ------------------------------------------------------------------------------ pass-through


async def test_unknown_fields_reach_upstream_untouched_model_replaced(start_fake_, proxy_, sdk) -> None:
    fast = await start_fake_(FakeConfig(seed=1, api_key="sk-tier-fast-0123456789"))
    full = await start_fake_(FakeConfig(seed=2))
    policy = with_key(policy_text(fast.url, full.url, extra=ESCALATE), "fast", "sk-tier-fast-0123456789")
    proxy = await proxy_(policy)
    sent: dict[str, Any] = {
        "model": "auto",
        "messages": USER,
        "tools": [WEATHER, READ_FILE],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "temperature": 0.25,
        "seed": 42,
        "logit_bias": {"50256": -100},
        "response_format": {"type": "json_object"},
        "parallel_tool_calls": False,
        "foo": {"bar": 1},
        "metadata": {"a": "b"},
    }
    c = sdk(proxy.url, api_key="client-key-must-not-travel")
    known = {k: v for k, v in sent.items() if k not in ("foo",)}
    raw = await c.chat.completions.with_raw_response.create(
        **known, extra_body={"foo": {"bar": 1}}, extra_headers={"x-custom-header": "client-only"}
    )
    assert raw.headers["x-router-tier"] == "fast"
    msg = raw.parse().choices[0].message
    assert msg.tool_calls and msg.tool_calls[0].function.name == "get_weather"

    [seen] = await fake_requests(fast.url)
    assert seen["body"] == {**sent, "model": "fast-model"}
    headers = seen["headers"]
    assert headers["authorization"] == "Bearer sk-tier-fast-0123456789"
    assert "x-custom-header" not in headers
    assert not [h for h in headers if h.startswith("x-stainless")]
    assert "client-key-must-not-travel" not in orjson.dumps(headers).decode()
    assert await fake_requests(full.url) == []


async def test_stream_fields_pass_through_and_json_drops_stream_options(start_fake_, proxy_) -> None:
    fast = await start_fake_(FakeConfig(seed=1))
    proxy = await proxy_(policy_text(fast.url, extra=ESCALATE, routes=ALL_FAST))
    body = {
        "model": "auto",
        "messages": USER,
        "stream": True,
        "stream_options": {"include_usage": True},
        "foo": [1, {"x": None}],
        "top_p": 0.5,
    }
    raw = await post(proxy.url + "/chat/completions", body)
    assert raw.status == 200
    json_body = {"model": "auto", "messages": USER, "stream": False, "stream_options": {"include_usage": True}}
    assert (await post(proxy.url + "/chat/completions", json_body)).status == 200
    streamed, plain = await fake_requests(fast.url)
    assert streamed["body"] == {**body, "model": "fast-model"}
    assert plain["body"] == {"model": "fast-model", "messages": USER}


# ------------------------------------------------------------------------------ SSE fidelity


_CREATED = re.compile(rb'"created":\d+')

REQUESTS: list[dict[str, Any]] = [
    {"messages": USER, "stream": True},
    {"messages": USER, "tools": TOOLS, "stream": True},
    {"messages": USER, "stream": True, "stream_options": {"include_usage": True}},
    {"messages": USER, "tools": [WEATHER, READ_FILE], "stream": True, "stream_options": {"include_usage": True}},
]


async def test_sse_text_is_byte_identical_on_a_tier_with_no_escalation(start_fake_, proxy_) -> None:
    """No escalation, yet the tier is checked: text events are forwarded as they came, byte for
    byte; tool calls are held until checked and reassemble to what the upstream streamed."""
    behind = await start_fake_(FakeConfig(seed=7))
    twin = await start_fake_(FakeConfig(seed=7))
    proxy = await proxy_(policy_text(behind.url, routes=ALL_FAST))
    for req in REQUESTS:
        via = await post(proxy.url + "/chat/completions", {"model": "auto", **req})
        direct = await post(twin.url + "/chat/completions", {"model": "fast-model", **req})
        assert via.status == direct.status == 200
        assert via.headers["content-type"].startswith("text/event-stream")
        if "tools" in req:
            assert _reassemble(sse(via.body)[0]) == _reassemble(sse(direct.body)[0])
        else:
            frames = [f for f in via.body.split(b"\n\n") if f and not f.startswith(b": router ")]
            expected = [f for f in direct.body.split(b"\n\n") if f]
            assert [_CREATED.sub(b"", f) for f in frames] == [_CREATED.sub(b"", f) for f in expected]
        assert trailer(via.body)["tier"] == "fast"


def _reassemble(events: list[dict[str, Any]]) -> dict[str, Any]:
    content, calls, finishes, usage, ids = "", {}, [], None, set()
    for e in events:
        ids.add(e["id"])
        usage = e.get("usage") or usage
        for ch in e["choices"]:
            d = ch["delta"]
            content += d.get("content") or ""
            for tc in d.get("tool_calls") or []:
                call = calls.setdefault(tc["index"], {"id": "", "name": "", "arguments": ""})
                call["id"] += tc.get("id") or ""
                call["name"] += (tc.get("function") or {}).get("name") or ""
                call["arguments"] += (tc.get("function") or {}).get("arguments") or ""
            if ch.get("finish_reason"):
                finishes.append(ch["finish_reason"])
    return {"content": content, "calls": calls, "finishes": finishes, "usage": usage, "ids": ids}


async def test_sse_checked_tier_reassembles_to_what_the_upstream_streamed(start_fake_, proxy_) -> None:
    """Escalation on: fast answers are held until checked, then released — same content, same calls."""
    behind = await start_fake_(FakeConfig(seed=11))
    full = await start_fake_(FakeConfig(seed=99))
    twin = await start_fake_(FakeConfig(seed=11))
    proxy = await proxy_(policy_text(behind.url, full.url, extra=ESCALATE, routes=ALL_FAST))
    for req in REQUESTS:
        via = await post(proxy.url + "/chat/completions", {"model": "auto", **req})
        direct = await post(twin.url + "/chat/completions", {"model": "fast-model", **req})
        got, _, got_done = sse(via.body)
        want, _, want_done = sse(direct.body)
        assert got_done and want_done
        assert _reassemble(got) == _reassemble(want)
        assert got[0]["choices"][0]["delta"].get("role") == "assistant", got[0]
        assert sum("role" in e["choices"][0]["delta"] for e in got if e["choices"]) == 1
        if req.get("stream_options"):
            assert got[-1]["choices"] == [] and got[-1]["usage"]["total_tokens"] > 0
        t = trailer(via.body)
        assert (t["tier"], t["route"], t["escalated"], t["mistakes"], t["tiers"]) == (
            "fast",
            "everything",
            False,
            [],
            ["fast"],
        )
    assert await fake_requests(full.url) == []


async def test_sse_through_the_sdk_with_include_usage(start_fake_, proxy_, sdk) -> None:
    fast = await start_fake_(FakeConfig(seed=3))
    proxy = await proxy_(policy_text(fast.url, extra=ESCALATE))
    c = sdk(proxy.url)
    raw = await c.chat.completions.with_raw_response.create(
        model="auto", messages=USER, tools=TOOLS, stream=True, stream_options={"include_usage": True}
    )
    assert raw.headers["x-router-tier"] == "fast"
    assert raw.headers["x-router-route"] == "simple-tool-call"
    assert raw.headers["x-router-escalated"] == "false"
    assert raw.headers["x-router-mistakes"] == ""
    got = await stream_reassembled(raw.parse())
    assert len(got["ids"]) == 1 and got["finishes"] == ["tool_calls"]
    [call] = got["calls"].values()
    assert_valid_weather_call(call["name"], call["arguments"])
    assert got["usage"] is not None and got["usage"].total_tokens > 0


# ------------------------------------------------------------------------------ admin endpoints


async def test_models_lists_each_tier_once_with_its_aliases(fake, proxy_, sdk) -> None:
    extra = 'aliases: {"*": auto, "gpt-4o-mini": fast, "smart": full, "claude-*": auto}\n'
    proxy = await proxy_(policy_text(fake.url, extra=extra))
    page = await sdk(proxy.url).models.list()
    discovered = ["claude-router", "claude-router-fast", "claude-router-full"]  # what Claude Code's picker keeps
    assert [m.id for m in page.data] == ["fast", "full", "auto", *discovered]  # globs are not model ids
    assert all(m.object == "model" and m.owned_by == "agent-router" for m in page.data)
    assert [m.model_extra["aliases"] for m in page.data] == [["gpt-4o-mini"], ["smart"], [], [], [], []]
    assert [m.model_extra["context_window"] for m in page.data] == [None] * 6  # the fake reports none


async def test_healthz(fake, proxy_) -> None:
    proxy = await proxy_(policy_text(fake.url))
    raw = await get(proxy.base + "/healthz")
    assert raw.status == 200
    assert raw.json()["status"] == "ok"


# ------------------------------------------------------------------------------ routing


ROUTING_EXTRA = """
    aliases: {"auto": auto, "gpt-*": auto, "claude-*": auto, "cheap": fast, "smart": full}
    allow_tier_header: true
"""
ROUTING = """
    routes:
      - name: infra-team
        when: {headers: {X-Team: "infra-*"}}
        use: full
      - name: claude-names
        when: {model: ["claude-*"]}
        use: full
      - name: few-tools
        when: {tools: {present: true, max_count: 2}, last_role: [user, tool]}
        use: fast
      - name: default
        use: full
"""


async def _route(c: openai.AsyncOpenAI, **kwargs: Any) -> tuple[str, str]:
    kwargs.setdefault("model", "auto")
    kwargs.setdefault("messages", USER)
    raw = await c.chat.completions.with_raw_response.create(**kwargs)
    raw.parse()
    return raw.headers["x-router-tier"], raw.headers["x-router-route"]


async def test_routes_by_tools_role_model_header_and_alias(start_fake_, proxy_, sdk) -> None:
    fast = await start_fake_(FakeConfig(seed=1))
    full = await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(policy_text(fast.url, full.url, extra=ROUTING_EXTRA, routes=ROUTING))
    c = sdk(proxy.url)
    three = [WEATHER, READ_FILE, {"type": "function", "function": {"name": "noop", "parameters": {}}}]
    assert await _route(c, tools=TOOLS) == ("fast", "few-tools")
    assert await _route(c, tools=three) == ("full", "default")  # over max_count
    assert await _route(c) == ("full", "default")  # no tools
    prefill = [*USER, {"role": "assistant", "content": "Let me"}]
    assert await _route(c, tools=TOOLS, messages=prefill) == ("full", "default")  # last_role
    assert await _route(c, tools=TOOLS, model="gpt-4.1") == ("fast", "few-tools")  # glob alias → auto
    assert await _route(c, tools=TOOLS, model="claude-opus") == ("full", "claude-names")
    assert await _route(c, tools=TOOLS, extra_headers={"x-team": "infra-db"}) == ("full", "infra-team")
    assert await _route(c, tools=TOOLS, extra_headers={"x-team": "web"}) == ("fast", "few-tools")
    assert await _route(c, model="cheap") == ("fast", "alias:cheap")
    assert await _route(c, tools=TOOLS, model="smart") == ("full", "alias:smart")
    assert await _route(c, extra_headers={"x-router-tier": "fast"}) == ("fast", "header")
    # the tier each fake served matches the headers
    fast_models = [r["body"]["model"] for r in await fake_requests(fast.url)]
    full_models = [r["body"]["model"] for r in await fake_requests(full.url)]
    assert fast_models == ["fast-model"] * 5
    assert full_models == ["full-model"] * 6


async def test_tier_header_ignored_unless_allowed(start_fake_, proxy_, sdk) -> None:
    fast = await start_fake_(FakeConfig(seed=1))
    full = await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(policy_text(fast.url, full.url))
    c = sdk(proxy.url)
    assert await _route(c, extra_headers={"x-router-tier": "fast"}) == ("full", "default")


async def test_unknown_model_is_an_openai_404(fake, proxy_, sdk) -> None:
    proxy = await proxy_(policy_text(fake.url, extra='aliases: {"auto": auto, "cheap": fast}\n'))
    with pytest.raises(openai.NotFoundError) as info:
        await sdk(proxy.url).chat.completions.create(model="no-such-model", messages=USER)
    err = info.value
    assert err.status_code == 404
    assert err.body is not None and err.body["code"] == "model_not_found"  # type: ignore[index]
    assert set(err.body) == {"message", "type", "param", "code"}  # type: ignore[arg-type]
    assert err.response.headers["content-type"].startswith("application/json")
    assert await fake_requests(fake.url) == []


async def test_router_headers_on_json_and_sse(start_fake_, proxy_, sdk) -> None:
    fast = await start_fake_(FakeConfig(seed=5))
    full = await start_fake_(FakeConfig(seed=6))
    proxy = await proxy_(policy_text(fast.url, full.url, extra=ESCALATE))
    c = sdk(proxy.url)
    for stream in (False, True):
        raw = await c.chat.completions.with_raw_response.create(model="auto", messages=USER, stream=stream)
        h = raw.headers
        assert (h["x-router-tier"], h["x-router-route"]) == ("full", "default")
        assert h["x-router-escalated"] == "false" and h["x-router-mistakes"] == ""
        if stream:
            got = await stream_reassembled(raw.parse())
            assert got["content"] and got["finishes"] == ["stop"]
        else:
            assert raw.parse().choices[0].message.content

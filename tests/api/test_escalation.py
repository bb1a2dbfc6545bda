"""Escalation end to end: a broken fast tier, a healthy full tier, what the client sees and what is counted.

Two fake upstreams per test: `fast` is configured to fail in one way, `full` is healthy. A third
"twin" fake with the fast tier's seed and config answers the same requests directly, which tells
the test exactly what the fast tier said — so it can check that none of it reached the client.
"""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import orjson
import pytest

from router.fake import FakeConfig, FakeServer
from tests.api.helpers import (
    BAD_KINDS,
    TOOLS,
    USER,
    assert_error_body,
    assert_valid_weather_call,
    fake_requests,
    get,
    post,
    sse,
    stream_reassembled,
    trailer,
)
from tests.conftest import Proxy, policy_text
from tests.sweeps import SHELL_TOOLS

ESCALATE = "escalation: {to: full}\n"
TOOL_CALL = {"model": "auto", "messages": USER, "tools": TOOLS}


def broken(kind: str, seed: int = 1) -> FakeConfig:
    return FakeConfig(seed=seed, bad_tool_rate=1.0, bad_kinds=(kind,))


# Salvage (tests/api/test_salvage.py) would turn the fake's valid text calls into tool calls: these
# tests are about what escalates, so their route has it off.
NO_SALVAGE = """
    routes:
      - name: simple-tool-call
        when: {tools: {present: true, max_count: 8}, last_role: [user, tool]}
        use: fast
        salvage: false
      - name: default
        use: full
"""


async def two_tiers(start_fake_, proxy_, fast_cfg: FakeConfig, *, extra: str = ESCALATE, **settings: Any):
    fast = await start_fake_(fast_cfg)
    full = await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(policy_text(fast.url, full.url, extra=extra, routes=NO_SALVAGE), **settings)
    return fast, full, proxy


async def fast_said(twin: FakeServer, n: int) -> list[bytes]:
    """What the fast tier answered to its first `n` tool-call requests (the twin answers them again)."""
    out = []
    for _ in range(n):
        raw = await post(twin.url + "/chat/completions", {**TOOL_CALL, "model": "fast-model"})
        out.append(raw.body)
    return out


def call_id_of(fast_body: bytes) -> str | None:
    msg = orjson.loads(fast_body)["choices"][0]["message"]
    return msg["tool_calls"][0]["id"] if msg.get("tool_calls") else None


# ------------------------------------------------------------------------------ each bad kind


@pytest.mark.parametrize("kind", BAD_KINDS)
async def test_bad_kind_escalates_json(start_fake_, proxy_, sdk, kind: str) -> None:
    fast, full, proxy = await two_tiers(start_fake_, proxy_, broken(kind))
    twin = await start_fake_(broken(kind))
    raw = await sdk(proxy.url).chat.completions.with_raw_response.create(**TOOL_CALL)
    h = raw.headers
    assert (h["x-router-tier"], h["x-router-escalated"], h["x-router-mistakes"]) == ("full", "true", kind)
    assert h["x-router-route"] == "simple-tool-call"
    msg = raw.parse().choices[0].message
    [call] = msg.tool_calls
    assert_valid_weather_call(call.function.name, call.function.arguments)
    assert not msg.content
    [said] = await fast_said(twin, 1)
    assert orjson.loads(said)["choices"][0]["message"] != msg.model_dump(exclude_none=True)
    if (fast_id := call_id_of(said)) is not None:
        assert fast_id not in raw.http_response.text
    assert len(await fake_requests(fast.url)) == len(await fake_requests(full.url)) == 1


@pytest.mark.parametrize("kind", [k for k in BAD_KINDS if k != "missing_tool_call"])
async def test_bad_kind_escalates_sse_invisibly(start_fake_, proxy_, sdk, kind: str) -> None:
    fast, full, proxy = await two_tiers(start_fake_, proxy_, broken(kind))
    twin = await start_fake_(broken(kind))
    # 1: through the SDK's stream parser
    raw = await sdk(proxy.url).chat.completions.with_raw_response.create(**TOOL_CALL, stream=True)
    h = raw.headers
    assert (h["x-router-tier"], h["x-router-escalated"], h["x-router-mistakes"]) == ("full", "true", kind)
    got = await stream_reassembled(raw.parse())
    assert len(got["ids"]) == 1 and got["finishes"] == ["tool_calls"]
    assert got["content"] == ""  # nothing of the fast attempt leaked
    [call] = got["calls"].values()
    assert_valid_weather_call(call["name"], call["arguments"])
    # 2: raw bytes, for the trailer and for leaks
    streamed = await post(proxy.url + "/chat/completions", {**TOOL_CALL, "stream": True})
    events, _, done = sse(streamed.body)
    assert done and streamed.headers["x-router-escalated"] == "true"
    assert len({e["id"] for e in events}) == 1
    assert sum(1 for e in events for c in e["choices"] if c.get("finish_reason")) == 1
    deltas = [tc for e in events for c in e["choices"] for tc in c["delta"].get("tool_calls") or []]
    assert sum(1 for tc in deltas if tc.get("id")) == 1
    assert all(c["delta"].get("content") in (None, "") for e in events for c in e["choices"])
    t = trailer(streamed.body)
    assert (t["tier"], t["escalated"], t["mistakes"], t["tiers"]) == ("full", True, [kind], ["fast", "full"])
    for fast_body, client_saw in zip(await fast_said(twin, 2), (str(got), streamed.body.decode()), strict=True):
        if (fast_id := call_id_of(fast_body)) is not None:
            assert fast_id not in client_saw
    assert len(await fake_requests(fast.url)) == len(await fake_requests(full.url)) == 2


async def test_after_content_escalation_is_one_valid_stream(start_fake_, proxy_, sdk) -> None:
    """The fast tier says "I will call get_weather now." (sent at once) and makes no call: the stream
    was already started, so the full tier's call follows in the same stream, under the same id."""
    _fast, _full, proxy = await two_tiers(start_fake_, proxy_, broken("missing_tool_call"))
    raw = await sdk(proxy.url).chat.completions.with_raw_response.create(**TOOL_CALL, stream=True)
    assert raw.headers["x-router-tier"] == "fast"  # the headers left before the mistake was known
    got = await stream_reassembled(raw.parse())
    assert got["content"] == "I will call get_weather now."
    assert len(got["ids"]) == 1 and got["finishes"] == ["tool_calls"]
    [call] = got["calls"].values()
    assert_valid_weather_call(call["name"], call["arguments"])

    streamed = await post(proxy.url + "/chat/completions", {**TOOL_CALL, "stream": True})
    events, _, done = sse(streamed.body)
    assert done
    assert len({e["id"] for e in events}) == 1
    roles = [c["delta"]["role"] for e in events for c in e["choices"] if "role" in c["delta"]]
    assert roles == ["assistant"]
    assert sum(1 for e in events for c in e["choices"] if c.get("finish_reason")) == 1
    t = trailer(streamed.body)
    assert (t["tier"], t["escalated"], t["mistakes"], t["tiers"]) == (
        "full",
        True,
        ["missing_tool_call"],
        ["fast", "full"],
    )


@pytest.mark.parametrize("stream", [False, True])
async def test_the_fakes_tool_sweep_escalates_with_salvage_on(start_fake_, proxy_, sdk, stream: bool) -> None:
    """The fake writes a call of every offered tool, in order, each valid, as text: salvage (on) does not
    make it eight calls; the checks find a `tool_sweep` and the full tier answers."""
    fast = await start_fake_(broken("tool_sweep"))
    full = await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(policy_text(fast.url, full.url, extra=ESCALATE))
    body = {"model": "auto", "messages": USER, "tools": SHELL_TOOLS}
    raw = await sdk(proxy.url).chat.completions.with_raw_response.create(**body, stream=stream)
    h = raw.headers
    if stream:
        got = await stream_reassembled(raw.parse())
        assert got["content"] == "" and got["finishes"] == ["tool_calls"]
        names = [c["name"] for c in got["calls"].values()]
    else:
        assert (h["x-router-tier"], h["x-router-mistakes"], h["x-router-salvaged"]) == ("full", "tool_sweep", "false")
        msg = raw.parse().choices[0].message
        assert not msg.content
        names = [c.function.name for c in msg.tool_calls or []]
    assert h["x-router-escalated"] == "true" and len(names) == 1
    assert len(await fake_requests(fast.url)) == len(await fake_requests(full.url)) == 1


# ------------------------------------------------------------------------------ upstream failures


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "fast_cfg",
    [FakeConfig(error_rate=1.0), FakeConfig(reset_before_first_byte=1.0)],
    ids=["http-500", "connection-reset"],
)
async def test_fast_failure_escalates_to_full(start_fake_, proxy_, sdk, fast_cfg: FakeConfig, stream: bool) -> None:
    fast, full, proxy = await two_tiers(start_fake_, proxy_, fast_cfg)
    raw = await sdk(proxy.url).chat.completions.with_raw_response.create(**TOOL_CALL, stream=stream)
    h = raw.headers
    assert (h["x-router-tier"], h["x-router-escalated"], h["x-router-mistakes"]) == ("full", "true", "upstream_error")
    if stream:
        got = await stream_reassembled(raw.parse())
        [call] = got["calls"].values()
        assert len(got["ids"]) == 1 and got["finishes"] == ["tool_calls"]
    else:
        [tc] = raw.parse().choices[0].message.tool_calls
        call = {"name": tc.function.name, "arguments": tc.function.arguments}
    assert_valid_weather_call(call["name"], call["arguments"])
    assert len(await fake_requests(fast.url)) == len(await fake_requests(full.url)) == 1


@pytest.mark.parametrize("stream", [False, True])
async def test_both_tiers_failing_is_502_within_max_attempts(start_fake_, proxy_, sdk, stream: bool) -> None:
    fast = await start_fake_(FakeConfig(error_rate=1.0))
    full = await start_fake_(FakeConfig(error_rate=1.0))
    extra = "escalation: {to: full, max_attempts: 3}\n"
    proxy = await proxy_(policy_text(fast.url, full.url, extra=extra))
    with pytest.raises(openai.InternalServerError) as info:
        await sdk(proxy.url).chat.completions.create(**TOOL_CALL, stream=stream)
    err = info.value
    assert err.status_code == 502
    assert err.response.headers["x-should-retry"] == "false"
    assert set(err.body) == {"message", "type", "param", "code"}  # type: ignore[arg-type]
    assert err.body["type"] == "upstream_error"  # type: ignore[index]
    sent = len(await fake_requests(fast.url)) + len(await fake_requests(full.url))
    assert 2 <= sent <= 3
    assert len(await fake_requests(fast.url)) == 1  # fast once, then full (retried while allowed)
    raw = await post(proxy.url + "/chat/completions", {**TOOL_CALL, "stream": stream})
    assert_error_body(raw, 502, type_="upstream_error")


@pytest.mark.parametrize("stream", [False, True])
async def test_no_attempt_left_is_a_retryable_error_not_a_malformed_call(start_fake_, proxy_, stream: bool) -> None:
    _fast, full, proxy = await two_tiers(
        start_fake_, proxy_, broken("invalid_json"), extra="escalation: {to: full, max_attempts: 1}\n"
    )
    raw = await post(proxy.url + "/chat/completions", {**TOOL_CALL, "stream": stream})
    assert_error_body(raw, 502, type_="upstream_error", code="checks_failed")
    assert raw.headers["x-should-retry"] == "true"
    assert "invalid_json" in orjson.loads(raw.body)["error"]["message"]
    assert await fake_requests(full.url) == []
    metrics = (await get(proxy.base + "/metrics")).body.decode()
    assert 'router_exhausted_total{route="simple-tool-call",tier="fast"} 1.0' in metrics


@pytest.mark.parametrize("stream", [False, True])
async def test_on_exhausted_deliver_hands_over_the_last_answer_with_its_mistake(
    start_fake_, proxy_, sdk, stream: bool
) -> None:
    fast, full, proxy = await two_tiers(
        start_fake_,
        proxy_,
        broken("invalid_json"),
        extra="escalation: {to: full, max_attempts: 1, on_exhausted: deliver}\n",
    )
    raw = await sdk(proxy.url).chat.completions.with_raw_response.create(**TOOL_CALL, stream=stream)
    h = raw.headers
    assert (h["x-router-tier"], h["x-router-escalated"], h["x-router-mistakes"]) == ("fast", "false", "invalid_json")
    assert h["x-router-exhausted"] == "true"
    if stream:
        got = await stream_reassembled(raw.parse())
        [call] = got["calls"].values()
        arguments = call["arguments"]
    else:
        arguments = raw.parse().choices[0].message.tool_calls[0].function.arguments
    with pytest.raises(orjson.JSONDecodeError):  # the broken answer, as the fast tier gave it
        orjson.loads(arguments)
    assert await fake_requests(full.url) == []
    assert len(await fake_requests(fast.url)) == 1


@pytest.mark.parametrize("stream", [False, True])
async def test_deadline_ends_the_call_with_a_timeout(start_fake_, proxy_, stream: bool) -> None:
    fast, full, proxy = await two_tiers(
        start_fake_, proxy_, FakeConfig(delay_ms=1000), extra="escalation: {to: full, deadline: 0.3}\n"
    )
    loop = asyncio.get_running_loop()
    started = loop.time()
    raw = await post(proxy.url + "/chat/completions", {**TOOL_CALL, "stream": stream})
    elapsed = loop.time() - started
    assert_error_body(raw, 504, type_="timeout_error", code="timeout")
    assert raw.headers["x-should-retry"] == "false"
    assert 0.25 <= elapsed < 0.8, elapsed
    assert await fake_requests(full.url) == []  # no time was left to escalate
    assert len(await fake_requests(fast.url)) == 1


# ------------------------------------------------------------------------------ stats


def counts(calls: int, mistakes: dict[str, int]) -> dict[str, Any]:
    total = sum(mistakes.values())
    rate = round(total / calls, 4) if calls else (1.0 if total else 0.0)
    return {"calls": calls, "mistakes": mistakes, "mistake_rate": rate}


SHAPE = ("calls", "mistakes", "mistake_rate")


def _shape(c: dict[str, Any]) -> dict[str, Any]:
    assert set(SHAPE) <= set(c), c  # more keys may be added; these stay (the published stats shape)
    return {k: c[k] for k in SHAPE}


async def stats_of(proxy: Proxy) -> dict[str, Any]:
    """/v1/router/stats reduced to the keys the stats promise."""
    raw = await get(proxy.url + "/router/stats")
    assert raw.status == 200
    data = raw.json()
    return {
        "tiers": {k: _shape(v) for k, v in data["tiers"].items()},
        "routes": {k: _shape(v) for k, v in data["routes"].items()},
        "tools": {t: {k: _shape(v) for k, v in d.items()} for t, d in data["tools"].items()},
    }


async def test_stats_after_a_known_sequence(start_fake_, proxy_, sdk) -> None:
    _fast, _full, proxy = await two_tiers(start_fake_, proxy_, broken("invalid_json"))
    c = sdk(proxy.url)
    await c.chat.completions.create(**TOOL_CALL)  # fast: invalid_json → full
    await stream_reassembled(await c.chat.completions.create(**TOOL_CALL, stream=True))  # the same, streamed
    await c.chat.completions.create(model="auto", messages=USER)  # no tools: default route → full
    data = await stats_of(proxy)
    assert data["tiers"] == {
        "fast": counts(2, {"invalid_json": 2}),
        "full": counts(3, {}),
    }
    assert data["routes"] == {
        "default": counts(1, {}),
        "simple-tool-call": counts(4, {"invalid_json": 2}),
    }
    assert data["tools"] == {
        "fast": {"get_weather": counts(2, {"invalid_json": 2})},
        "full": {"get_weather": counts(2, {})},
    }
    assert data["tiers"]["fast"]["mistake_rate"] == 1.0
    assert data["routes"]["simple-tool-call"]["mistake_rate"] == 0.5
    metrics = (await get(proxy.base + "/metrics")).body.decode()
    assert 'router_mistakes_total{kind="invalid_json",route="simple-tool-call",tier="fast"} 2.0' in metrics
    assert 'router_answers_total{route="simple-tool-call",tier="full"} 2.0' in metrics
    assert 'router_calls_total{escalated="true",route="simple-tool-call",tier="full"} 2.0' in metrics


async def test_stats_count_upstream_errors_on_the_failing_tier(start_fake_, proxy_, sdk) -> None:
    _fast, _full, proxy = await two_tiers(start_fake_, proxy_, FakeConfig(error_rate=1.0))
    await sdk(proxy.url).chat.completions.create(**TOOL_CALL)
    data = await stats_of(proxy)
    assert data["tiers"] == {"fast": counts(1, {"upstream_error": 1}), "full": counts(1, {})}
    assert data["tiers"]["fast"]["mistake_rate"] == 1.0
    assert data["routes"] == {"simple-tool-call": counts(2, {"upstream_error": 1})}
    assert data["tools"] == {"full": {"get_weather": counts(1, {})}}


@pytest.mark.parametrize("status", [401, 404])
async def test_upstream_refusing_the_routers_own_credentials_escalates(start_fake_, proxy_, sdk, status) -> None:
    """401/404 from a tier mean the router's key, URL or model id is wrong — not the client's
    request: they escalate like a 5xx, and if nothing can answer the client gets a 502."""
    fast = await start_fake_(FakeConfig(seed=1, api_key="a-key-the-policy-lacks" if status == 401 else None))
    full = await start_fake_(FakeConfig(seed=2))
    url = fast.url if status == 401 else fast.url.removesuffix("/v1") + f"/missing-{status}"
    proxy = await proxy_(policy_text(url, full.url, extra=ESCALATE))
    raw = await sdk(proxy.url).chat.completions.with_raw_response.create(**TOOL_CALL)
    h = raw.headers
    assert (h["x-router-tier"], h["x-router-escalated"], h["x-router-mistakes"]) == ("full", "true", "upstream_error")
    assert raw.parse().choices[0].message.tool_calls

"""Fast modes as the providers define them (router/upstream/speed.py): a lane's `anthropic/*` tier
variant with `speed: fast` sends it with the fast-mode beta merged into the client's own; a refusal
(not available, rate-limited) is answered at standard speed within the call, counted and told; the
speed each answer got is in `x-router-speed`, the trailer, the stats and the metrics; an `openai/*`
variant sends its `service_tier` and reports the one it got; no other upstream ever gets `speed`.
Real servers: the proxy, fake upstreams, the anthropic and openai SDKs."""

from __future__ import annotations

import importlib.util
from typing import Any

import anthropic
import openai
import pytest

from router.fake import FakeConfig, FakeServer
from router.fake.speed import FAST_MODE_BETA
from tests.api.helpers import USER, fake_requests, get, root
from tests.conftest import Proxy

KEY = "sk-ant-fast-mode-test-key"
CLIENT_BETA = "interleaved-thinking-2025-05-14"
LANES = """
lanes:
  fast:
    tiers: {opus: opus-fast}
  priority:
    service_tier: [priority]
    tiers: {gpt: gpt-priority}
"""


def fast_policy(claude: FakeServer, gpt: FakeServer, lanes: str = LANES) -> str:
    """One Claude model as two tiers (`opus`, and `opus-fast` asking for fast mode), one OpenAI model
    as two (`gpt`, and `gpt-priority` asking for priority processing); `gpt-*` names go to gpt."""
    return f"""
version: 1
models:
  opus: &opus
    model: anthropic/claude-opus-4-6
    api_base: {root(claude.url)}
    api_key: {KEY}
    warm_connections: 0
    timeouts: {{connect: 2, first_token: 5, total: 20}}
  opus-fast:
    <<: *opus
    speed: fast
  gpt: &gpt
    model: openai/gpt-5
    api_base: {gpt.url}
    warm_connections: 0
    timeouts: {{connect: 2, first_token: 5, total: 20}}
  gpt-priority:
    <<: *gpt
    service_tier: priority
aliases:
  "gpt-*": gpt
  "*": auto
routes:
  - name: default
    use: opus
{lanes}
store: memory://
"""


def claude_client(proxy: Proxy) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=proxy.base, api_key="x", max_retries=0)


async def ask_fast(proxy: Proxy, stream: bool) -> tuple[dict[str, str], Any]:
    """A Messages call asking for fast mode, with a beta of the client's own: (headers, message)."""
    beta = {"anthropic-beta": CLIENT_BETA}
    async with claude_client(proxy) as sdk:
        if stream:
            async with sdk.messages.with_streaming_response.create(
                model="claude-opus-4-6", max_tokens=32, messages=USER, speed="fast", stream=True, extra_headers=beta
            ) as raw:
                text = (await raw.read()).decode()
            final = [line for line in text.splitlines() if line.startswith(": router ")]
            assert final, "the stream ends with the router's trailer"
            start = next(line for line in text.splitlines() if '"message_start"' in line and line.startswith("data:"))
            return dict(raw.headers), {"trailer": final[-1], "start": start}
        raw_json = await sdk.messages.with_raw_response.create(
            model="claude-opus-4-6", max_tokens=32, messages=USER, speed="fast", extra_headers=beta
        )
        return dict(raw_json.headers), await raw_json.parse()


async def metric(proxy: Proxy, line: str) -> bool:
    return line in (await get(proxy.base + "/metrics")).body.decode()


async def tier_stats(proxy: Proxy, tier: str) -> dict[str, Any]:
    await proxy.runtime.store.flush()
    stats = (await get(proxy.base + "/v1/router/stats")).json()
    result: dict[str, Any] = stats["tiers"][tier]
    return result


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_the_fast_lane_sends_speed_with_the_beta_merged(start_fake_, proxy_, stream: bool) -> None:
    claude, gpt = await start_fake_(FakeConfig(seed=1, fast_models=("claude-opus-*",))), await start_fake_()
    proxy = await proxy_(fast_policy(claude, gpt))
    headers, answer = await ask_fast(proxy, stream)
    lane, tier, speed = headers["x-router-lane"], headers["x-router-tier"], headers["x-router-speed"]
    assert (lane, tier, speed) == ("fast", "opus-fast", "fast")
    [sent] = await fake_requests(claude.url, path="/v1/messages")
    assert sent["body"]["speed"] == "fast" and sent["body"]["model"] == "claude-opus-4-6"
    betas = [b.strip() for b in sent["headers"]["anthropic-beta"].split(",")]
    assert betas == [CLIENT_BETA, FAST_MODE_BETA]  # the client's own kept, fast mode's added
    if stream:
        assert '"speed":"fast"' in answer["start"]  # the answer's usage.speed, passed through
        assert '"speed":"fast"' in answer["trailer"]
    else:
        assert answer.usage.speed == "fast"

    async with claude_client(proxy) as sdk:  # the standard lane: the same model, nothing of fast mode
        raw = await sdk.messages.with_raw_response.create(model="claude-opus-4-6", max_tokens=32, messages=USER)
    assert (raw.headers["x-router-lane"], raw.headers["x-router-tier"], raw.headers["x-router-speed"]) == (
        "standard", "opus", "standard",
    )  # fmt: skip
    plain = (await fake_requests(claude.url, path="/v1/messages"))[-1]
    assert "speed" not in plain["body"] and "anthropic-beta" not in plain["headers"]
    assert (await tier_stats(proxy, "opus-fast"))["speeds"] == {"fast": 1}
    assert (await tier_stats(proxy, "opus"))["speeds"] == {"standard": 1}
    assert await metric(proxy, 'router_speeds_total{speed="fast",tier="opus-fast"} 1.0')


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_unavailable_fast_mode_falls_back_to_standard_speed_within_the_call(
    start_fake_, proxy_, stream: bool
) -> None:
    claude = await start_fake_(FakeConfig(seed=1, fast_models=("claude-sonnet-*",)))  # no fast Opus here
    proxy = await proxy_(fast_policy(claude, await start_fake_()))
    headers, answer = await ask_fast(proxy, stream)
    assert headers["x-router-speed"] == "standard; fallback=unavailable"
    assert (headers["x-router-tier"], headers["x-router-mistakes"]) == ("opus-fast", "")  # no mistake: a fallback
    refused, again = await fake_requests(claude.url, path="/v1/messages")
    assert refused["body"]["speed"] == "fast" and "speed" not in again["body"]
    assert again["headers"]["anthropic-beta"] == CLIENT_BETA  # the beta the router added goes with `speed`
    assert {k: v for k, v in again["body"].items() if k not in ("speed", "stream")} == {
        k: v for k, v in refused["body"].items() if k not in ("speed", "stream")
    }  # the same request otherwise
    if stream:
        assert '"speed_fallback":"unavailable"' in answer["trailer"]
    else:
        assert answer.content and answer.usage.speed is None  # the fake says nothing without the beta
    assert await metric(proxy, 'router_fast_mode_fallbacks_total{reason="unavailable",tier="opus-fast"} 1.0')
    stats = await tier_stats(proxy, "opus-fast")
    assert (stats["speeds"], stats["fast_mode_fallbacks"], stats["mistakes"]) == (
        {"standard": 1}, {"unavailable": 1}, {},
    )  # fmt: skip


async def test_the_fast_mode_rate_limit_falls_back_and_keeps_the_tier(start_fake_, proxy_) -> None:
    claude = await start_fake_(FakeConfig(seed=1, fast_rate_limit=1))
    proxy = await proxy_(fast_policy(claude, await start_fake_()))
    first, _ = await ask_fast(proxy, stream=False)
    assert first["x-router-speed"] == "fast"
    limited, message = await ask_fast(proxy, stream=False)  # over the limit: 429, then standard speed
    assert (limited["x-router-speed"], limited["x-router-tier"]) == ("standard; fallback=rate_limited", "opus-fast")
    assert message.content and message.usage.speed is None
    streamed, _ = await ask_fast(proxy, stream=True)
    assert streamed["x-router-speed"] == "standard; fallback=rate_limited"
    statuses = [r["body"].get("speed") for r in await fake_requests(claude.url, path="/v1/messages")]
    assert statuses == ["fast", "fast", None, "fast", None]
    assert proxy.runtime.breakers.snapshot().get("opus-fast", {}).get("failures", 0) == 0  # no failure of the tier
    assert await metric(proxy, 'router_fast_mode_fallbacks_total{reason="rate_limited",tier="opus-fast"} 2.0')
    stats = await tier_stats(proxy, "opus-fast")
    assert (stats["calls"], stats["speeds"], stats["fast_mode_fallbacks"]) == (
        3, {"fast": 1, "standard": 2}, {"rate_limited": 2},
    )  # fmt: skip
    for response_text in (str(first), str(limited), str(streamed)):
        assert KEY not in response_text


async def test_a_failure_that_is_not_fast_modes_is_not_a_fallback(start_fake_, proxy_) -> None:
    claude = await start_fake_(FakeConfig(seed=1, error_rate=1.0))  # every request: HTTP 500
    proxy = await proxy_(fast_policy(claude, await start_fake_()))
    async with claude_client(proxy) as sdk:
        with pytest.raises(anthropic.InternalServerError):
            await sdk.messages.create(model="claude-opus-4-6", max_tokens=32, messages=USER, speed="fast")
    sent = await fake_requests(claude.url, path="/v1/messages")
    assert sent and all(r["body"]["speed"] == "fast" for r in sent)  # retried as it was: no standard request
    assert not await metric(proxy, "router_fast_mode_fallbacks_total{")


@pytest.mark.parametrize("api", ["chat", "chat-stream", "responses"])
async def test_a_service_tier_lane_sends_it_and_reports_what_it_got(start_fake_, proxy_, api: str) -> None:
    claude, gpt = await start_fake_(), await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(fast_policy(claude, gpt))
    async with openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0) as sdk:
        if api == "chat":
            raw = await sdk.chat.completions.with_raw_response.create(model="gpt-5", messages=USER,
                                                                      service_tier="priority")  # fmt: skip
            assert raw.parse().service_tier == "priority"  # the answer as the tier sent it
        elif api == "chat-stream":
            async with sdk.chat.completions.with_streaming_response.create(
                model="gpt-5", messages=USER, service_tier="priority", stream=True
            ) as raw:
                text = (await raw.read()).decode()
            assert '"service_tier":"priority"' in text and '"speed":"priority"' in text  # chunks, trailer
        else:
            raw = await sdk.responses.with_raw_response.create(model="gpt-5", input="hi", service_tier="priority")
        plain = await sdk.chat.completions.with_raw_response.create(model="gpt-5", messages=USER)
    assert (raw.headers["x-router-lane"], raw.headers["x-router-tier"], raw.headers["x-router-speed"]) == (
        "priority", "gpt-priority", "priority",
    )  # fmt: skip
    sent, unasked = await fake_requests(gpt.url)
    assert sent["body"]["service_tier"] == "priority" and "service_tier" not in unasked["body"]
    assert "x-router-speed" not in plain.headers  # the answer says nothing of it: nothing is reported
    assert (await tier_stats(proxy, "gpt-priority"))["speeds"] == {"priority": 1}
    assert "speeds" not in await tier_stats(proxy, "gpt")


async def test_no_tier_but_an_anthropic_one_ever_gets_speed(start_fake_, proxy_) -> None:
    """Whatever asks for it — a lane passing the request's own fields on, a client's field no lane
    claims, a Messages client routed to an OpenAI tier — `speed` never reaches an openai/* tier."""
    claude, gpt = await start_fake_(), await start_fake_()
    forwarding = "lanes:\n  fast: {forward: true}\n"
    proxy = await proxy_(fast_policy(claude, gpt, lanes=forwarding))
    async with openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0) as sdk:
        raw = await sdk.chat.completions.with_raw_response.create(model="gpt-5", messages=USER,
                                                                  extra_body={"speed": "fast"})  # fmt: skip
        assert raw.headers["x-router-lane"] == "fast"
        await sdk.chat.completions.create(model="gpt-5", messages=USER, extra_body={"speed": "warp"})  # no lane's
        await sdk.responses.create(model="gpt-5", input="hi", extra_body={"speed": "fast"})
    async with claude_client(proxy) as sdk:
        await sdk.messages.create(model="gpt-5", max_tokens=32, messages=USER, speed="fast")
        forwarded = await sdk.messages.with_raw_response.create(model="claude-opus-4-6", max_tokens=32,
                                                                messages=USER, speed="fast")  # fmt: skip
    sent = await fake_requests(gpt.url)
    assert len(sent) == 4 and not [r for r in sent if "speed" in r["body"]]
    assert forwarded.headers["x-router-speed"] == "fast"  # forwarded to the anthropic tier, with its beta
    [to_claude] = await fake_requests(claude.url, path="/v1/messages")
    assert to_claude["body"]["speed"] == "fast" and to_claude["headers"]["anthropic-beta"] == FAST_MODE_BETA


async def test_chat_clients_of_a_fast_anthropic_tier_are_answered_at_standard_speed(start_fake_, proxy_) -> None:
    """They reach it through litellm, which is not sent `speed` (router/upstream/anthropic.py)."""
    if importlib.util.find_spec("litellm") is None:  # not imported here: the router imports it, locally configured
        pytest.skip("needs the litellm extra")
    claude = await start_fake_()
    proxy = await proxy_(fast_policy(claude, await start_fake_()))
    async with openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0) as sdk:
        raw = await sdk.chat.completions.with_raw_response.create(model="claude-opus-4-6", messages=USER,
                                                                  extra_body={"speed": "fast"})  # fmt: skip
        stream = await sdk.chat.completions.with_raw_response.create(
            model="claude-opus-4-6", messages=USER, stream=True, extra_body={"speed": "fast"}
        )
        assert [chunk async for chunk in stream.parse()]
    for answer in (raw, stream):
        assert (answer.headers["x-router-tier"], answer.headers["x-router-speed"]) == ("opus-fast", "standard")
    assert not [r for r in await fake_requests(claude.url, path="/v1/messages") if "speed" in r["body"]]

"""Fast-mode lanes (router/core/live/lanes.py): the pure choice, the policy view, and real calls through the
proxy with the openai and anthropic SDKs in front of fake upstreams."""

from __future__ import annotations

import asyncio
import textwrap
from typing import Any

import anthropic
import pydantic
import pytest

from router.core.call import chat_call
from router.core.live.lanes import STANDARD_LANE, asked, choose, lane_policy
from router.fake import FakeConfig
from router.policy.loader import parse_policy
from tests.api.helpers import USER, client, fake_requests, get, post
from tests.conftest import policy_text

LANES = """
    lanes:
      fast:
        tiers: {full: full-fast}
        params: {priority: -10}
      priority:
        service_tier: [priority, scale]
        forward: true
      flex:
        refuse: true
"""


def lane_policy_text(fast_url: str, full_url: str | None = None, lanes: str = LANES) -> str:
    """fast/full plus a `full-fast` variant of the full tier (on `full_url`'s server too)."""
    base = policy_text(fast_url, full_url, extra="escalation: {to: full}\n" + textwrap.dedent(lanes))
    variant = f"""  full-fast:
    model: openai/full-fast-model
    api_base: {full_url or fast_url}
    warm_connections: 0
"""
    return base.replace("store: memory://", "", 1).replace("models:\n", "models:\n" + variant, 1) + "store: memory://\n"


def call_of(body: dict[str, Any], **headers: str) -> Any:
    import orjson

    return chat_call(orjson.dumps({"model": "auto", "messages": USER, **body}), headers)


def test_choice_is_a_pure_function_of_policy_request_and_load() -> None:
    policy = parse_policy(lane_policy_text("http://127.0.0.1:9/v1"), "p.yaml")
    assert choose(policy, asked(call_of({})), {}) == STANDARD_LANE
    assert choose(policy, asked(call_of({"speed": "fast"})), {}).outcome == "served"
    assert choose(policy, asked(call_of({"service_tier": "scale"})), {}).name == "priority"
    assert choose(policy, asked(call_of({"service_tier": "auto"})), {}) == STANDARD_LANE  # asks for nothing
    unknown = choose(policy, asked(call_of({"service_tier": "turbo"})), {})
    assert (unknown.name, unknown.outcome, unknown.asked) == ("standard", "standard", "unknown")
    assert choose(policy, asked(call_of({"speed": "flex"})), {}).outcome == "refused"
    header = asked(call_of({}, **{"x-router-lane": "fast"}))
    assert choose(policy, header, {}).name == "fast"


def test_lane_view_swaps_every_reference_to_a_tier() -> None:
    policy = parse_policy(lane_policy_text("http://127.0.0.1:9/v1"), "p.yaml")
    view = lane_policy(policy, policy.lanes["fast"])
    assert [r.use for r in view.routes] == ["fast", "full-fast"]
    assert view.escalation.to == "full-fast"
    assert [r.use for r in policy.routes] == ["fast", "full"]  # the policy itself is untouched
    text = lane_policy_text("http://127.0.0.1:9/v1").replace("{to: full}", "{to: full, repeat: {tier: full}}")
    policy = parse_policy(text, "p.yaml")
    view = lane_policy(policy, policy.lanes["fast"])
    assert view.escalation.repeat is not None and view.escalation.repeat.tier == "full-fast"


@pytest.mark.parametrize(
    ("lanes", "needle"),
    [
        ("lanes: {fast: {tiers: {full: nowhere}}}", "unknown variant 'nowhere'"),
        ("lanes: {fast: {tiers: {nowhere: full}}}", "unknown tier 'nowhere'"),
        ("lanes: {standard: {}}", "'standard' is the lane"),
        ("lanes: {fast: {max_concurrent: 0}}", "max_concurrent"),
        ("lanes: {fast: {priority: 1}}", "priority"),  # unknown key: params go under `params`
    ],
)
def test_bad_lanes_are_policy_errors(lanes: str, needle: str) -> None:
    with pytest.raises((ValueError, pydantic.ValidationError)) as err:
        parse_policy(policy_text("http://127.0.0.1:9/v1", extra=lanes + "\n"), "p.yaml")
    assert needle in str(err.value)


async def test_fast_lane_goes_to_the_variant_with_its_params(start_fake_, proxy_) -> None:
    fast = await start_fake_(FakeConfig(seed=1))
    full = await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(lane_policy_text(fast.url, full.url))
    async with anthropic.AsyncAnthropic(base_url=proxy.base, api_key="x", max_retries=0) as claude:
        raw = await claude.messages.with_raw_response.create(
            model="auto", max_tokens=32, messages=USER, extra_body={"speed": "fast"},
            extra_headers={"anthropic-beta": "fast-mode-2026-02-01"},
        )  # fmt: skip
    assert (raw.headers["x-router-lane"], raw.headers["x-router-tier"]) == ("fast", "full-fast")
    [seen] = await fake_requests(full.url)
    assert seen["body"]["model"] == "full-fast-model" and seen["body"]["priority"] == -10
    assert "speed" not in seen["body"]  # not forwarded: this lane is served by the variant

    plain = await client(proxy.url).chat.completions.with_raw_response.create(model="auto", messages=USER)
    assert (plain.headers["x-router-lane"], plain.headers["x-router-tier"]) == ("standard", "full")
    assert "priority" not in (await fake_requests(full.url))[-1]["body"]
    metrics = (await get(proxy.base + "/metrics")).body.decode()
    assert 'router_lanes_total{lane="fast",outcome="served"} 1.0' in metrics


async def test_forwarded_and_unknown_service_tiers(fake, proxy_) -> None:
    proxy = await proxy_(lane_policy_text(fake.url))
    sdk = client(proxy.url)
    raw = await sdk.chat.completions.with_raw_response.create(model="auto", messages=USER, service_tier="scale")
    assert raw.headers["x-router-lane"] == "priority"
    assert (await fake_requests(fake.url))[-1]["body"]["service_tier"] == "scale"  # forward: true
    raw = await sdk.chat.completions.with_raw_response.create(model="auto", messages=USER, service_tier="flexible")
    assert raw.headers["x-router-lane"] == "standard"  # no such lane: the call goes on untouched
    assert (await fake_requests(fake.url))[-1]["body"]["service_tier"] == "flexible"
    await sdk.chat.completions.create(model="auto", messages=USER, service_tier="other")  # type: ignore[arg-type]
    await proxy.runtime.store.flush()
    lanes = (await proxy.runtime.store.stats())["lanes"]
    assert (lanes["priority"]["served"], lanes["unknown"]["standard"]) == (1, 2)  # client values are not keys


async def test_refused_lanes_and_unknown_header_lanes_are_errors(fake, proxy_) -> None:
    proxy = await proxy_(lane_policy_text(fake.url))
    refused = await post(proxy.url + "/chat/completions", {"model": "auto", "messages": USER, "speed": "flex"})
    assert refused.status == 403 and refused.json()["error"]["code"] == "lane_refused"
    anthropic_refused = await post(
        proxy.base + "/v1/messages", {"model": "auto", "max_tokens": 8, "messages": USER, "service_tier": "flex"}
    )
    assert anthropic_refused.status == 403
    assert anthropic_refused.json()["error"]["type"] == "permission_error"
    unknown = await post(
        proxy.url + "/chat/completions", {"model": "auto", "messages": USER}, headers={"x-router-lane": "warp"}
    )
    assert unknown.status == 400 and "warp" in unknown.json()["error"]["message"]
    assert await fake_requests(fake.url) == []
    await proxy.runtime.store.flush()
    assert (await proxy.runtime.store.stats())["lanes"] == {
        "flex": {"served": 0, "standard": 0, "capped": 0, "refused": 2, "busy": 0}
    }
    metrics = (await get(proxy.base + "/metrics")).body.decode()
    assert 'router_lanes_total{lane="flex",outcome="refused"} 2.0' in metrics


@pytest.mark.parametrize("over_limit", ["standard", "refuse"])
async def test_capped_lane(start_fake_, proxy_, over_limit: str) -> None:
    slow = await start_fake_(FakeConfig(seed=3, delay_ms=400))
    lanes = f"lanes: {{fast: {{tiers: {{full: full-fast}}, max_concurrent: 1, over_limit: {over_limit}}}}}\n"
    proxy = await proxy_(lane_policy_text(slow.url, lanes=lanes))
    body = {"model": "auto", "messages": USER, "speed": "fast"}
    first = asyncio.create_task(post(proxy.url + "/chat/completions", body))
    for _ in range(200):  # until the first call holds the lane's only place
        if proxy.runtime.lanes.inflight.get("fast"):
            break
        await asyncio.sleep(0.01)
    second = await post(proxy.url + "/chat/completions", body)
    held = await first
    assert (held.status, held.headers["x-router-lane"], held.headers["x-router-tier"]) == (200, "fast", "full-fast")
    if over_limit == "standard":
        assert (second.status, second.headers["x-router-lane"], second.headers["x-router-tier"]) == (
            200, "standard", "full",
        )  # fmt: skip
        assert "speed" not in (await fake_requests(slow.url))[-1]["body"]
    else:
        assert second.status == 429 and second.json()["error"]["code"] == "lane_busy"
        assert second.headers["retry-after"] == "1"
    assert proxy.runtime.lanes.inflight["fast"] == 0  # every place was given back
    await proxy.runtime.store.flush()
    outcome = "capped" if over_limit == "standard" else "busy"
    assert (await proxy.runtime.store.stats())["lanes"]["fast"] == {
        "served": 1, "standard": 0, "capped": int(outcome == "capped"), "refused": 0, "busy": int(outcome == "busy")
    }  # fmt: skip

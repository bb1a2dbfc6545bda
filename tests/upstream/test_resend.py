"""A refused request sent once more as the tier can change it (router/upstream/resend.py), here
OpenAI's service tiers as a speed lane: a lane's `openai/*` tier variant asks for its `service_tier`;
refused ("Unsupported service_tier", or over its rate limit), the request is sent once more at the
default tier within the call — chat and Responses, JSON and SSE — told in `x-router-speed`, counted
in the stats and metrics, and priced at the standard price. Real servers: the proxy, a fake upstream
refusing as OpenAI does, the openai SDK."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from router.fake import FakeConfig, FakeServer
from tests.api.helpers import USER, fake_requests, get
from tests.conftest import Proxy

PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses"}


def policy(gpt: FakeServer) -> str:
    """`gpt`, and `gpt-ultra` asking for OpenAI's fastest service tier at 6 times the price; the
    `ultrafast` lane (a request's `service_tier: ultrafast`) is served by the variant."""
    return f"""
version: 1
models:
  gpt: &gpt
    model: openai/gpt-5
    api_base: {gpt.url}
    apis: [responses]
    warm_connections: 0
    price: {{input: 1.25, output: 10}}
    timeouts: {{connect: 2, first_token: 5, total: 20}}
  gpt-ultra:
    <<: *gpt
    service_tier: ultrafast
    price: {{input: 1.25, output: 10, multiplier: 6}}
routes:
  - name: default
    use: gpt
baseline: gpt
lanes:
  ultrafast:
    tiers: {{gpt: gpt-ultra}}
store: memory://
"""


async def ask(proxy: Proxy, api: str, stream: bool) -> dict[str, str]:
    """One call asking for the ultrafast lane: its response headers (the stream read to its end)."""
    async with openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0) as sdk:
        if api == "chat":
            made: Any = sdk.chat.completions.with_streaming_response.create(
                model="gpt-5",
                messages=USER,
                service_tier="ultrafast",
                stream=stream,  # type: ignore[arg-type]
            )
        else:
            made = sdk.responses.with_streaming_response.create(
                model="gpt-5",
                input="hi",
                service_tier="ultrafast",
                stream=stream,  # type: ignore[arg-type]
            )
        async with made as raw:
            body = await raw.read()
            assert raw.status_code == 200 and body
            return dict(raw.headers)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_a_refused_service_tier_is_answered_at_the_default_tier_within_the_call(
    start_fake_, proxy_, api: str, stream: bool
) -> None:
    gpt = await start_fake_(FakeConfig(seed=1, fast_models=("gpt-4*",)))  # no fast tier for gpt-5 here
    proxy = await proxy_(policy(gpt))
    headers = await ask(proxy, api, stream)
    assert (headers["x-router-lane"], headers["x-router-tier"]) == ("ultrafast", "gpt-ultra")
    assert headers["x-router-speed"] == "default; fallback=unavailable" and headers["x-router-mistakes"] == ""
    refused, again = await fake_requests(gpt.url, path=PATHS[api])
    assert refused["body"]["service_tier"] == "ultrafast" and "service_tier" not in again["body"]
    assert {k: v for k, v in again["body"].items() if k != "service_tier"} == {
        k: v for k, v in refused["body"].items() if k != "service_tier"
    }  # the same request otherwise
    metrics = (await get(proxy.base + "/metrics")).body.decode()
    assert 'router_fast_mode_fallbacks_total{reason="unavailable",tier="gpt-ultra"} 1.0' in metrics
    await proxy.runtime.store.flush()
    stats = (await get(proxy.base + "/v1/router/stats")).json()["tiers"]["gpt-ultra"]
    assert (stats["fast_mode_fallbacks"], stats["speeds"], stats["mistakes"]) == (
        {"unavailable": 1},
        {"default": 1},
        {},
    )
    if not stream:  # the cost of the answer: at gpt-5's standard price, not the ultrafast one
        cost, baseline = float(headers["x-router-cost-usd"]), float(headers["x-router-baseline-cost-usd"])
        assert cost == pytest.approx(baseline)  # the same tokens at gpt's price (gpt is the baseline)


async def test_a_service_tier_over_its_rate_limit_falls_back_and_the_next_minute_is_fast_again(
    start_fake_, proxy_
) -> None:
    gpt = await start_fake_(FakeConfig(seed=2, fast_rate_limit=1))
    proxy = await proxy_(policy(gpt))
    first = await ask(proxy, "chat", stream=False)
    assert first["x-router-speed"] == "ultrafast"
    for stream in (False, True):
        limited = await ask(proxy, "chat", stream)
        assert (limited["x-router-speed"], limited["x-router-tier"]) == ("default; fallback=rate_limited", "gpt-ultra")
    asked = [r["body"].get("service_tier") for r in await fake_requests(gpt.url)]
    assert asked == ["ultrafast", "ultrafast", None, "ultrafast", None]
    assert proxy.runtime.breakers.snapshot().get("gpt-ultra", {}).get("failures", 0) == 0  # the tier did not fail


async def test_a_failure_that_is_not_the_service_tiers_is_not_a_fallback(start_fake_, proxy_) -> None:
    gpt = await start_fake_(FakeConfig(seed=3, error_rate=1.0))  # every request: HTTP 500
    proxy = await proxy_(policy(gpt))
    async with openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0) as sdk:
        with pytest.raises(openai.APIStatusError):
            await sdk.chat.completions.create(model="gpt-5", messages=USER, service_tier="ultrafast")  # type: ignore[arg-type]
    sent = await fake_requests(gpt.url)
    assert sent and all(r["body"]["service_tier"] == "ultrafast" for r in sent)  # never sent without it

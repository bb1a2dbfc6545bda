"""What a call cost and what the baseline tier would have cost, end to end: `x-router-cost-usd` and
`x-router-baseline-cost-usd` on an answer, the same in a stream's `: router {json}` trailer, from the
tiers' own token counts at the policy's prices; Prometheus counts them. Real proxy, fake upstreams
(which count tokens as OpenAI does: `usage`)."""

from __future__ import annotations

import pytest

from router.fake import FakeConfig
from tests.api.helpers import TOOLS, USER, get, post, trailer
from tests.conftest import policy_text

PRICED = """
escalation: {to: full}
"""
FAST_IN, FAST_OUT, FULL_IN, FULL_OUT = 1.0, 2.0, 10.0, 40.0  # USD per million tokens


def priced(fast_url: str, full_url: str) -> str:
    text = policy_text(fast_url, full_url, extra=PRICED)
    for tier, rate_in, rate_out in (("fast", FAST_IN, FAST_OUT), ("full", FULL_IN, FULL_OUT)):
        line = next(line for line in text.splitlines() if line.strip() == f"model: openai/{tier}-model")
        indent = line[: len(line) - len(line.lstrip())]
        text = text.replace(line, f"{line}\n{indent}price: {{input: {rate_in}, output: {rate_out}}}")
    return text


def usd(prompt: int, output: int, rate_in: float, rate_out: float) -> float:
    return (prompt * rate_in + output * rate_out) / 1e6


async def test_an_answer_says_what_it_cost_and_what_the_baseline_would_have(start_fake_, proxy_) -> None:
    fast = await start_fake_(FakeConfig(seed=1))
    full = await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(priced(fast.url, full.url))
    body = {"model": "auto", "messages": USER, "tools": TOOLS}
    r = await post(proxy.url + "/chat/completions", body, headers={"x-session-id": "worth-1"})
    assert r.status == 200 and r.headers["x-router-tier"] == "fast"
    usage = r.json()["usage"]
    prompt, output = usage["prompt_tokens"], usage["completion_tokens"]
    assert prompt > 0 and output > 0
    assert r.headers["x-router-cost-usd"] == f"{usd(prompt, output, FAST_IN, FAST_OUT):.6f}"
    assert r.headers["x-router-baseline-cost-usd"] == f"{usd(prompt, output, FULL_IN, FULL_OUT):.6f}"


async def test_an_escalated_call_pays_for_each_tier_it_tried(start_fake_, proxy_) -> None:
    fast = await start_fake_(FakeConfig(seed=1, bad_tool_rate=1.0))  # every call broken: escalated
    full = await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(priced(fast.url, full.url))
    body = {"model": "auto", "messages": USER, "tools": TOOLS, "tool_choice": "required"}
    r = await post(proxy.url + "/chat/completions", body)
    assert r.status == 200 and r.headers["x-router-escalated"] == "true" and r.headers["x-router-tier"] == "full"
    cost, baseline = float(r.headers["x-router-cost-usd"]), float(r.headers["x-router-baseline-cost-usd"])
    assert cost > baseline > 0  # full's answer is the baseline's own; fast's failed attempt is paid on top


async def test_a_stream_says_it_in_its_trailer(start_fake_, proxy_) -> None:
    fast = await start_fake_(FakeConfig(seed=1))
    full = await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(priced(fast.url, full.url))
    body = {"model": "auto", "messages": USER, "tools": TOOLS, "stream": True}
    r = await post(proxy.url + "/chat/completions", body)
    assert r.status == 200 and b'"usage":' not in r.body.split(b": router ")[0]  # counts the client did not ask for
    summary = trailer(r.body)
    assert float(summary["cost_usd"]) > 0 and float(summary["baseline_cost_usd"]) > float(summary["cost_usd"])
    assert "worth_unknown" not in summary or "speed" in summary["worth_unknown"]  # a time needs observed speeds


async def test_prometheus_counts_what_the_calls_cost(start_fake_, proxy_) -> None:
    fast = await start_fake_(FakeConfig(seed=1))
    full = await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(priced(fast.url, full.url))
    r = await post(proxy.url + "/chat/completions", {"model": "auto", "messages": USER, "tools": TOOLS})
    assert r.status == 200 and "x-router-cost-usd" in r.headers
    metrics = (await get(proxy.base + "/metrics")).body.decode()
    line = next(
        m for m in metrics.splitlines() if m.startswith('router_cost_usd_total{route="simple-tool-call",tier="fast"}')
    )
    assert float(line.split()[-1]) == pytest.approx(float(r.headers["x-router-cost-usd"]), abs=1e-6)

"""Shadow mode (router/core/live/shadow.py) through a real proxy: the fake upstream is the fast tier, a scripted
server (tests/reference.py) the reference tier and the judge. Nothing of the router is mocked."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import orjson
import pytest

from router.core.checks.compare import Comparison, read_comparison, same_answer
from router.core.live.shadow import scrub
from router.fake import FakeServer
from router.policy.loader import PolicyError, parse_policy
from router.policy.route import Shadow
from tests.conftest import Proxy, policy_text
from tests.reference import Reference, reference_tier

CLIENT_KEY = "client-secret-key-123"
TIER_KEY = "tier-secret-value-9876"
TOOLS = [
    {"type": "function", "function": {"name": "good", "description": "the good tool", "parameters": {}}},
    {"type": "function", "function": {"name": "bad", "description": "the bad tool", "parameters": {}}},
]


@pytest.fixture
async def ref() -> AsyncIterator[Reference]:
    async with reference_tier() as r:
        yield r


def policy(fast: str, full: str, shadow: str | None = "{rate: 1.0, tier: full}", store: str = "memory://") -> str:
    option = f"    shadow: {shadow}\n" if shadow else ""
    routes = f"""
routes:
  - name: tools
    when: {{tools: {{present: true}}}}
    use: fast
{option}  - name: default
    use: full
{option}"""
    extra = f"escalation: {{to: full}}\nclient_keys: [{CLIENT_KEY}]\n"
    text = policy_text(fast, full, extra=extra, routes=routes).replace("store: memory://", f"store: {store}")
    return text.replace("    model: openai/full-model\n", f"    model: openai/full-model\n    api_key: {TIER_KEY}\n")


async def call(proxy: Proxy, tool: str | None = "good", content: str = "do it", **extra: Any) -> aiohttp.ClientResponse:
    body: dict[str, Any] = {"model": "auto", "messages": [{"role": "user", "content": content}], **extra}
    if tool:
        body |= {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": tool}}}
    headers = {"authorization": f"Bearer {CLIENT_KEY}"}
    async with aiohttp.ClientSession() as s, s.post(proxy.url + "/chat/completions", json=body, headers=headers) as r:
        await r.read()
        assert r.status == 200, await r.text()
        return r


async def settled(proxy: Proxy) -> dict[str, Any]:
    """Stats once every shadow comparison is done and counted."""
    await proxy.runtime.shadow.drain()
    await proxy.runtime.store.flush()
    headers = {"authorization": f"Bearer {CLIENT_KEY}"}
    async with aiohttp.ClientSession() as s, s.get(proxy.base + "/v1/router/stats", headers=headers) as r:
        return dict(await r.json())


def metric(proxy: Proxy, name: str, **labels: str) -> float:
    return proxy.runtime.metrics.registry.get_sample_value(name, labels) or 0.0


Start = Callable[..., Awaitable[Any]]


async def test_answers_are_compared_in_the_background_and_agreement_counted(
    ref: Reference, fake: FakeServer, proxy_: Start
) -> None:
    proxy: Proxy = await proxy_(policy(fake.url, ref.url))
    for tool in ("good", "good", "good", "bad"):
        r = await call(proxy, tool)
        assert (r.headers["x-router-tier"], r.headers["x-router-escalated"]) == ("fast", "false")
    stats = await settled(proxy)
    assert stats["shadow"] == {
        "tools": {"samples": 4, "agreed": 3, "disagreed": 1, "unsure": 0, "errors": 0, "agreement": 0.75}
    }
    assert stats["routes"]["tools"]["calls"] == 4 and stats["routes"]["tools"]["mistakes"] == {}
    assert "full" not in stats["tiers"]  # the reference's answers are not calls the router served
    assert metric(proxy, "router_shadow_total", route="tools", outcome="agree") == 3
    assert metric(proxy, "router_shadow_total", route="tools", outcome="disagree") == 1
    # the reference got the client's own request, not streamed
    assert len(ref.answers) == 4 and all(b["messages"][0]["content"] == "do it" for b in ref.answers)
    assert all("stream" not in b for b in ref.answers)
    prompt = ref.questions[-1]["messages"][-1]["content"]
    assert "- good: the good tool" in prompt and "Last user request: do it" in prompt
    assert (
        "Answer A (fast model):\ncall bad({})" in prompt
        and 'Answer B (reference model):\ncall good({"ref": true})' in prompt
    )
    samples = await proxy.runtime.store.samples_get("tools", 10)
    assert len(samples) == 4 and {s.tier for s in samples} == {"fast"}
    assert {s.reference_tier for s in samples} == {"full"}
    failed = samples[0]  # newest first: the `bad` call
    assert failed.verdict is not None and failed.answer["tool_calls"][0]["function"]["name"] == "bad"
    assert Comparison.from_json(failed.verdict) == Comparison(
        False, 20, "wrong tool", "A calls another tool than B", judge="full"
    )
    assert failed.reference is not None and failed.reference["tool_calls"][0]["function"]["name"] == "good"


async def test_off_by_default(ref: Reference, fake: FakeServer, proxy_: Start) -> None:
    proxy: Proxy = await proxy_(policy(fake.url, ref.url, shadow=None))
    await call(proxy, "good")
    await call(proxy, "bad", stream=True)
    stats = await settled(proxy)
    assert stats["shadow"] == {} and ref.answers == [] and ref.questions == []
    assert await proxy.runtime.store.samples_get("tools", 10) == []


async def test_streams_are_shadowed_and_the_reference_tier_itself_is_not(
    ref: Reference, fake: FakeServer, proxy_: Start
) -> None:
    proxy: Proxy = await proxy_(policy(fake.url, ref.url))
    r = await call(proxy, "bad", stream=True)
    assert r.headers["x-router-tier"] == "fast"
    no_tools = await call(proxy, None)  # route `default` is answered by full, the reference: nothing to compare
    assert no_tools.headers["x-router-tier"] == "full"
    stats = await settled(proxy)
    assert stats["shadow"] == {
        "tools": {"samples": 1, "agreed": 0, "disagreed": 1, "unsure": 0, "errors": 0, "agreement": 0.0}
    }
    (sample,) = await proxy.runtime.store.samples_get("tools", 10)
    assert sample.request["stream"] is True and sample.answer["tool_calls"][0]["function"]["name"] == "bad"
    assert await proxy.runtime.store.samples_get("default", 10) == []


async def test_the_client_never_waits_and_work_in_flight_is_bounded(
    ref: Reference, fake: FakeServer, proxy_: Start
) -> None:
    proxy: Proxy = await proxy_(policy(fake.url, ref.url), shadow_max_inflight=2)
    ref.gate = asyncio.Event()  # the reference tier answers nothing until the test lets it
    replies = await asyncio.wait_for(asyncio.gather(*(call(proxy, "good") for _ in range(6))), 30)
    assert [r.headers["x-router-tier"] for r in replies] == ["fast"] * 6  # every call answered meanwhile
    assert proxy.runtime.shadow.inflight == 2
    assert metric(proxy, "router_shadow_inflight") == 2
    assert metric(proxy, "router_shadow_dropped_total", route="tools", reason="busy") == 4
    ref.gate.set()
    stats = await settled(proxy)
    assert stats["shadow"]["tools"]["samples"] == 2 and len(await proxy.runtime.store.samples_get("tools", 10)) == 2
    assert metric(proxy, "router_shadow_inflight") == 0


async def test_failures_and_unreadable_verdicts_are_counted_apart(
    ref: Reference, fake: FakeServer, proxy_: Start
) -> None:
    proxy: Proxy = await proxy_(policy(fake.url, ref.url))
    ref.fail = True
    assert (await call(proxy, "good")).headers["x-router-tier"] == "fast"
    await proxy.runtime.shadow.drain()
    ref.fail, ref.judge = False, "garbage"
    await call(proxy, "good")
    stats = await settled(proxy)
    assert stats["shadow"]["tools"] == {
        "samples": 1,
        "agreed": 0,
        "disagreed": 0,
        "unsure": 1,
        "errors": 1,
        "agreement": None,
    }
    unsure, failed = await proxy.runtime.store.samples_get("tools", 10)
    assert failed.reference is None and failed.verdict is None  # kept: `agent-router qa` can retry it
    assert unsure.verdict is not None and unsure.verdict["unsure"] is True and unsure.verdict["pass"] is False
    assert metric(proxy, "router_shadow_total", route="tools", outcome="error") == 1


async def test_record_mode_only_keeps_the_sample(ref: Reference, fake: FakeServer, proxy_: Start) -> None:
    proxy: Proxy = await proxy_(policy(fake.url, ref.url, shadow="{rate: 1.0, mode: record}"))
    await call(proxy, "bad")
    stats = await settled(proxy)
    assert ref.answers == [] and ref.questions == [] and stats["shadow"] == {}
    (sample,) = await proxy.runtime.store.samples_get("tools", 10)
    assert sample.reference is None and sample.verdict is None and sample.reference_tier == ""
    assert metric(proxy, "router_shadow_total", route="tools", outcome="recorded") == 1


async def test_stored_samples_are_redacted(ref: Reference, fake: FakeServer, proxy_: Start) -> None:
    proxy: Proxy = await proxy_(policy(fake.url, ref.url))
    secret_text = (
        f"keys: {CLIENT_KEY} and {TIER_KEY}; header Authorization: Bearer abcdef123456; "
        "gh ghp_0123456789abcdefghijABCDEFGHIJ; password=hunter22; api_key: s3cr3t-v4lue"
    )
    await call(proxy, "good", content=secret_text, max_tokens=128)
    await settled(proxy)
    (sample,) = await proxy.runtime.store.samples_get("tools", 10)
    stored = orjson.dumps([sample.request, sample.answer, sample.reference, sample.verdict]).decode()
    for secret in (CLIENT_KEY, TIER_KEY, "abcdef123456", "ghp_0123456789", "hunter22", "s3cr3t-v4lue"):
        assert secret not in stored
    assert "[redacted]" in sample.request["messages"][0]["content"]
    assert sample.request["max_tokens"] == 128 and sample.request["tools"] == TOOLS  # the rest stays usable
    # the reference and the judge got the real request: redaction is for what is kept
    assert CLIENT_KEY in ref.answers[0]["messages"][0]["content"]


async def test_too_large_requests_are_not_shadowed(ref: Reference, fake: FakeServer, proxy_: Start) -> None:
    proxy: Proxy = await proxy_(policy(fake.url, ref.url), shadow_max_sample_bytes=2048)
    await call(proxy, "good", content="x" * 4096)
    await call(proxy, "good")
    await settled(proxy)
    assert metric(proxy, "router_shadow_dropped_total", route="tools", reason="too_large") == 1
    assert len(ref.answers) == 1 and len(await proxy.runtime.store.samples_get("tools", 10)) == 1


def test_shadow_option_defaults_and_tier_references() -> None:
    assert Shadow() == Shadow(rate=0.05, tier=None, judge=None, mode="judge", max_tokens=256)
    text = policy("http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1", shadow="{rate: 0.5, tier: huge, judge: wise}")
    with pytest.raises(PolicyError) as info:
        parse_policy(text, "p.yaml", {})
    errors = "\n".join(info.value.errors)
    for where in ("routes.0.shadow.tier", "routes.0.shadow.judge", "routes.1.shadow.tier"):
        assert where in errors
    assert "unknown tier 'huge'" in errors and "unknown tier 'wise'" in errors
    with pytest.raises(PolicyError, match="rate"):
        parse_policy(policy("http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1", shadow="{rate: 1.5}"), "p.yaml", {})


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"score": 85, "pass": true, "reason": "ok", "difference": ""}', (True, 85, False)),
        ('Sure! {"score": "40", "pass": "false", "reason": "worse"} hope this helps', (False, 40, False)),
        ('{"score": 75}', (True, 75, False)),  # no `pass`: read from the score
        ('{"score": 69.6}', (True, 70, False)),
        ('{"score": 12}', (False, 12, False)),
        ('{"pass": true}', (True, None, False)),
        ('{"score": 250, "pass": true}', (True, 100, False)),
        ('{"reason": "no verdict"}', (False, None, True)),
        ('{"score": "high"}', (False, None, True)),
        ("It looks fine.", (False, None, True)),
        ("", (False, None, True)),
    ],
)
def test_read_comparison(content: str, expected: tuple[bool, int | None, bool]) -> None:
    c = read_comparison(content)
    assert (c.passed, c.score, c.unsure) == expected


def test_same_answer() -> None:
    def calls(*pairs: tuple[str, str]) -> dict[str, Any]:
        return {"tool_calls": [{"function": {"name": n, "arguments": a}} for n, a in pairs]}

    assert same_answer(calls(("f", '{"a": 1, "b": " X "}')), calls(("f", '{"b": "x", "a": 1.0}')))
    assert not same_answer(calls(("f", '{"a": 1}')), calls(("f", '{"a": 2}')))
    assert not same_answer(calls(("f", "{}")), calls(("f", "{}"), ("g", "{}")))
    assert not same_answer(calls(("f", "{}")), {"content": "f"})
    assert same_answer({"content": "Paris  is sunny"}, {"content": "paris is sunny"})
    assert not same_answer({"content": ""}, {"content": None})  # nothing said is not agreement


def test_scrub() -> None:
    value = {
        "max_tokens": 128,
        "token_budget": 4096,
        "messages": [
            {"role": "user", "content": "use sk-abcdef0123456789 and AKIAABCDEFGHIJKLMNOP please"},
            {"role": "tool", "content": '{"access_token": "ya29.a0AfH6SMB", "expires": 3600}'},
            {"role": "user", "content": "jwt eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.SflKxwRJSMeKKF2QT4fw"},
        ],
        "metadata": {"password": "pw-hunter2", "note": "my-policy-secret", "X-Api-Key": "plain", "token": 7},
        "shell": 'curl "https://x.test/a?token=abc123xyz" -H "Authorization: Bearer abcdefgh12"',
    }
    out = scrub(value, ("my-policy-secret",))
    text = orjson.dumps(out).decode()
    secrets = ("abcdef0123456789", "AKIAABCDEFGHIJKLMNOP", "ya29", "eyJzdWIiOiIxMjM0", "pw-hunter2", "my-policy")
    for secret in (*secrets, "plain", "abc123xyz", "abcdefgh12"):
        assert secret not in text
    assert out["max_tokens"] == 128 and out["token_budget"] == 4096 and out["messages"][1]["role"] == "tool"
    assert '"expires": 3600' in out["messages"][1]["content"]
    assert out["metadata"]["X-Api-Key"] == "[redacted]" and out["metadata"]["token"] == 7
    assert out["shell"] == 'curl "https://x.test/a?token=[redacted]" -H "Authorization: Bearer [redacted]"'
    assert scrub(None) is None

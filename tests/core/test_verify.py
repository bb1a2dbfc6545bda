"""Verifiers (router/core/checks/verify.py) through a real proxy: judge, agree, logprobs.

The fake upstream cannot judge, so the judge tier (and, for logprobs, the fast tier) is a small
scripted aiohttp server written here: its answers are a pure function of the request.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from router.core.checks.compare import call_key, normalised, parameter_lines
from router.core.checks.verify import Verdict, VerdictCache, judge_messages, logprob_measure, read_judgement
from router.fake import FakeServer
from router.policy.loader import PolicyError, parse_policy
from tests.conftest import Proxy, policy_text, serve_app, upstream_app

NAMED = {"type": "function", "function": {"name": "good"}}


def tool(name: str, props: dict[str, Any] | None = None) -> dict[str, Any]:
    params = {"type": "object", "properties": props or {}}
    return {"type": "function", "function": {"name": name, "description": f"the {name} tool", "parameters": params}}


TOOLS = [tool("good"), tool("bad"), tool("noisy", {"q": {"type": "string"}})]


class Scripted:
    """/v1/chat/completions: a judge (response_format set) accepts calls of `good` only; otherwise
    a tool call of the tool named in tool_choice, with logprobs given by `lp:<x>` in the user text."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        if "response_format" in body:
            accept = "Proposed call: good(" in body["messages"][-1]["content"]
            content = orjson.dumps({"accept": accept, "reason": "ok" if accept else "wrong tool"}).decode()
            message: dict[str, Any] = {"role": "assistant", "content": content}
            return web.json_response({"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})
        name = ((body.get("tool_choice") or {}).get("function") or {}).get("name", "good")
        call = {"id": "c1", "type": "function", "function": {"name": name, "arguments": "{}"}}
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "tool_calls": [call]}}
        choice["finish_reason"] = "tool_calls"
        found = re.search(r"lp:(-?[\d.]+)", str(body["messages"][-1]["content"]))
        if body.get("logprobs") and found:
            choice["logprobs"] = {"content": [{"token": "x", "logprob": float(found.group(1))}]}
        return web.json_response({"choices": [choice]})


@pytest.fixture
async def scripted() -> AsyncIterator[Scripted]:
    s = Scripted()
    async with serve_app(upstream_app({"/v1/chat/completions": s.handle})) as url:
        s.url = url
        yield s


def policy(fast: str, full: str, verify: str, judge: str | None = None) -> str:
    extra = "escalation: {to: full}\n"
    routes = f"""
        routes:
          - name: tools
            when: {{tools: {{present: true}}}}
            use: fast
            verify: {verify}
          - name: default
            use: full
    """
    text = policy_text(fast, full, extra=extra, routes=routes)
    if judge:
        text = text.replace(
            "models:\n",
            f"models:\n  judge:\n    model: openai/judge\n    api_base: {judge}\n    warm_connections: 0\n",
        )
    return text


async def ask(proxy: Proxy, content: str = "do it", choice: Any = NAMED, tools: Any = TOOLS) -> aiohttp.ClientResponse:
    body = {"model": "auto", "messages": [{"role": "user", "content": content}], "tools": tools, "tool_choice": choice}
    async with aiohttp.ClientSession() as s, s.post(proxy.url + "/chat/completions", json=body) as resp:
        await resp.read()
        return resp


def metric(proxy: Proxy, name: str, **labels: str) -> float:
    value = proxy.runtime.metrics.registry.get_sample_value(name, labels)
    return value or 0.0


async def test_judge_accepts_rejects_escalates_and_caches(
    scripted: Scripted, start_fake_: Callable[..., Awaitable[FakeServer]], proxy_: Callable[..., Awaitable[Proxy]]
) -> None:
    fake = await start_fake_()
    proxy = await proxy_(policy(fake.url, fake.url, "{kind: judge, tier: judge}", judge=scripted.url))
    ok = await ask(proxy, choice=NAMED)
    assert ok.headers["x-router-tier"] == "fast" and ok.headers["x-router-escalated"] == "false"
    assert ok.headers["x-router-verified"] == "judge:accept"
    bad = await ask(proxy, choice={"type": "function", "function": {"name": "bad"}})
    assert bad.headers["x-router-tier"] == "full" and bad.headers["x-router-escalated"] == "true"
    assert bad.headers["x-router-mistakes"] == "verifier_reject"
    assert bad.headers["x-router-verified"] == "judge:reject"
    judged = [r for r in scripted.requests if "response_format" in r]
    assert len(judged) == 2
    assert judged[1]["response_format"] == {"type": "json_object"} and judged[1]["temperature"] == 0
    prompt = judged[1]["messages"][-1]["content"]
    assert "- good: the good tool" in prompt and "User request: do it" in prompt and "Proposed call: bad({" in prompt
    # the same call in the same context: the cached verdict, no second question
    again = await ask(proxy, choice={"type": "function", "function": {"name": "bad"}})
    assert again.headers["x-router-escalated"] == "true"
    assert len([r for r in scripted.requests if "response_format" in r]) == 2
    assert (
        metric(
            proxy, "router_verifier_verdicts_total", verifier="judge", route="tools", outcome="reject", cached="true"
        )
        == 1
    )
    assert metric(proxy, "router_verifier_seconds_count", verifier="judge", route="tools") == 3
    assert metric(proxy, "router_mistakes_total", tier="fast", route="tools", kind="verifier_reject") == 2
    stats = await proxy.runtime.store.stats()
    assert stats["tiers"]["fast"]["mistakes"].get("verifier_reject") == 2


async def test_judge_failures_follow_if_unsure(
    start_fake_: Callable[..., Awaitable[FakeServer]], proxy_: Callable[..., Awaitable[Proxy]]
) -> None:
    fake = await start_fake_()
    dead = "http://127.0.0.1:9/v1"
    for if_unsure, tier in (("accept", "fast"), ("reject", "full")):
        proxy = await proxy_(policy(fake.url, fake.url, f"{{kind: judge, tier: judge, if_unsure: {if_unsure}}}", dead))
        resp = await ask(proxy)
        assert resp.status == 200 and resp.headers["x-router-tier"] == tier
        assert resp.headers["x-router-verified"] == "judge:unsure"


async def test_text_answers_and_the_last_tier_are_not_verified(
    scripted: Scripted, start_fake_: Callable[..., Awaitable[FakeServer]], proxy_: Callable[..., Awaitable[Proxy]]
) -> None:
    fake = await start_fake_()
    proxy = await proxy_(policy(fake.url, fake.url, "{kind: judge, tier: judge}", judge=scripted.url))
    body = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as s, s.post(proxy.url + "/chat/completions", json=body) as resp:
        assert resp.headers["x-router-tier"] == "full" and "x-router-verified" not in resp.headers
    resp2 = await ask(proxy, choice="none")  # tools offered, but a text answer
    assert "x-router-verified" not in resp2.headers
    assert not [r for r in scripted.requests if "response_format" in r]


async def test_agree(
    start_fake_: Callable[..., Awaitable[FakeServer]], proxy_: Callable[..., Awaitable[Proxy]]
) -> None:
    fast = await start_fake_()
    full = await start_fake_()
    proxy = await proxy_(policy(fast.url, full.url, "{kind: agree, samples: 3, temperature: 0.5}"))
    same = await ask(proxy, choice=NAMED)  # `good` has no parameters: every sample calls good({})
    assert same.headers["x-router-tier"] == "fast" and same.headers["x-router-verified"] == "agree:accept"
    async with aiohttp.ClientSession() as s, s.get(fast.url.removesuffix("/v1") + "/_fake/requests") as r:
        sent = [x["body"] for x in await r.json() if x["method"] == "POST"]
    assert len(sent) == 3 and sorted(b.get("seed", 0) for b in sent) == [0, 1, 2]
    assert all(b["temperature"] == 0.5 for b in sent if "seed" in b)
    # `noisy` takes a string the fake makes up anew each time: the samples disagree
    differ = await ask(proxy, choice={"type": "function", "function": {"name": "noisy"}})
    assert differ.headers["x-router-tier"] == "full" and differ.headers["x-router-verified"] == "agree:reject"
    assert "verifier_reject" in differ.headers["x-router-mistakes"]


async def test_logprobs(
    scripted: Scripted, start_fake_: Callable[..., Awaitable[FakeServer]], proxy_: Callable[..., Awaitable[Proxy]]
) -> None:
    full = await start_fake_()
    proxy = await proxy_(policy(scripted.url, full.url, "{kind: logprobs, threshold: -1.0}"))
    sure = await ask(proxy, content="lp:-0.2")
    assert sure.headers["x-router-tier"] == "fast" and sure.headers["x-router-verified"] == "logprobs:accept"
    assert scripted.requests[-1]["logprobs"] is True
    unsure = await ask(proxy, content="lp:-2.5")
    assert unsure.headers["x-router-tier"] == "full" and unsure.headers["x-router-verified"] == "logprobs:reject"
    # a server that returns no logprobs for tool calls (llama-cpp-python): no verdict, if_unsure decides
    none = await ask(proxy, content="no logprobs here")
    assert none.headers["x-router-tier"] == "fast" and none.headers["x-router-verified"] == "logprobs:unsure"


def test_policy_checks_verify() -> None:
    base = policy("http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1", "{kind: judge, tier: nope}")
    with pytest.raises(PolicyError, match="unknown tier 'nope'"):
        parse_policy(base, "p.yaml", {})
    with pytest.raises(PolicyError, match="samples"):
        parse_policy(base.replace("{kind: judge, tier: nope}", "{kind: agree, samples: 1}"), "p.yaml", {})
    with pytest.raises(PolicyError, match=r"extra|not permitted|unknown"):
        parse_policy(base.replace("{kind: judge, tier: nope}", "{kind: judge, colour: red}"), "p.yaml", {})
    ok = parse_policy(base.replace("tier: nope", "tier: full"), "p.yaml", {})
    assert ok.routes[0].verify is not None and ok.routes[0].verify.kind == "judge"


def test_the_default_policy_documents_a_valid_verify_example() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "policies" / "default.yaml").read_text()
    assert "    # verify: {kind: judge, tier: full}" in text
    route = parse_policy(text.replace("    # verify:", "    verify:"), "default.yaml", {}).routes[0]
    assert route.verify is not None and route.verify.tier == "full"


@pytest.mark.parametrize(
    ("content", "accept", "unsure"),
    [
        ('{"accept": true, "reason": "fine"}', True, False),
        ('Sure: {"accept": false, "reason": "wrong city"} done', False, False),
        ('{"accept": "yes"}', True, True),
        ("", True, True),
        ("{not json}", True, True),
    ],
)
def test_read_judgement(content: str, accept: bool, unsure: bool) -> None:
    v = read_judgement(content)
    assert (v.accept, v.unsure) == (accept, unsure)


def test_helpers() -> None:
    assert normalised({"b": " New  York ", "a": 3}) == {"a": 3.0, "b": "new york"}
    m1 = {"tool_calls": [{"function": {"name": "t", "arguments": '{"x": 1, "y": "A"}'}}]}
    m2 = {"tool_calls": [{"function": {"name": "t", "arguments": '{"y": "a ", "x": 1.0}'}}]}
    assert call_key(m1) == call_key(m2) and call_key({"content": "x"}) is None
    choice = {"logprobs": {"content": [{"logprob": -0.5}, {"logprob": -1.5}]}}
    assert logprob_measure(choice, "mean") == -1.0 and logprob_measure(choice, "min") == -1.5
    assert logprob_measure({"logprobs": None}, "mean") is None
    cache = VerdictCache(size=2)
    for k in (b"a", b"b", b"c"):
        cache.put(k, Verdict(True, ""))
    assert len(cache) == 2 and cache.get(b"a") is None and cache.get(b"c") is not None


async def test_streamed_calls_are_verified_before_release(
    scripted: Scripted, start_fake_: Callable[..., Awaitable[FakeServer]], proxy_: Callable[..., Awaitable[Proxy]]
) -> None:
    fake = await start_fake_()
    proxy = await proxy_(policy(fake.url, fake.url, "{kind: judge, tier: judge}", judge=scripted.url))
    body = {
        "model": "auto", "messages": [{"role": "user", "content": "do it"}], "tools": TOOLS, "stream": True,
        "tool_choice": {"type": "function", "function": {"name": "bad"}},
    }  # fmt: skip
    async with aiohttp.ClientSession() as s, s.post(proxy.url + "/chat/completions", json=body) as resp:
        raw = await resp.read()
    assert (resp.headers["x-router-tier"], resp.headers["x-router-mistakes"]) == ("full", "verifier_reject")
    assert resp.headers["x-router-verified"] == "judge:reject"
    frames = [orjson.loads(line[6:]) for line in raw.split(b"\n") if line.startswith(b"data: {")]
    calls = [tc for f in frames for c in f["choices"] for tc in (c["delta"].get("tool_calls") or ())]
    assert len({c["id"] for c in calls if c.get("id")}) == 1  # one call reached the client: full's
    [trailer] = [line for line in raw.split(b"\n") if line.startswith(b": router ")]
    assert orjson.loads(trailer[len(b": router ") :])["tiers"] == ["fast", "full"]
    assert len([r for r in scripted.requests if "response_format" in r]) == 1


async def echo_logprobs(request: web.Request) -> web.Response:
    """/v1/completions as llama-cpp-python answers `echo` + `logprobs`: one token per character here,
    top logprobs shifted by one (at i, the next token's); every token's value is the `lp:<x>` of the
    prompt, so the call's mean is exactly that."""
    body = await request.json()
    text = body["prompt"]
    value = float(re.search(r"lp:(-?[\d.]+)", text).group(1))  # type: ignore[union-attr]
    tops = [{text[i + 1]: value} if i + 1 < len(text) else {"x": 0.0} for i in range(len(text))]
    logprobs = {"tokens": list(text), "text_offset": list(range(len(text))), "top_logprobs": tops}
    return web.json_response({"choices": [{"text": text, "logprobs": logprobs, "finish_reason": "length"}]})


async def test_score_is_one_completions_request_to_the_scoring_tier(
    scripted: Scripted, proxy_: Callable[..., Awaitable[Proxy]]
) -> None:
    seen: list[dict[str, Any]] = []

    async def completions(request: web.Request) -> web.Response:
        seen.append(await request.json())
        return await echo_logprobs(request)

    app = upstream_app({"/v1/completions": completions, "/v1/chat/completions": scripted.handle})
    async with serve_app(app) as full:
        proxy = await proxy_(policy(scripted.url, full, "{kind: score, threshold: -1.0}"))
        sure = await ask(proxy, content="lp:-0.2")
        assert sure.headers["x-router-tier"] == "fast" and sure.headers["x-router-verified"] == "score:accept"
        [sent] = seen
        assert sent["echo"] is True and sent["max_tokens"] == 1 and sent["logprobs"] >= 1
        assert sent["prompt"].endswith('<tool_call>\n{"name": "good", "arguments": {}}\n</tool_call>')
        unsure = await ask(proxy, content="lp:-2.5")
        assert unsure.headers["x-router-tier"] == "full" and unsure.headers["x-router-verified"] == "score:reject"


def test_judge_is_shown_the_called_tools_parameters() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "reserve",
                "description": "Book a table",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "time": {"type": "string", "description": "24-hour time,   HH:MM"},
                        "size": {"type": "integer"},
                        "zone": {"type": "string", "enum": ["in", "out"]},
                    },
                    "required": ["time"],
                },
            },
        },
        {"name": "flat", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}},
    ]
    body = {"messages": [{"role": "user", "content": "book 7pm"}], "tools": tools}
    call = {"tool_calls": [{"function": {"name": "reserve", "arguments": '{"time": "7:00 PM"}'}}]}
    prompt = judge_messages(body, call)[-1]["content"]
    # the tools with their parameters first (the same from call to call: a server's prompt cache keeps it)
    assert prompt.startswith(
        "Tools offered:\n- reserve: Book a table\n  - time (string, required): 24-hour time, HH:MM\n"
        "  - size (integer)\n  - zone (string one of in, out)\n- flat\n  - q (string)\n\nUser request: book 7pm\n"
    )
    assert 'Proposed call: reserve({"time": "7:00 PM"})\n\nIs this' in prompt
    # too many tools to detail: names and descriptions, and the called tool's parameters after the call
    many = [{"name": f"t{i}", "description": "d" * 150, "input_schema": {"properties": {"x": {}}}} for i in range(60)]
    crowded = {**body, "tools": [*many, *tools]}
    prompt = judge_messages(crowded, call)[-1]["content"]
    assert "  - x (any)" not in prompt and "- t59: " in prompt
    assert 'reserve({"time": "7:00 PM"})\nParameters of reserve:\n- time (string, required)' in prompt
    assert parameter_lines(body, "flat") == ["- q (string)"]
    assert parameter_lines(body, "nope") == [] and parameter_lines({"tools": [{"name": "x"}]}, "x") == []

"""`GET /metrics`: Prometheus text that parses, with the documented counters after known traffic —
answers and mistakes per tier/route/kind, client calls by final tier and escalation, latency
histograms with one observation per served call, refusals by reason, and the process's own series."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import openai
import orjson
from prometheus_client.parser import text_string_to_metric_families

from router.fake import FakeConfig, FakeServer
from tests.conftest import Proxy, policy_text

StartFake = Callable[..., Awaitable[FakeServer]]
StartProxy = Callable[..., Awaitable[Proxy]]


def _tool(name: str, arg: str) -> dict[str, Any]:
    params = {"type": "object", "properties": {arg: {"type": "string"}}, "required": [arg]}
    return {"type": "function", "function": {"name": name, "parameters": params}}


WEATHER = [_tool("get_weather", "city")]
READ_FILE = [_tool("read_file", "path")]  # the fast fake breaks every read_file call
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
EXTRA = "escalation: {to: full}\n"
HISTOGRAMS = ("router_ttft_seconds", "router_call_seconds")

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def _get(url: str) -> tuple[int, str, str]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as s, s.get(url) as r:
        return r.status, r.headers.get("content-type", ""), await r.text()


async def scrape(proxy: Proxy) -> tuple[Samples, dict[str, str]]:
    """(sample name + labels → value, family name → type) of the proxy's /metrics."""
    status, ctype, text = await _get(proxy.base + "/metrics")
    assert status == 200 and ctype.startswith("text/plain"), (status, ctype)
    samples: Samples = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples, types


def select(samples: Samples, name: str, **labels: str) -> dict[frozenset[tuple[str, str]], float]:
    """Samples called `name` whose labels include `labels`."""
    want = set(labels.items())
    return {lab: v for (n, lab), v in samples.items() if n == name and want <= lab}


def value(samples: Samples, name: str, **labels: str) -> float:
    """The one sample called `name` with exactly `labels` (0 when absent)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


async def _stream(client: openai.AsyncOpenAI, tools: list[dict[str, Any]]) -> dict[str, str]:
    async with client.chat.completions.with_streaming_response.create(
        model="auto", messages=USER, tools=tools, stream=True
    ) as resp:
        body = b"".join([part async for part in resp.iter_bytes()])
        headers = dict(resp.headers)
    assert b"data: [DONE]" in body
    trailer = next(line for line in body.split(b"\n") if line.startswith(b": router "))
    summary = orjson.loads(trailer[len(b": router ") :])
    return {"tier": summary["tier"], "route": summary["route"], "escalated": str(summary["escalated"]).lower()} | {
        "header-route": headers["x-router-route"]
    }


async def _json(client: openai.AsyncOpenAI, tools: list[dict[str, Any]] | None) -> dict[str, str]:
    kwargs: dict[str, Any] = {"tools": tools} if tools else {}
    raw = await client.chat.completions.with_raw_response.create(model="auto", messages=USER, **kwargs)
    raw.parse()
    h = raw.headers
    return {"tier": h["x-router-tier"], "route": h["x-router-route"], "escalated": h["x-router-escalated"]}


async def _start(start_fake_: StartFake, proxy_: StartProxy, **settings: Any) -> Proxy:
    fast = await start_fake_(FakeConfig(seed=1, bad_tool_rates={"read_file": 1.0}, bad_kinds=("invalid_json",)))
    full = await start_fake_(FakeConfig(seed=2))
    return await proxy_(policy_text(fast.url, full.url, extra=EXTRA), **settings)


async def test_counters_and_histograms_match_the_traffic(start_fake_: StartFake, proxy_: StartProxy) -> None:
    proxy = await _start(start_fake_, proxy_)
    async with openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0) as c:
        fast_ok = {"tier": "fast", "route": "simple-tool-call", "escalated": "false"}
        escalated = {"tier": "full", "route": "simple-tool-call", "escalated": "true"}
        default = {"tier": "full", "route": "default", "escalated": "false"}
        for _ in range(3):
            assert await _json(c, WEATHER) == fast_ok
        for _ in range(2):
            assert await _json(c, READ_FILE) == escalated
        for _ in range(2):
            assert await _json(c, None) == default
        for _ in range(2):
            assert await _stream(c, WEATHER) == fast_ok | {"header-route": "simple-tool-call"}
        assert await _stream(c, READ_FILE) == escalated | {"header-route": "simple-tool-call"}
    served = 10

    # A stream is counted when its generator finishes, which may be just after the client saw [DONE].
    for _ in range(100):
        samples, types = await scrape(proxy)
        if sum(select(samples, "router_calls_total").values()) >= served:
            break
        await asyncio.sleep(0.02)

    assert types["router_answers"] == "counter" and types["router_mistakes"] == "counter"
    assert types["router_calls"] == "counter" and types["router_refused"] == "counter"
    assert all(types[h] == "histogram" for h in HISTOGRAMS)

    # upstream answers, per tier and route: every fast attempt, plus the escalated full answers
    answers = {tuple(sorted(lab)): v for lab, v in select(samples, "router_answers_total").items()}
    assert answers == {
        (("route", "simple-tool-call"), ("tier", "fast")): 8.0,
        (("route", "simple-tool-call"), ("tier", "full")): 3.0,
        (("route", "default"), ("tier", "full")): 2.0,
    }
    # mistakes, by kind, on the tier that made them
    mistakes = select(samples, "router_mistakes_total")
    assert mistakes == {frozenset({("tier", "fast"), ("route", "simple-tool-call"), ("kind", "invalid_json")}): 3.0}
    # client calls, by final tier and escalation
    calls = {
        (dict(lab)["tier"], dict(lab)["route"], dict(lab)["escalated"]): v
        for lab, v in select(samples, "router_calls_total").items()
    }
    assert calls == {
        ("fast", "simple-tool-call", "false"): 5.0,
        ("full", "simple-tool-call", "true"): 3.0,
        ("full", "default", "false"): 2.0,
    }
    # one latency observation per served call, in each histogram, under the call's final tier/route
    for name in HISTOGRAMS:
        total = 0.0
        for (tier, route), n in {
            ("fast", "simple-tool-call"): 5,
            ("full", "simple-tool-call"): 3,
            ("full", "default"): 2,
        }.items():
            count = value(samples, f"{name}_count", tier=tier, route=route)
            assert count == n, (name, tier, route, count)
            assert value(samples, f"{name}_bucket", tier=tier, route=route, le="+Inf") == n
            buckets = sorted(
                (float(dict(lab)["le"]), v)
                for lab, v in select(samples, f"{name}_bucket", tier=tier, route=route).items()
            )
            counts = [v for _, v in buckets]
            assert counts == sorted(counts), "cumulative buckets never decrease"
            assert 0 < value(samples, f"{name}_sum", tier=tier, route=route) < 20 * n
            total += count
        assert total == served
    for tier, route in (("fast", "simple-tool-call"), ("full", "simple-tool-call"), ("full", "default")):
        ttft = value(samples, "router_ttft_seconds_sum", tier=tier, route=route)
        whole = value(samples, "router_call_seconds_sum", tier=tier, route=route)
        assert ttft <= whole + 1e-9, (tier, route, ttft, whole)
    assert not select(samples, "router_refused_total")

    # the stats endpoint reports the same counters
    status, _, text = await _get(proxy.url + "/router/stats")
    assert status == 200
    stats = orjson.loads(text)
    assert stats["tiers"]["fast"]["calls"] == 8 and stats["tiers"]["full"]["calls"] == 5
    assert stats["tiers"]["fast"]["mistakes"] == {"invalid_json": 3}
    assert stats["tiers"]["fast"]["escalations"] == 3


async def test_agent_reported_errors_are_counted_by_kind(start_fake_: StartFake, proxy_: StartProxy) -> None:
    proxy = await _start(start_fake_, proxy_)
    async with openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0) as c:
        headers = {"x-session-id": "metrics-agent-1"}
        raw = await c.chat.completions.with_raw_response.create(
            model="auto", messages=USER, tools=WEATHER, extra_headers=headers
        )
        assert raw.headers["x-router-tier"] == "fast"
        msg = raw.parse().choices[0].message
        assert msg.tool_calls
        history = [
            *USER,
            {"role": "assistant", "content": None, "tool_calls": [tc.model_dump() for tc in msg.tool_calls]},
            {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "Error: city not found"},
        ]
        raw = await c.chat.completions.with_raw_response.create(
            model="auto", messages=history, tools=WEATHER, extra_headers=headers
        )
        assert (raw.headers["x-router-tier"], raw.headers["x-router-route"]) == ("full", "sticky")
    samples, _ = await scrape(proxy)
    assert (
        value(samples, "router_mistakes_total", tier="fast", route="simple-tool-call", kind="agent_reported_error")
        == 1.0
    )
    assert value(samples, "router_calls_total", tier="full", route="sticky", escalated="false") == 1.0
    assert value(samples, "router_answers_total", tier="full", route="sticky") == 1.0


async def test_oversized_bodies_are_refused_and_counted(start_fake_: StartFake, proxy_: StartProxy) -> None:
    proxy = await _start(start_fake_, proxy_, max_body_bytes=2048)
    big = [{"role": "user", "content": "x" * 3000}]
    async with openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0) as c:
        # declared with content-length (the SDK): refused before the body is read
        try:
            await c.chat.completions.create(model="auto", messages=big)
        except openai.APIStatusError as exc:
            assert exc.status_code == 413
        else:
            raise AssertionError("an oversized body was accepted")
        # a body that fits is served
        assert (await _json(c, WEATHER))["tier"] == "fast"

    # chunked, with no content-length: refused while reading
    async def chunks() -> AsyncIterator[bytes]:
        payload = orjson.dumps({"model": "auto", "messages": big})
        for i in range(0, len(payload), 512):
            yield payload[i : i + 512]

    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as s,
        s.post(proxy.url + "/chat/completions", data=chunks(), headers={"content-type": "application/json"}) as r,
    ):
        assert r.status == 413
        assert "content-length" not in r.request_info.headers
        error = (await r.json())["error"]
        assert set(error) == {"message", "type", "param", "code"}

    samples, _ = await scrape(proxy)
    assert select(samples, "router_refused_total") == {frozenset({("reason", "body_too_large")}): 2.0}
    # refused calls are not served calls
    assert sum(select(samples, "router_calls_total").values()) == 1.0
    assert sum(select(samples, "router_call_seconds_count").values()) == 1.0


async def test_the_process_standard_series_are_there(start_fake_: StartFake, proxy_: StartProxy) -> None:
    """One process: its CPU, memory, descriptors and the collector's work, as every Python exporter has."""
    proxy = await _start(start_fake_, proxy_)
    samples, types = await scrape(proxy)
    assert types["process_cpu_seconds"] == "counter" and value(samples, "process_cpu_seconds_total") > 0
    assert value(samples, "process_resident_memory_bytes") > 0 and value(samples, "process_open_fds") > 0
    assert set(select(samples, "python_gc_collections_total")) == {
        frozenset({("generation", g)}) for g in ("0", "1", "2")
    }
    assert select(samples, "python_info")

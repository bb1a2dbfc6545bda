"""Adaptive routing: a tool the route's tier fumbles too often is diverted to a stronger tier, every
`probe_every`-th diverted call probes the tier again, and the tool comes back once probes bring its
windowed mistake rate under the threshold.

Three layers: `decide()`'s adaptive branch as a table (pure), `AdaptiveState.refresh()` over a real
MemoryStore with events at explicit times (windowing, thresholds), and a real proxy in front of
fault-injecting fakes driven with the openai SDK.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import openai
import pytest

from router.core.live.adaptive import AdaptiveState
from router.fake import FakeConfig, FakeServer
from router.policy.decide import Decision, Features, Live, decide
from router.policy.model import Policy
from router.policy.watch import PolicyHolder
from router.store.base import MISTAKEN, Event
from router.store.memory import MemoryStore
from tests.conftest import Proxy, policy_text


def _tool(name: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }


FLAKY, GOOD = "flaky_tool", "good_tool"
TOOLS = [_tool(FLAKY), _tool(GOOD)]
USER = [{"role": "user", "content": "What is the weather in Paris?"}]

# ---------------------------------------------------------------------------------------------
# decide(): the adaptive branch, as a table
# ---------------------------------------------------------------------------------------------


def _policy(adaptive: dict[str, Any] | None, escalation_to: Any = "full", tiers: tuple[str, ...] = ()) -> Policy:
    models = {t: {"model": f"openai/{t}", "api_base": "http://127.0.0.1:9/v1"} for t in ("fast", "full", *tiers)}
    route: dict[str, Any] = {"name": "tools", "when": {"tools": {"present": True}}, "use": "fast"}
    if adaptive is not None:
        route["adaptive"] = adaptive
    return Policy.model_validate(
        {
            "version": 1,
            "models": models,
            "routes": [route, {"name": "default", "use": "full"}],
            "escalation": {"to": escalation_to},
            "store": "memory://",
        }
    )


RULE = {"window": 600, "max_mistake_rate": 0.3, "min_samples": 5, "probe_every": 4}
BOTH = (FLAKY, GOOD)


def _features(tools: tuple[str, ...] = BOTH, pinned: str | None = None, **kw: Any) -> Features:
    return Features(model="auto", tool_names=tools, pinned_tool=pinned, last_role="user", **kw)


# (id, policy, features, live, expected (tier, route, diverted_tool))
DECIDE_CASES: list[tuple[str, Policy, Features, Live, tuple[str, str, str | None]]] = [
    ("nothing degraded", _policy(RULE), _features(pinned=FLAKY), Live(), ("fast", "tools", None)),
    (
        "pinned degraded tool is diverted to the escalation tier",
        _policy(RULE),
        _features(pinned=FLAKY),
        Live(degraded={("tools", FLAKY): 0.9}),
        ("full", "tools:adaptive", FLAKY),
    ),
    (
        "pinned healthy tool stays although an offered tool is degraded",
        _policy(RULE),
        _features(pinned=GOOD),
        Live(degraded={("tools", FLAKY): 0.9}),
        ("fast", "tools", None),
    ),
    (
        "unpinned call offering a degraded tool is diverted",
        _policy(RULE),
        _features(),
        Live(degraded={("tools", FLAKY): 0.9}),
        ("full", "tools:adaptive", FLAKY),
    ),
    (
        "unpinned call offering only healthy tools stays",
        _policy(RULE),
        _features(tools=(GOOD,)),
        Live(degraded={("tools", FLAKY): 0.9}),
        ("fast", "tools", None),
    ),
    (
        "the worst degraded tool is named",
        _policy(RULE),
        _features(),
        Live(degraded={("tools", FLAKY): 0.5, ("tools", GOOD): 0.8}),
        ("full", "tools:adaptive", GOOD),
    ),
    (
        "1st to 3rd diverted calls are diverted (diverted=2 -> 3rd)",
        _policy(RULE),
        _features(pinned=FLAKY),
        Live(degraded={("tools", FLAKY): 0.9}, diverted={("tools", FLAKY): 2}),
        ("full", "tools:adaptive", FLAKY),
    ),
    (
        "every probe_every-th diverted call probes the route's tier",
        _policy(RULE),
        _features(pinned=FLAKY),
        Live(degraded={("tools", FLAKY): 0.9}, diverted={("tools", FLAKY): 3}),
        ("fast", "tools:probe", FLAKY),
    ),
    (
        "after a probe, diverted again",
        _policy(RULE),
        _features(pinned=FLAKY),
        Live(degraded={("tools", FLAKY): 0.9}, diverted={("tools", FLAKY): 4}),
        ("full", "tools:adaptive", FLAKY),
    ),
    (
        "8th diverted call probes again",
        _policy(RULE),
        _features(pinned=FLAKY),
        Live(degraded={("tools", FLAKY): 0.9}, diverted={("tools", FLAKY): 7}),
        ("fast", "tools:probe", FLAKY),
    ),
    (
        "probe counts are per tool",
        _policy(RULE),
        _features(pinned=FLAKY),
        Live(degraded={("tools", FLAKY): 0.9}, diverted={("tools", GOOD): 3}),
        ("full", "tools:adaptive", FLAKY),
    ),
    (
        "adaptive.to overrides the escalation tier",
        _policy({**RULE, "to": "big"}, tiers=("big",)),
        _features(pinned=FLAKY),
        Live(degraded={("tools", FLAKY): 0.9}),
        ("big", "tools:adaptive", FLAKY),
    ),
    (
        "adaptive.to equal to the route's tier diverts nothing",
        _policy({**RULE, "to": "fast"}),
        _features(pinned=FLAKY),
        Live(degraded={("tools", FLAKY): 0.9}),
        ("fast", "tools", None),
    ),
    (
        "no escalation chain and no adaptive.to: nowhere to divert",
        _policy(RULE, escalation_to=None),
        _features(pinned=FLAKY),
        Live(degraded={("tools", FLAKY): 0.9}),
        ("fast", "tools", None),
    ),
    (
        "escalation chain: diverted to its last tier",
        _policy(RULE, escalation_to=["mid", "full"], tiers=("mid",)),
        _features(pinned=FLAKY),
        Live(degraded={("tools", FLAKY): 0.9}),
        ("full", "tools:adaptive", FLAKY),
    ),
    (
        "a route without `adaptive` ignores degraded entries",
        _policy(None),
        _features(pinned=FLAKY),
        Live(degraded={("tools", FLAKY): 0.9}),
        ("fast", "tools", None),
    ),
    (
        "degraded entries of another route do not apply",
        _policy(RULE),
        _features(pinned=FLAKY),
        Live(degraded={("other", FLAKY): 0.9}),
        ("fast", "tools", None),
    ),
    (
        "a sticky session wins over adaptive routing",
        _policy(RULE),
        _features(pinned=FLAKY),
        Live(sticky_tier="full", degraded={("tools", FLAKY): 0.9}),
        ("full", "sticky", None),
    ),
    (
        "a call without tools falls to the default route",
        _policy(RULE),
        _features(tools=()),
        Live(degraded={("tools", FLAKY): 0.9}),
        ("full", "default", None),
    ),
]


@pytest.mark.parametrize(
    ("policy", "features", "live", "expected"), [c[1:] for c in DECIDE_CASES], ids=[c[0] for c in DECIDE_CASES]
)
def test_decide_adaptive_branch(
    policy: Policy, features: Features, live: Live, expected: tuple[str, str, str | None]
) -> None:
    decision = decide(features, policy, live)
    assert (decision.tier, decision.route, decision.diverted_tool) == expected
    if decision.route.endswith(":adaptive"):
        assert decision.reason.startswith("adaptive: 'fast' mistake rate for")
    if decision.route.endswith(":probe"):
        assert decision.reason.startswith("probe: 'fast' mistake rate for")


def test_decide_is_pure_over_live_state() -> None:
    policy = _policy(RULE)
    degraded = {("tools", FLAKY): 0.9}
    diverted = {("tools", FLAKY): 3}
    live = Live(degraded=degraded, diverted=diverted)
    first = decide(_features(pinned=FLAKY), policy, live)
    assert decide(_features(pinned=FLAKY), policy, live) == first
    assert degraded == {("tools", FLAKY): 0.9} and diverted == {("tools", FLAKY): 3}


def test_decide_probe_cycle_with_note() -> None:
    """decide() + AdaptiveState.note() over 12 calls: diverted, diverted, diverted, probe, ..."""
    policy = _policy(RULE)
    state = AdaptiveState(MemoryStore(), PolicyHolder(policy))
    state.degraded = {("tools", FLAKY): 1.0}
    routes = []
    for _ in range(12):
        d = decide(_features(pinned=FLAKY), policy, Live(degraded=state.degraded, diverted=state.diverted))
        state.note(d)
        routes.append(d.route)
    assert routes == ["tools:adaptive"] * 3 + ["tools:probe"] + ["tools:adaptive"] * 3 + ["tools:probe"] + [
        "tools:adaptive"
    ] * 3 + ["tools:probe"]
    assert state.diverted == {("tools", FLAKY): 12}
    state.note(Decision("fast", "tools", "first matching route"))  # not diverted: not counted
    assert state.diverted == {("tools", FLAKY): 12}


# ---------------------------------------------------------------------------------------------
# AdaptiveState.refresh(): windowed rates from a real store
# ---------------------------------------------------------------------------------------------


def _answers(tier: str, tool: str, n: int, bad: int, age: float = 0.0, route: str = "tools") -> list[Event]:
    """`n` answers of `tier` calling `tool`, the first `bad` of them with invalid arguments, `age`
    seconds before the test runs (`ts` holds -age until `_now()` places the events in time)."""
    ts = -age
    events: list[Event] = []
    for i in range(n):
        events += [Event(tier, route, ts=ts), Event(tier, route, tool=tool, ts=ts)]
        if i < bad:
            events.append(Event(tier, route, tool=tool, kind="invalid_json", ts=ts))
            events += [Event(tier, route, kind=MISTAKEN, ts=ts), Event(tier, route, tool=tool, kind=MISTAKEN, ts=ts)]
    return events


def _now(events: list[Event]) -> list[Event]:
    now = time.time()
    return [dataclasses.replace(e, ts=now + e.ts) for e in events]


async def _refreshed(events: list[Event], rule: dict[str, Any] = RULE) -> dict[tuple[str, str], float]:
    store = MemoryStore()
    store.record(_now(events))
    state = AdaptiveState(store, PolicyHolder(_policy(rule)))
    await state.refresh()
    return state.degraded


def _uncalled(tier: str, tool: str, n: int, kind: str) -> list[Event]:
    """`n` answers of `tier` that should have called `tool` and did not (prose / a call as text):
    recorded as the router does, as answers for that tool, each with a mistake."""
    one = [
        Event(tier, "tools", ts=0.0),
        Event(tier, "tools", tool=tool, ts=0.0),
        Event(tier, "tools", tool=tool, kind=kind, ts=0.0),
        Event(tier, "tools", kind=MISTAKEN, ts=0.0),
        Event(tier, "tools", tool=tool, kind=MISTAKEN, ts=0.0),
    ]
    return one * n


REFRESH_CASES: list[tuple[str, list[Event], dict[tuple[str, str], float]]] = [
    ("no traffic", [], {}),
    ("over the threshold", _answers("fast", FLAKY, 5, 2), {("tools", FLAKY): 0.4}),
    ("too few samples", _answers("fast", FLAKY, 4, 4), {}),
    ("exactly at the threshold is not over", _answers("fast", FLAKY, 10, 3), {}),
    ("healthy tool", _answers("fast", GOOD, 20, 0), {}),
    ("mistakes of another tier do not count", _answers("full", FLAKY, 10, 10), {}),
    ("mistakes older than the window do not count", _answers("fast", FLAKY, 10, 10, age=3600), {}),
    (
        "old mistakes aged out, recent answers good",
        _answers("fast", FLAKY, 10, 10, age=3600) + _answers("fast", FLAKY, 5, 0),
        {},
    ),
    (
        "answers of every route on the tier count (probes included)",
        _answers("fast", FLAKY, 3, 3) + _answers("fast", FLAKY, 3, 0, route="tools:probe"),
        {("tools", FLAKY): 0.5},
    ),
    (
        "a tool the tier never calls (missing_tool_call) counts answers, not calls",
        _uncalled("fast", FLAKY, 5, "missing_tool_call"),
        {("tools", FLAKY): 1.0},
    ),
    (
        "a tool the tier writes as text (text_tool_call) counts answers, not calls",
        _uncalled("fast", FLAKY, 5, "text_tool_call"),
        {("tools", FLAKY): 1.0},
    ),
    ("uncalled answers need min_samples too", _uncalled("fast", FLAKY, 4, "missing_tool_call"), {}),
    (
        "calls and uncalled answers add up: 3 of 6 answers fumbled",
        _answers("fast", FLAKY, 3, 0) + _uncalled("fast", FLAKY, 3, "missing_tool_call"),
        {("tools", FLAKY): 0.5},
    ),
    (
        "each tool on its own",
        _answers("fast", FLAKY, 6, 6) + _answers("fast", GOOD, 6, 1),
        {("tools", FLAKY): 1.0},
    ),
]


@pytest.mark.parametrize(("events", "expected"), [c[1:] for c in REFRESH_CASES], ids=[c[0] for c in REFRESH_CASES])
async def test_refresh_reads_windowed_rates(events: list[Event], expected: dict[tuple[str, str], float]) -> None:
    assert await _refreshed(events, {**RULE, "window": 600}) == expected


async def test_refresh_forgets_probe_counts_of_recovered_tools() -> None:
    store = MemoryStore()
    state = AdaptiveState(store, PolicyHolder(_policy(RULE)))
    store.record(_now(_answers("fast", FLAKY, 5, 5)))
    await state.refresh()
    assert state.degraded == {("tools", FLAKY): 1.0}
    state.note(Decision("full", "tools:adaptive", "x", diverted_tool=FLAKY))
    state.note(Decision("full", "tools:adaptive", "x", diverted_tool=FLAKY))
    await state.refresh()
    assert state.diverted == {("tools", FLAKY): 2}  # still degraded: the count stays
    store.record(_now(_answers("fast", FLAKY, 20, 0)))  # 5 bad of 25: 0.2 < 0.3
    await state.refresh()
    assert state.degraded == {} and state.diverted == {}


async def test_refresh_failure_keeps_the_loop_running() -> None:
    """A store that raises must not end the background loop (it logs and tries again)."""

    class Flaky(MemoryStore):
        calls = 0

        async def stats(self, window_seconds: float | None = None) -> dict[str, Any]:
            self.calls += 1
            if self.calls == 1:
                raise ConnectionError("store down")
            return await super().stats(window_seconds)

    store = Flaky()
    store.record(_now(_answers("fast", FLAKY, 5, 5)))
    state = AdaptiveState(store, PolicyHolder(_policy(RULE)), interval=0.01)
    task = asyncio.create_task(state.run())
    try:
        for _ in range(300):
            if state.degraded:
                break
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert store.calls >= 2
    assert state.degraded == {("tools", FLAKY): 1.0}


# ---------------------------------------------------------------------------------------------
# A real proxy in front of fakes
# ---------------------------------------------------------------------------------------------

ROUTES = """
    routes:
      - name: tools
        when: {tools: {present: true}}
        use: fast
        adaptive: {window: 600, max_mistake_rate: 0.3, min_samples: 5, probe_every: 4}
        salvage: false  # the fake's text calls are valid: salvaged, they would not count as mistakes
      - name: default
        use: full
"""
EXTRA = "escalation: {to: full}\n"

StartFake = Callable[..., Awaitable[FakeServer]]
StartProxy = Callable[..., Awaitable[Proxy]]


async def _fake_requests(fake: FakeServer) -> int:
    async with aiohttp.ClientSession() as s, s.get(f"http://{fake.host}:{fake.port}/_fake/stats") as r:
        return int((await r.json())["requests"])


class Driver:
    def __init__(self, proxy: Proxy, client: openai.AsyncOpenAI) -> None:
        self.proxy, self.client = proxy, client

    async def ask(self, tool: str, *, stream: bool = False) -> tuple[str, str, str, str]:
        """One call pinning `tool`; returns (tier, route, escalated, mistakes) after the store and the
        adaptive snapshot caught up (explicit refresh: no waiting for the 2 s background loop)."""
        choice = {"type": "function", "function": {"name": tool}}
        if stream:
            async with self.client.chat.completions.with_streaming_response.create(
                model="auto", messages=USER, tools=TOOLS, tool_choice=choice, stream=True
            ) as resp:
                headers = resp.headers
                body = b"".join([part async for part in resp.iter_bytes()])
            assert b"data: [DONE]" in body
            trailer = next(line for line in body.split(b"\n") if line.startswith(b": router "))
            summary = json.loads(trailer[len(b": router ") :])
            result = (
                summary["tier"],
                summary["route"],
                str(summary["escalated"]).lower(),
                ",".join(summary["mistakes"]),
            )
            assert headers["x-router-route"] == summary["route"]
        else:
            raw = await self.client.chat.completions.with_raw_response.create(
                model="auto", messages=USER, tools=TOOLS, tool_choice=choice
            )
            calls = raw.parse().choices[0].message.tool_calls
            assert calls and calls[0].function.name == tool
            assert isinstance(json.loads(calls[0].function.arguments)["city"], str)  # the agent got a valid call
            h = raw.headers
            result = (h["x-router-tier"], h["x-router-route"], h["x-router-escalated"], h["x-router-mistakes"])
        await self.proxy.runtime.store.flush()
        await self.proxy.runtime.adaptive.refresh()
        return result


DIVERTED = ("full", "tools:adaptive", "false", "")
FAILED_PROBE = ("full", "tools:probe", "true", "invalid_json")  # routed to fast, fumbled, escalated
GOOD_PROBE = ("fast", "tools:probe", "false", "")
ON_FAST = ("fast", "tools", "false", "")
ESCALATED = ("full", "tools", "true", "invalid_json")


async def test_flaky_tool_is_diverted_probed_and_returns(start_fake_: StartFake, proxy_: StartProxy) -> None:
    bad_fast = await start_fake_(
        FakeConfig(seed=1, bad_tool_rates={FLAKY: 1.0, GOOD: 0.0}, bad_kinds=("invalid_json",))
    )
    full = await start_fake_(FakeConfig(seed=2))
    good_fast = await start_fake_(FakeConfig(seed=3))
    proxy = await proxy_(policy_text(bad_fast.url, full.url, extra=EXTRA, routes=ROUTES))
    proxy.runtime.adaptive.interval = 3600.0  # the background loop refreshes at most once more
    base = await _fake_requests(bad_fast)  # its warm-up GETs
    async with openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0) as client:
        d = Driver(proxy, client)

        # 1. Below min_samples: flaky_tool's calls go to fast, are fumbled, escalated invisibly.
        for i in range(5):
            assert await d.ask(FLAKY) == ESCALATED, i
            assert await d.ask(GOOD) == ON_FAST, i
        assert proxy.runtime.adaptive.degraded == {("tools", FLAKY): 1.0}
        assert await _fake_requests(bad_fast) - base == 10

        # 2. Diverted: 3 of every 4 go straight to full; every 4th probes fast (and fails again).
        expected = [DIVERTED, DIVERTED, DIVERTED, FAILED_PROBE] * 2
        got = []
        for _ in expected:
            got.append(await d.ask(FLAKY))
            assert await d.ask(GOOD) == ON_FAST  # the healthy tool never leaves fast
        assert got == expected
        assert await _fake_requests(bad_fast) - base == 10 + 2 + 8  # only probes (and good_tool) reached fast
        stats = await proxy.runtime.store.stats()
        assert stats["tools"]["fast"][FLAKY]["calls"] == 7
        assert stats["tools"]["fast"][FLAKY]["mistakes"] == {"invalid_json": 7}
        assert stats["routes"]["tools:adaptive"]["calls"] == 6
        assert stats["routes"]["tools:probe"]["mistakes"] == {"invalid_json": 2}

        # 3. The fast tier is fixed (policy reload points it at a healthy fake). Probes now succeed;
        # 7 mistakes need 24 answers for 7/24 <= 0.3: 17 good probes, one every 4th diverted call.
        policy_path = proxy.policy_path
        policy_path.write_text(policy_text(good_fast.url, full.url, extra=EXTRA, routes=ROUTES))
        new = proxy.runtime.policy.reload()
        assert new is not None and new.models["fast"].api_base == good_fast.url
        await proxy.runtime.apply(new)
        good_base = await _fake_requests(good_fast)
        assert proxy.runtime.adaptive.degraded == {("tools", FLAKY): 1.0}  # the history is the tier's

        expected = [DIVERTED, DIVERTED, DIVERTED, GOOD_PROBE] * 17
        got = []
        for _ in range(len(expected)):
            got.append(await d.ask(FLAKY))
        assert got == expected
        assert proxy.runtime.adaptive.degraded == {}
        assert proxy.runtime.adaptive.diverted == {}
        assert await _fake_requests(good_fast) - good_base == 17

        # 4. Back on fast, and no longer escalated.
        assert await d.ask(FLAKY) == ON_FAST
        assert await d.ask(FLAKY, stream=True) == ON_FAST
        assert await _fake_requests(good_fast) - good_base == 19
        stats = await proxy.runtime.store.stats(600)
        flaky = stats["tools"]["fast"][FLAKY]
        assert (flaky["calls"], flaky["mistakes"]) == (26, {"invalid_json": 7})
        assert flaky["mistake_rate"] <= 0.3


async def test_streaming_calls_are_diverted_too(start_fake_: StartFake, proxy_: StartProxy) -> None:
    bad_fast = await start_fake_(FakeConfig(seed=1, bad_tool_rates={FLAKY: 1.0}, bad_kinds=("schema_violation",)))
    full = await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(policy_text(bad_fast.url, full.url, extra=EXTRA, routes=ROUTES))
    proxy.runtime.adaptive.interval = 3600.0
    async with openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0) as client:
        d = Driver(proxy, client)
        for i in range(5):
            assert await d.ask(FLAKY, stream=True) == ("full", "tools", "true", "schema_violation"), i
        assert proxy.runtime.adaptive.degraded == {("tools", FLAKY): 1.0}
        got = [await d.ask(FLAKY, stream=True) for _ in range(4)]
        assert got == [DIVERTED, DIVERTED, DIVERTED, ("full", "tools:probe", "true", "schema_violation")]
        assert await d.ask(GOOD, stream=True) == ON_FAST


async def test_background_refresh_diverts_without_explicit_refresh(start_fake_: StartFake, proxy_: StartProxy) -> None:
    """The app's own loop (every `interval` s) picks the rate up; nothing calls refresh() here."""
    bad_fast = await start_fake_(FakeConfig(seed=1, bad_tool_rates={FLAKY: 1.0}, bad_kinds=("invalid_json",)))
    full = await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(policy_text(bad_fast.url, full.url, extra=EXTRA, routes=ROUTES))
    proxy.runtime.adaptive.interval = 0.05  # from the loop's next turn (within its first 2 s sleep)
    choice = {"type": "function", "function": {"name": FLAKY}}
    async with openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0) as client:
        for _ in range(5):
            raw = await client.chat.completions.with_raw_response.create(
                model="auto", messages=USER, tools=TOOLS, tool_choice=choice
            )
            assert raw.headers["x-router-route"] == "tools"
        for _ in range(100):  # at most 5 s: the loop's first sleep is 2 s, then every 0.05 s
            if proxy.runtime.adaptive.degraded:
                break
            await asyncio.sleep(0.05)
        assert proxy.runtime.adaptive.degraded == {("tools", FLAKY): 1.0}
        raw = await client.chat.completions.with_raw_response.create(
            model="auto", messages=USER, tools=TOOLS, tool_choice=choice
        )
        assert (raw.headers["x-router-tier"], raw.headers["x-router-route"]) == ("full", "tools:adaptive")


@pytest.mark.parametrize("kind", ["missing_tool_call", "text_tool_call"])
async def test_tool_that_is_never_called_is_diverted(start_fake_: StartFake, proxy_: StartProxy, kind: str) -> None:
    """A fast model that answers a pinned tool with prose (or a call written as text) fumbles that
    tool every time: its mistakes name the tool, and the tool must be diverted like any other."""
    bad_fast = await start_fake_(FakeConfig(seed=1, bad_tool_rates={FLAKY: 1.0}, bad_kinds=(kind,)))
    full = await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(policy_text(bad_fast.url, full.url, extra=EXTRA, routes=ROUTES))
    proxy.runtime.adaptive.interval = 3600.0
    async with openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0) as client:
        d = Driver(proxy, client)
        for i in range(5):
            assert await d.ask(FLAKY) == ("full", "tools", "true", kind), i
        stats = await proxy.runtime.store.stats(600)
        flaky = stats["tools"]["fast"][FLAKY]
        assert flaky["mistakes"] == {kind: 5}
        assert flaky["mistake_rate"] == 1.0
        assert proxy.runtime.adaptive.degraded == {("tools", FLAKY): 1.0}
        assert await d.ask(FLAKY) == DIVERTED

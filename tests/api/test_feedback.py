"""Agent-reported errors: a failed tool result for a call the router routed is counted against the tier
that made it, once, and makes the session sticky to the escalation tier for `sticky_calls` calls."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import openai
import pytest

from router.fake import FakeConfig
from tests.api.helpers import TOOLS, get
from tests.conftest import Proxy, policy_text

EXTRA = "escalation: {to: full, after_agent_error: {sticky_calls: 2}}\n"
OPENING: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a weather agent."},
    {"role": "user", "content": "What is the weather in Paris?"},
]


class Agent:
    """One conversation through the proxy: keeps the history like a real agent loop does."""

    def __init__(self, c: openai.AsyncOpenAI, session: str | None) -> None:
        self.c = c
        self.headers = {"x-session-id": session} if session else {}
        self.messages: list[dict[str, Any]] = [dict(m) for m in OPENING]

    async def ask(self) -> tuple[str, str, dict[str, Any]]:
        """Send the history; return (tier, route, the assistant message as the agent stores it)."""
        raw = await self.c.chat.completions.with_raw_response.create(
            model="auto", messages=self.messages, tools=TOOLS, extra_headers=self.headers
        )
        msg = raw.parse().choices[0].message
        assert msg.tool_calls, "the fake answers every tool-offering call with a tool call"
        stored = {"role": "assistant", "content": msg.content, "tool_calls": [tc.model_dump() for tc in msg.tool_calls]}
        return raw.headers["x-router-tier"], raw.headers["x-router-route"], stored

    def answer(self, assistant: dict[str, Any], content: Any, *, arguments: str | None = None, **extra: Any) -> str:
        """Append the assistant turn and the tool result; `arguments` rewrites the call's arguments
        (the fake always asks for Paris, and an identical call would count as a repeated one)."""
        if arguments is not None:
            assistant["tool_calls"][0]["function"]["arguments"] = arguments
        call_id: str = assistant["tool_calls"][0]["id"]
        self.messages += [assistant, {"role": "tool", "tool_call_id": call_id, "content": content, **extra}]
        return call_id


async def start(start_fake_, proxy_) -> Proxy:
    fast = await start_fake_(FakeConfig(seed=1))
    full = await start_fake_(FakeConfig(seed=2))
    return await proxy_(policy_text(fast.url, full.url, extra=EXTRA))


async def agent_errors(proxy: Proxy) -> tuple[dict[str, int], dict[str, int]]:
    """(agent_reported_error per tier, per fast-tier tool)."""
    data = (await get(proxy.url + "/router/stats")).json()
    tiers = {t: c["mistakes"].get("agent_reported_error", 0) for t, c in data["tiers"].items()}
    tools = {t: c["mistakes"].get("agent_reported_error", 0) for t, c in data["tools"].get("fast", {}).items()}
    return tiers, tools


@pytest.mark.parametrize("session", ["sess-header-1", None], ids=["x-session-id", "hash-of-opening"])
async def test_failed_tool_result_is_counted_and_makes_the_session_sticky(
    start_fake_, proxy_, sdk, session: str | None
) -> None:
    proxy = await start(start_fake_, proxy_)
    agent = Agent(sdk(proxy.url), session)
    tier, route, first = await agent.ask()
    assert (tier, route) == ("fast", "simple-tool-call")
    agent.answer(first, "Error: file not found")

    tier, route, second = await agent.ask()  # reports the failure; sticky call 1 of 2
    assert (tier, route) == ("full", "sticky")
    tiers, tools = await agent_errors(proxy)
    assert tiers == {"fast": 1, "full": 0}
    assert tools == {"get_weather": 1}

    agent.answer(second, "Sunny, 21 C", arguments='{"city": "Lyon"}')
    tier, route, third = await agent.ask()  # sticky call 2 of 2; the old failure is not counted again
    assert (tier, route) == ("full", "sticky")
    agent.answer(third, "Rain, 12 C", arguments='{"city": "Brest"}')
    tier, route, _ = await agent.ask()
    assert (tier, route) == ("fast", "simple-tool-call")
    assert await agent_errors(proxy) == (tiers, tools)

    # another conversation is not sticky
    other = Agent(sdk(proxy.url), "another-session" if session else None)
    other.messages[1] = {"role": "user", "content": "And in Rome?"}
    assert (await other.ask())[:2] == ("fast", "simple-tool-call")


async def test_successful_result_is_not_an_error(start_fake_, proxy_, sdk) -> None:
    proxy = await start(start_fake_, proxy_)
    agent = Agent(sdk(proxy.url), "ok-session")
    _, _, first = await agent.ask()
    agent.answer(first, "Sunny, 21 C")
    assert (await agent.ask())[:2] == ("fast", "simple-tool-call")
    assert await agent_errors(proxy) == ({"fast": 0}, {"get_weather": 0})


@pytest.mark.parametrize(
    ("content", "extra"),
    [
        ("done", {"is_error": True}),
        ([{"type": "text", "text": "permission denied", "is_error": True}], {}),
        ("Traceback (most recent call last):\n  File ...", {}),
        ("command failed with exit code 2", {}),
    ],
    ids=["is_error", "part-is_error", "traceback", "exit-code"],
)
async def test_failure_signals(start_fake_, proxy_, sdk, content: Any, extra: dict[str, Any]) -> None:
    proxy = await start(start_fake_, proxy_)
    agent = Agent(sdk(proxy.url), "signals")
    _, _, first = await agent.ask()
    agent.answer(first, content, **extra)
    assert (await agent.ask())[:2] == ("full", "sticky")
    assert await agent_errors(proxy) == ({"fast": 1, "full": 0}, {"get_weather": 1})


async def test_results_for_calls_the_router_did_not_make_are_ignored(start_fake_, proxy_, sdk) -> None:
    proxy = await start(start_fake_, proxy_)
    agent = Agent(sdk(proxy.url), "foreign")
    _, _, first = await agent.ask()
    first["tool_calls"][0]["id"] = "call_made_elsewhere"
    agent.answer(first, "Error: file not found")
    assert (await agent.ask())[:2] == ("fast", "simple-tool-call")
    assert await agent_errors(proxy) == ({"fast": 0}, {"get_weather": 0})


def respelled(arguments: str) -> str:
    """The same arguments as a client may serialise them again: keys reversed, other spacing."""
    return json.dumps(dict(reversed(json.loads(arguments).items())), indent=1)


@pytest.mark.parametrize("spell", [str, respelled], ids=["verbatim", "respelled"])
async def test_a_repeated_call_counts_once(start_fake_, proxy_, sdk, spell: Callable[[str], str]) -> None:
    """The same tool and arguments (as JSON, however spelled) as an earlier turn's call is a failure."""
    proxy = await start(start_fake_, proxy_)
    agent = Agent(sdk(proxy.url), "repeat")
    _, _, first = await agent.ask()
    first_args = spell(first["tool_calls"][0]["function"]["arguments"])
    agent.answer(first, "Sunny, 21 C")  # looked fine...
    tier, _, second = await agent.ask()
    assert tier == "fast"
    assert second["tool_calls"][0]["id"] != first["tool_calls"][0]["id"]
    agent.answer(second, "Sunny, 21 C", arguments=first_args)  # ...but the model asks the very same again
    tier, route, third = await agent.ask()
    assert (tier, route) == ("full", "sticky")
    assert await agent_errors(proxy) == ({"fast": 1, "full": 0}, {"get_weather": 1})
    agent.answer(third, "Rain", arguments='{"city": "Nice"}')
    await agent.ask()
    assert await agent_errors(proxy) == ({"fast": 1, "full": 0}, {"get_weather": 1})


async def test_retrying_a_failed_call_verbatim_does_not_count_the_failure_twice(start_fake_, proxy_, sdk) -> None:
    """Typical agent loop: the call fails, the model tries the very same call again. One failure."""
    proxy = await start(start_fake_, proxy_)
    agent = Agent(sdk(proxy.url), "retry")
    _, _, first = await agent.ask()
    first_args = first["tool_calls"][0]["function"]["arguments"]
    agent.answer(first, "Error: connection refused")
    tier, _, second = await agent.ask()
    assert tier == "full"
    agent.answer(second, "Sunny, 21 C", arguments=first_args)  # the same call again, now it worked
    await agent.ask()
    assert await agent_errors(proxy) == ({"fast": 1, "full": 0}, {"get_weather": 1})


async def test_forced_tier_does_not_use_up_a_sticky_call(start_fake_, proxy_, sdk) -> None:
    fast = await start_fake_(FakeConfig(seed=1))
    full = await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(policy_text(fast.url, full.url, extra=EXTRA + "allow_tier_header: true\n"))
    agent = Agent(sdk(proxy.url), "forced")
    _, _, first = await agent.ask()
    agent.answer(first, "Error: no such city")
    agent.headers["x-router-tier"] = "fast"
    tier, route, second = await agent.ask()  # reports the failure, but the header decides
    assert (tier, route) == ("fast", "header")
    del agent.headers["x-router-tier"]
    agent.answer(second, "Sunny", arguments='{"city": "Lyon"}')
    tiers = []
    for city in ("Nice", "Metz", "Caen"):
        tier, _, answer = await agent.ask()
        tiers.append(tier)
        agent.answer(answer, "Sunny", arguments=f'{{"city": "{city}"}}')
    assert tiers == ["full", "full", "fast"]  # both sticky calls were still there
    assert (await agent_errors(proxy))[0] == {"fast": 1, "full": 0}


async def test_a_resent_request_reports_its_failure_once(start_fake_, proxy_, sdk) -> None:
    proxy = await start(start_fake_, proxy_)
    agent = Agent(sdk(proxy.url), "retrying-client")
    _, _, first = await agent.ask()
    agent.answer(first, "Error: timeout talking to the weather service")
    for _ in range(3):  # the client retries the same request (a lost response, a restart)
        await agent.ask()
    assert await agent_errors(proxy) == ({"fast": 1, "full": 0}, {"get_weather": 1})

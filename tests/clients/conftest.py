"""The agent-framework client suites: real frameworks against the router in front of the fake upstream.

    stack_   factory: ``await stack_(bad=False)`` -> Stack: two fake upstreams that end a tool loop
             (``finish_after=1``: text once the conversation holds a tool result), a real proxy on a
             free port routing tool calls to the fast one; ``bad=True`` breaks 30% of the fast tier's
             tool calls (the full tier stays clean), so the router has something to escalate.
    headers  an httpx event hook's log of the router's response headers (``x-router-*``), for the
             frameworks that take an httpx client.

Each module here drives one framework the way its users do, so a framework's quirk is pinned where it
shows. A framework that is not installed skips its module (``pytest.importorskip``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest

from router.fake import FakeConfig, FakeServer
from tests.api.helpers import get
from tests.conftest import Proxy, policy_text

BAD_RATE = 0.3
# The default routes, with salvage off: a call the fast fake writes as text then escalates like
# every other breakage (salvaged, it would be no mistake at all: tests/api/test_salvage.py).
ROUTES = """
    routes:
      - name: simple-tool-call
        when: {tools: {present: true, max_count: 8}, last_role: [user, tool]}
        use: fast
        salvage: false
      - name: default
        use: full
"""
CALL_TIMEOUT = 20.0  # seconds, each framework call (the fake answers at once)
CITY_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
# Stand-ins for the defects the fake injects, as a client would see them if one slipped through.
LEAKS = ("I will call", '"arguments"', "get_weather_v2")


@dataclass
class Stack:
    fast: FakeServer
    full: FakeServer
    proxy: Proxy

    async def stats(self) -> dict[str, Any]:
        raw = await get(self.proxy.url + "/router/stats")
        assert raw.status == 200, raw.body
        return raw.json()  # type: ignore[no-any-return]

    async def calls(self) -> int:
        """Calls the router answered (every tier's, escalations counted once)."""
        stats = await self.stats()
        return sum(int(r["calls"]) for r in stats["routes"].values())

    async def escalations(self) -> int:
        stats = await self.stats()
        return sum(int(r.get("escalations", 0)) for r in stats["routes"].values())

    async def fast_mistakes(self) -> dict[str, int]:
        stats = await self.stats()
        return dict(stats["tiers"].get("fast", {}).get("mistakes", {}))


@pytest.fixture
async def stack_(
    start_fake_: Callable[..., Awaitable[FakeServer]], proxy_: Callable[..., Awaitable[Proxy]]
) -> Callable[..., Awaitable[Stack]]:
    async def start(*, bad: bool = False, seed: int = 7) -> Stack:
        fast = await start_fake_(FakeConfig(seed=seed, finish_after=1, bad_tool_rate=BAD_RATE if bad else 0.0))
        full = await start_fake_(FakeConfig(seed=seed + 1, finish_after=1))
        proxy = await proxy_(policy_text(fast.url, full.url, extra="escalation: {to: full}\n", routes=ROUTES))
        return Stack(fast, full, proxy)

    return start


@dataclass
class HeaderLog:
    """Response headers of every call a framework made through an httpx client."""

    seen: list[httpx.Headers] = field(default_factory=list)

    async def hook(self, response: httpx.Response) -> None:
        if response.request.method == "POST":
            self.seen.append(response.headers)

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(event_hooks={"response": [self.hook]}, timeout=CALL_TIMEOUT)

    def tiers(self) -> list[str]:
        return [h["x-router-tier"] for h in self.seen]


@pytest.fixture
def headers() -> HeaderLog:
    return HeaderLog()


@dataclass
class Weather:
    """The one tool of every suite: counts its calls and keeps what it was called with."""

    calls: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, city: str) -> str:
        self.calls.append({"city": city})
        return f"Sunny, 21 C in {city}"


def assert_city_args(arguments: str | dict[str, Any]) -> None:
    """A well-formed get_weather call: a JSON object with a string `city`."""
    args = orjson.loads(arguments) if isinstance(arguments, str) else arguments
    assert isinstance(args, dict) and isinstance(args.get("city"), str), arguments


def assert_final_text(text: Any) -> None:
    """The loop ended on the model's own text answer, not on a call the router should have caught."""
    assert isinstance(text, str) and text.strip(), text
    assert not any(leak in text for leak in LEAKS), text

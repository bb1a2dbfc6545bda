"""Tiers that need translation go through litellm: an `anthropic/*` tier against the fake's real
Anthropic Messages endpoint, through the proxy, with the official openai SDK as the client. Such a
tier starts without litellm, which it imports only when a chat or Responses client calls it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import openai
import pytest

from router.fake import FakeConfig
from router.policy.loader import parse_policy
from router.policy.model import Tier
from router.upstream import Upstream, Upstreams, build_upstream
from router.upstream.base import Limits
from tests.api.helpers import TOOLS, fake_requests, post
from tests.conftest import policy_text

ANTHROPIC_KEY = "sk-ant-test-key-for-the-fake"


def anthropic_policy(fast_url: str, fake_root: str) -> str:
    policy = policy_text(fast_url, extra="escalation: {to: full}\n")
    full = f"""  full:
    model: anthropic/claude-test
    api_base: {fake_root}
    api_key: {ANTHROPIC_KEY}
    warm_connections: 0
"""
    head, _, rest = policy.partition("  full:\n")
    rest = rest.split("\n", 5)[-1]  # drop the openai full tier's own lines
    return head + full + rest


async def test_anthropic_tier_answers_through_litellm(start_fake_, proxy_) -> None:
    pytest.importorskip("litellm")
    fast = await start_fake_(FakeConfig(seed=1, bad_tool_rate=1.0, bad_kinds=("invalid_json",)))
    claude = await start_fake_(FakeConfig(seed=2, api_key=ANTHROPIC_KEY))
    proxy = await proxy_(anthropic_policy(fast.url, claude.url.removesuffix("/v1")))
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0)

    text = await client.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": "hello"}]
    )
    assert text.headers["x-router-tier"] == "full"
    assert text.parse().choices[0].message.content

    call = await client.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": "weather in Paris?"}], tools=TOOLS
    )
    assert (call.headers["x-router-tier"], call.headers["x-router-escalated"]) == ("full", "true")
    [tool_call] = call.parse().choices[0].message.tool_calls
    assert tool_call.function.name == "get_weather"

    stream = await client.chat.completions.create(
        model="auto", messages=[{"role": "user", "content": "hello"}], stream=True
    )
    text_parts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
    assert "".join(text_parts)

    seen = await fake_requests(claude.url, path="/v1/messages")
    assert seen and all(r["headers"].get("x-api-key") == ANTHROPIC_KEY for r in seen)
    assert all(r["body"]["model"] == "claude-test" for r in seen)


def litellm_imported_at_start(policy: Path) -> bool:
    """Whether starting the app on `policy` (its lifespan, in a fresh interpreter) imports litellm."""
    code = (
        "import sys, asyncio\n"
        "from router.app import create_app\n"
        "from router.settings import Settings\n"
        f"app = create_app(Settings(policy={str(policy)!r}, warm_up=False, reload_policy=False))\n"
        "async def main():\n"
        "    async with app.router.lifespan_context(app):\n"
        "        pass\n"
        "asyncio.run(main())\n"
        "print('litellm' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.strip().splitlines()[-1] == "True"


def test_litellm_is_not_imported_for_openai_compatible_tiers(tmp_path) -> None:
    """Start-up and the OpenAI-compatible path never pay for litellm."""
    policy = tmp_path / "p.yaml"
    policy.write_text(policy_text("http://127.0.0.1:9/v1"))
    assert not litellm_imported_at_start(policy)


def anthropic_fast(fast_root: str, full_url: str) -> str:
    """fast is `anthropic/claude-test` (tool calls are routed there), full an OpenAI-compatible tier."""
    policy = policy_text(full_url, extra="escalation: {to: full}\n")
    openai_fast = f"    model: openai/fast-model\n    api_base: {full_url}\n"
    assert openai_fast in policy
    return policy.replace(openai_fast, f"    model: anthropic/claude-test\n    api_base: {fast_root}\n"
                                       f"    api_key: {ANTHROPIC_KEY}\n")  # fmt: skip


async def test_an_anthropic_tier_starts_and_serves_messages_without_litellm(monkeypatch, start_fake_, proxy_) -> None:
    """No litellm (importing it fails, as when the extra is not installed): the tier starts, answers
    Messages clients natively, and a chat client it cannot take gets a 502 naming the extra, or is
    escalated to a tier that can take it; its breaker counts none of that."""
    monkeypatch.setitem(sys.modules, "litellm", None)
    claude = await start_fake_(FakeConfig(seed=3, api_key=ANTHROPIC_KEY))
    full = await start_fake_(FakeConfig(seed=4))
    proxy = await proxy_(anthropic_policy(full.url, claude.url.removesuffix("/v1")))  # full: anthropic
    ask = [{"role": "user", "content": "hello"}]
    for _ in range(3):
        chat = await post(proxy.url + "/chat/completions", {"model": "auto", "messages": ask})
        assert (chat.status, chat.headers["x-router-tier"]) == (502, "full"), chat.body
        error = chat.json()["error"]
        assert error["code"] == "extra_missing" and "pip install 'agent-router[litellm]'" in error["message"]
    native = await post(proxy.base + "/v1/messages", {"model": "auto", "max_tokens": 32, "messages": ask})
    assert (native.status, native.headers["x-router-tier"]) == (200, "full"), native.body  # its breaker is closed

    other = await proxy_(anthropic_fast(claude.url.removesuffix("/v1"), full.url))
    chat = await post(other.url + "/chat/completions", {"model": "auto", "messages": ask, "tools": TOOLS})
    assert chat.status == 200, chat.body
    assert (chat.headers["x-router-tier"], chat.headers["x-router-escalated"]) == ("full", "true")


async def test_a_failed_start_closes_what_it_opened(monkeypatch, start_fake_) -> None:
    """A tier that cannot start (a litellm-only provider without litellm) fails the start, and the
    pools the other tiers opened meanwhile are closed (no "Unclosed client session" left behind)."""
    monkeypatch.setitem(sys.modules, "litellm", None)
    claude = await start_fake_(FakeConfig(seed=5, api_key=ANTHROPIC_KEY))
    policy = parse_policy(
        f"""version: 1
models:
  fast:
    model: anthropic/claude-test
    api_base: {claude.url.removesuffix("/v1")}
    api_key: {ANTHROPIC_KEY}
  full:
    model: gemini/gemini-test
routes: [{{name: default, use: fast}}]
store: memory://
""",
        "p.yaml",
    )
    built: list[Upstream] = []

    def build(name: str, tier: Tier, limits: Limits | None) -> Upstream:
        built.append(build_upstream(name, tier, limits))
        return built[-1]

    upstreams = Upstreams(build=build)
    with pytest.raises(RuntimeError, match=r"needs litellm: pip install 'agent-router\[litellm\]'"):
        await upstreams.apply(policy)
    pooled: Any = next(c for c in built if c.tier == "fast")
    assert pooled._session is None  # closed
    await upstreams.close()


def test_litellm_is_not_imported_for_a_tier_serving_messages(tmp_path) -> None:
    """An `anthropic/*` tier's start-up does not pay for litellm either."""
    policy = tmp_path / "p.yaml"
    claude = "  full:\n    model: anthropic/claude-test\n    api_base: http://127.0.0.1:9\n"
    policy.write_text(policy_text("http://127.0.0.1:9/v1").replace(
        "  full:\n    model: openai/full-model\n    api_base: http://127.0.0.1:9/v1\n", claude))  # fmt: skip
    assert not litellm_imported_at_start(policy)

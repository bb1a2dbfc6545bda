"""Tiers that need translation go through litellm: an `anthropic/*` tier against the fake's real
Anthropic Messages endpoint, through the proxy, with the official openai SDK as the client."""

from __future__ import annotations

import subprocess
import sys

import openai

from router.fake import FakeConfig
from tests.api.helpers import TOOLS, fake_requests
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


def test_litellm_is_not_imported_for_openai_compatible_tiers(tmp_path) -> None:
    """Start-up and the OpenAI-compatible path never pay for litellm."""
    policy = tmp_path / "p.yaml"
    policy.write_text(policy_text("http://127.0.0.1:9/v1"))
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
    assert out.stdout.strip().splitlines()[-1] == "False"

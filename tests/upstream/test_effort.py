"""Thinking off beside an effort level (router/upstream/effort.py), as Claude Code's subagents send it:
an `anthropic/*` tier is sent `thinking: {type: "disabled"}` alone, and a tier that refuses the effort
level with thinking off gets the request once more without it — remembered for the next call — before
anything reached the client; a chat tier never sees either field. Real servers: the proxy, fake
upstreams behaving as Anthropic and as DeepSeek's Anthropic API, the anthropic SDK."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from router.fake import FakeConfig, FakeServer
from tests.api.helpers import USER, fake_requests, root
from tests.conftest import Proxy

SUBAGENT: dict[str, Any] = {  # what Claude Code's subagents send: thinking off, the session's effort and display
    "thinking": {"type": "disabled", "display": "summarized"},
    "output_config": {"effort": "xhigh"},
}


def policy(upstream: FakeServer, model: str = "anthropic/claude-opus-5") -> str:
    return f"""
version: 1
models:
  opus:
    model: {model}
    api_base: {root(upstream.url) if model.startswith("anthropic/") else upstream.url}
    api_key: sk-ant-effort-test
    warm_connections: 0
    timeouts: {{connect: 2, first_token: 5, total: 20}}
routes:
  - name: default
    use: opus
store: memory://
"""


async def ask(proxy: Proxy, stream: bool, extra: dict[str, Any]) -> tuple[dict[str, str], str]:
    """A Messages call with `extra` body fields: (headers, the answer's text or its events)."""
    async with anthropic.AsyncAnthropic(base_url=proxy.base, api_key="x", max_retries=0) as sdk:
        if stream:
            async with sdk.messages.with_streaming_response.create(
                model="claude-opus-5", max_tokens=32, messages=USER, stream=True, extra_body=extra
            ) as raw:
                return dict(raw.headers), (await raw.read()).decode()
        response = await sdk.messages.with_raw_response.create(
            model="claude-opus-5", max_tokens=32, messages=USER, extra_body=extra
        )
        message = await response.parse()
        return dict(response.headers), message.content[-1].text  # type: ignore[union-attr]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_an_effort_refused_with_thinking_off_is_sent_again_without_it(start_fake_, proxy_, stream: bool) -> None:
    claude = await start_fake_(FakeConfig(seed=1, effort_without_thinking="high"))  # as Anthropic's newest models
    proxy = await proxy_(policy(claude))
    headers, answer = await ask(proxy, stream, SUBAGENT)
    assert answer and (headers["x-router-tier"], headers["x-router-mistakes"]) == ("opus", "")
    refused, again = await fake_requests(claude.url, path="/v1/messages")
    assert refused["body"]["thinking"] == {"type": "disabled"}  # `display` left out: the API takes `type` alone
    assert refused["body"]["output_config"] == {"effort": "xhigh"}
    assert "output_config" not in again["body"]  # the model's default effort
    assert {k: v for k, v in again["body"].items() if k != "output_config"} == {
        k: v for k, v in refused["body"].items() if k != "output_config"
    }  # the same request otherwise

    headers, answer = await ask(proxy, stream, SUBAGENT)  # the tier's refusal is remembered: one request
    assert answer
    later = (await fake_requests(claude.url, path="/v1/messages"))[2:]
    assert len(later) == 1 and "output_config" not in later[0]["body"]
    _, answer = await ask(proxy, stream, {**SUBAGENT, "output_config": {"effort": "high"}})  # a level it takes
    assert (await fake_requests(claude.url, path="/v1/messages"))[-1]["body"]["output_config"] == {"effort": "high"}
    assert answer


async def test_an_upstream_that_takes_no_effort_with_thinking_off(start_fake_, proxy_) -> None:
    deepseek = await start_fake_(FakeConfig(seed=2, effort_without_thinking="none"))  # DeepSeek's Anthropic API
    proxy = await proxy_(policy(deepseek, "anthropic/deepseek-v4-flash"))
    subagent = {"thinking": {"type": "disabled"}, "output_config": {"effort": "max"}}
    _, answer = await ask(proxy, False, subagent)
    assert answer
    refused, again = await fake_requests(deepseek.url, path="/v1/messages")
    assert refused["body"]["output_config"] == {"effort": "max"} and "output_config" not in again["body"]
    _, answer = await ask(proxy, False, {"thinking": {"type": "adaptive"}, "output_config": {"effort": "max"}})
    assert answer  # thinking on: the effort goes as it came, and is taken
    assert (await fake_requests(deepseek.url, path="/v1/messages"))[-1]["body"]["output_config"] == {"effort": "max"}


async def test_a_refusal_of_something_else_is_the_calls_failure(start_fake_, proxy_) -> None:
    claude = await start_fake_(FakeConfig(seed=3))  # takes the effort; refuses the speed
    proxy = await proxy_(policy(claude))
    async with anthropic.AsyncAnthropic(base_url=proxy.base, api_key="x", max_retries=0) as sdk:
        with pytest.raises(anthropic.BadRequestError):
            await sdk.messages.create(model="claude-opus-5", max_tokens=32, messages=USER,
                                      extra_body={**SUBAGENT, "speed": "warp"})  # fmt: skip
    sent = await fake_requests(claude.url, path="/v1/messages")
    assert sent and all(r["body"]["output_config"] == {"effort": "xhigh"} for r in sent)  # never sent without it


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_chat_tier_gets_neither_field(start_fake_, proxy_, stream: bool) -> None:
    local = await start_fake_(FakeConfig(seed=4))
    proxy = await proxy_(policy(local, "openai/qwen2.5-0.5b"))
    _, answer = await ask(proxy, stream, SUBAGENT)
    assert answer
    [sent] = await fake_requests(local.url)
    assert "thinking" not in sent["body"] and "output_config" not in sent["body"]

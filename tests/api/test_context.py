"""Context windows in the client's own terms, end to end: real fake upstreams with a context as
llama-server has one (`FakeConfig.n_ctx`), the real router, the openai and anthropic SDKs.

GET /v1/models lists each tier once with its window (OpenAI's list, or Anthropic's to its clients),
then the same under the names Claude Code's model picker keeps (`claude-router`, `claude-router-<tier>`);
POST /v1/messages/count_tokens counts with the tokenizer of the tier the call would go to; a prompt
too long for one tier goes to one it fits, else the client gets its own API's context error.
"""

from __future__ import annotations

import re
from typing import Any

import anthropic
import openai
import pytest

from router.fake import FakeConfig
from tests.api.helpers import fake_requests, get
from tests.conftest import policy_text

FAST_CTX, FULL_CTX = 128, 1024
ESCALATE = "escalation: {to: full}\n"
# the fake counts words and punctuation marks; the router estimates characters / 4:
PUNCTUATED = "a." * 100  # 200 characters: ~50 tokens to the router, ~200 to the fake — too long for fast
WORDY = "word " * 100  # 500 characters: ~125 tokens to the router, ~100 to the fake


async def tiers(start_fake_: Any, proxy_: Any, extra: str = ESCALATE, **policy: Any) -> Any:
    fast = await start_fake_(FakeConfig(n_ctx=FAST_CTX, model="fast-model"))
    full = await start_fake_(FakeConfig(n_ctx=FULL_CTX, model="full-model"))
    proxy = await proxy_(policy_text(fast.url, full.url, extra=extra, **policy))
    await proxy.runtime.windows.settled(5)
    return fast, full, proxy


DISCOVERED = ["claude-router", "claude-router-fast", "claude-router-full"]  # policy `discovery`'s default names
CLAUDE_CODE_KEEPS = re.compile("(claude|anthropic)", re.I)  # its gateway discovery's filter (2.1.332)


def anthropic_sdk(proxy: Any) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=proxy.base, api_key="x", max_retries=0)


# ------------------------------------------------------------------------------ the model list


async def test_models_list_each_tier_once_with_its_context_window(start_fake_, proxy_, sdk) -> None:
    extra = ESCALATE + 'aliases: {"*": auto, "router-fast": fast, "fast": fast, "my-agent": auto}\n'
    _, _, proxy = await tiers(start_fake_, proxy_, extra=extra)
    page = await sdk(proxy.url).models.list()
    listed = {m.id: m.model_extra for m in page.data}
    assert [m.id for m in page.data] == ["fast", "full", "auto", *DISCOVERED]  # an alias is not a model of its own
    assert listed["fast"] == {"context_window": FAST_CTX, "aliases": ["router-fast"]}
    assert listed["claude-router-fast"] == {"context_window": FAST_CTX, "aliases": []}
    assert listed["full"] == {"context_window": FULL_CTX, "aliases": []}
    assert listed["auto"] == {"context_window": FULL_CTX, "aliases": ["my-agent"]}  # the largest of its tiers
    one = await sdk(proxy.url).models.retrieve("fast")
    assert one.model_extra["context_window"] == FAST_CTX
    with pytest.raises(openai.NotFoundError):
        await sdk(proxy.url).models.retrieve("router-fast")


async def test_anthropic_clients_get_anthropics_model_list(start_fake_, proxy_) -> None:
    _, _, proxy = await tiers(start_fake_, proxy_)
    client = anthropic_sdk(proxy)
    page = await client.models.list()
    assert [m.id for m in page.data] == ["fast", "full", "auto", *DISCOVERED]
    assert all(m.type == "model" and m.display_name == m.id for m in page.data[:3])
    assert [m.display_name for m in page.data[3:]] == ["agent-router auto", "agent-router fast", "agent-router full"]
    assert [getattr(m, "max_input_tokens", None) or m.model_extra.get("max_input_tokens") for m in page.data] == [
        FAST_CTX, FULL_CTX, FULL_CTX, FULL_CTX, FAST_CTX, FULL_CTX,
    ]  # fmt: skip
    raw = await get(proxy.url + "/models?limit=1000", {"anthropic-version": "2023-06-01"})  # Claude Code's request
    ends = (raw.json()["has_more"], raw.json()["first_id"], raw.json()["last_id"])
    assert ends == (False, "fast", "claude-router-full")
    with pytest.raises(anthropic.NotFoundError):
        await client.models.retrieve("nope")


async def test_claude_codes_model_picker_keeps_the_routes_and_tiers(start_fake_, proxy_) -> None:
    """Claude Code keeps only ids matching /(claude|anthropic)/i of a gateway's list: the router lists
    `auto` and every tier under such names too, and a call naming one goes where it says."""
    _, _, proxy = await tiers(start_fake_, proxy_)
    raw = await get(proxy.url + "/models?limit=1000", {"anthropic-version": "2023-06-01"})
    kept = [m["id"] for m in raw.json()["data"] if CLAUDE_CODE_KEEPS.search(m["id"])]
    assert kept == DISCOVERED
    client = anthropic_sdk(proxy)
    for name, tier in (("claude-router-fast", "fast"), ("claude-router-full", "full"), ("claude-router", "full")):
        answer = await client.messages.with_raw_response.create(
            model=name, max_tokens=16, messages=[{"role": "user", "content": "Hello"}]
        )
        assert answer.headers["x-router-tier"] == tier, name  # `claude-router` is auto: no tools, so full
        assert answer.headers["x-router-route"] == ("default" if name == "claude-router" else f"alias:{name}")


@pytest.mark.parametrize(
    ("discovery", "listed"),
    [("{prefix: anthropic-gw}", ["anthropic-gw", "anthropic-gw-fast", "anthropic-gw-full"]), ("{prefix: null}", [])],
)
async def test_the_discovered_names_are_the_policys(start_fake_, proxy_, sdk, discovery, listed) -> None:
    _, _, proxy = await tiers(start_fake_, proxy_, extra=ESCALATE + f"discovery: {discovery}\n")
    assert [m.id for m in (await sdk(proxy.url).models.list()).data] == ["fast", "full", "auto", *listed]


async def test_a_window_the_server_does_not_report_is_null_unless_the_policy_says(start_fake_, proxy_, sdk) -> None:
    plain = await start_fake_()  # reports no context
    text = policy_text(plain.url).replace("    model: openai/full-model\n", "    model: openai/full-model\n"
                                          "    context_window: 8192\n")  # fmt: skip
    proxy = await proxy_(text)
    listed = {m.id: m.model_extra["context_window"] for m in (await sdk(proxy.url).models.list()).data}
    assert listed == {"fast": None, "full": 8192, "auto": None} | {name: None for name in DISCOVERED} | {
        "claude-router-full": 8192
    }


# ------------------------------------------------------------------------------ count_tokens


async def test_count_tokens_counts_with_the_tokenizer_of_the_tier_the_call_goes_to(start_fake_, proxy_) -> None:
    fast, _, proxy = await tiers(start_fake_, proxy_)
    client = anthropic_sdk(proxy)
    ask: list[Any] = [{"role": "user", "content": "Hello there, how are you today?"}]
    counted = await client.messages.with_raw_response.count_tokens(model="auto", messages=ask, system="Be brief.")
    assert (counted.headers["x-router-tier"], counted.headers["x-router-count"]) == ("full", "tokenizer")
    answer = await client.messages.create(model="auto", max_tokens=16, messages=ask, system="Be brief.")
    assert (await counted.parse()).input_tokens == answer.usage.input_tokens  # what the tier itself counts
    assert await fake_requests(fast.url) == []  # counting called no model


async def test_count_tokens_estimates_for_a_tier_without_a_tokenizer(start_fake_, proxy_) -> None:
    plain = await start_fake_()
    proxy = await proxy_(policy_text(plain.url))
    client = anthropic_sdk(proxy)
    ask: list[Any] = [{"role": "user", "content": "x" * 400}]
    counted = await client.messages.with_raw_response.count_tokens(model="auto", messages=ask)
    assert counted.headers["x-router-count"] == "estimate"
    assert (await counted.parse()).input_tokens == 100  # characters / 4
    assert await fake_requests(plain.url) == []


async def test_count_tokens_decides_as_a_call_does(start_fake_, proxy_) -> None:
    """A prompt too long for the routed tier is counted by the tier it would go to instead."""
    tools = [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    _, _, proxy = await tiers(start_fake_, proxy_)
    client = anthropic_sdk(proxy)
    short = await client.messages.with_raw_response.count_tokens(
        model="auto", messages=[{"role": "user", "content": "Weather?"}], tools=tools
    )
    long = await client.messages.with_raw_response.count_tokens(
        model="auto", messages=[{"role": "user", "content": WORDY}], tools=tools
    )
    assert (short.headers["x-router-tier"], short.headers["x-router-route"]) == ("fast", "simple-tool-call")
    assert (long.headers["x-router-tier"], long.headers["x-router-route"]) == ("full", "simple-tool-call")


# ------------------------------------------------------------------------------ a prompt too long


async def test_a_prompt_known_too_long_for_a_tier_goes_to_one_it_fits(start_fake_, proxy_, sdk) -> None:
    fast, full, proxy = await tiers(start_fake_, proxy_)
    tools = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]
    raw = await sdk(proxy.url).chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": WORDY}], tools=tools
    )
    assert (raw.headers["x-router-tier"], raw.headers["x-router-escalated"]) == ("full", "false")
    assert raw.headers["x-router-route"] == "simple-tool-call"
    assert await fake_requests(fast.url) == [] and len(await fake_requests(full.url)) == 1


async def test_a_tiers_context_error_sends_the_call_on_to_a_larger_tier(start_fake_, proxy_, sdk) -> None:
    fast, full, proxy = await tiers(start_fake_, proxy_)
    tools = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]
    for stream in (False, True):
        raw = await sdk(proxy.url).chat.completions.with_raw_response.create(
            model="auto", messages=[{"role": "user", "content": PUNCTUATED + str(stream)}], tools=tools, stream=stream
        )
        assert (raw.headers["x-router-tier"], raw.headers["x-router-escalated"]) == ("full", "true")
        assert raw.headers["x-router-mistakes"] == ""  # not the fast tier's mistake
    metrics = proxy.runtime.metrics
    assert metrics.context_exceeded.labels("fast", "escalated")._value.get() == 2
    assert proxy.runtime.breakers.snapshot().get("fast", {}).get("failures", 0) == 0
    assert len(await fake_requests(fast.url)) == len(await fake_requests(full.url)) == 2


async def test_openai_clients_get_context_length_exceeded(start_fake_, proxy_, sdk) -> None:
    _, _, proxy = await tiers(start_fake_, proxy_)
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as info:
            await sdk(proxy.url).chat.completions.create(
                model="auto", messages=[{"role": "user", "content": "a." * 1000}], stream=stream
            )
        assert info.value.code == "context_length_exceeded" and info.value.type == "invalid_request_error"
        assert f"maximum context length is {FULL_CTX} tokens" in info.value.message
        assert info.value.response.headers.get("x-should-retry") == "false"


async def test_anthropic_clients_get_prompt_is_too_long(start_fake_, proxy_) -> None:
    """Claude Code compacts its conversation on this error, its message in Anthropic's words."""
    _, full, proxy = await tiers(start_fake_, proxy_)
    client = anthropic_sdk(proxy)
    ask: list[Any] = [{"role": "user", "content": "a." * 1000}]
    counted = (await client.messages.count_tokens(model="auto", messages=ask)).input_tokens
    for stream in (False, True):
        with pytest.raises(anthropic.BadRequestError) as info:
            await client.messages.create(model="auto", max_tokens=16, messages=ask, stream=stream)
        body = info.value.body
        assert isinstance(body, dict) and body["error"]["type"] == "invalid_request_error"
        assert body["error"]["message"] == f"prompt is too long: {counted} tokens > {FULL_CTX} maximum"
    assert len(await fake_requests(full.url, "/v1/chat/completions")) == 2

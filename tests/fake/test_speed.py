"""The fake upstream's fast modes (router/fake/speed.py): Anthropic's `speed` with its beta header,
fast-capable models, the fast-mode rate limit and `usage.speed`; OpenAI's `service_tier` answered.
Real servers, the official SDKs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anthropic
import openai
import pytest

from router.fake import FakeServer
from router.fake.betas import beta_refusal
from router.fake.speed import FAST_MODE_BETA

USER: Any = [{"role": "user", "content": "Refactor this module."}]
BETA = {"anthropic-beta": f"other-beta-2025-01-01, {FAST_MODE_BETA}"}

Factory = Callable[..., Awaitable[FakeServer]]


def claude(server: FakeServer) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=server.url.removesuffix("/v1"), api_key="x", max_retries=0)


async def test_fast_mode_is_taken_with_its_beta_for_fast_models_only(start_fake_: Factory) -> None:
    server = await start_fake_(fast_models=("claude-opus-*",))
    async with claude(server) as sdk:
        fast = await sdk.messages.create(
            model="claude-opus-4-6", max_tokens=16, messages=USER, speed="fast", extra_headers=BETA
        )
        assert fast.usage.speed == "fast"
        async with sdk.messages.stream(
            model="claude-opus-4-6", max_tokens=16, messages=USER, speed="fast", extra_headers=BETA
        ) as stream:
            assert (await stream.get_final_message()).usage.speed == "fast"
        standard = await sdk.messages.create(model="claude-opus-4-6", max_tokens=16, messages=USER, extra_headers=BETA)
        assert standard.usage.speed == "standard"  # the beta without `speed`: standard, and said so
        plain = await sdk.messages.create(model="claude-opus-4-6", max_tokens=16, messages=USER)
        assert plain.usage.speed is None  # neither: the answer as before

        with pytest.raises(anthropic.BadRequestError) as unavailable:
            await sdk.messages.create(model="claude-haiku-4", max_tokens=16, messages=USER, speed="fast",
                                      extra_headers=BETA)  # fmt: skip
        error = unavailable.value.body["error"]  # type: ignore[index]
        assert error["type"] == "invalid_request_error" and "Fast mode is not available" in error["message"]
        with pytest.raises(anthropic.BadRequestError) as no_beta:
            await sdk.messages.create(model="claude-opus-4-6", max_tokens=16, messages=USER, speed="fast")
        assert FAST_MODE_BETA in no_beta.value.body["error"]["message"]  # type: ignore[index]
        with pytest.raises(anthropic.BadRequestError):
            await sdk.messages.create(model="claude-opus-4-6", max_tokens=16, messages=USER,
                                      extra_body={"speed": "warp"}, extra_headers=BETA)  # fmt: skip


async def test_the_fast_mode_rate_limit_answers_429_and_draws_nothing(start_fake_: Factory) -> None:
    limited, free = await start_fake_(seed=3, fast_rate_limit=1), await start_fake_(seed=3)
    async with claude(limited) as sdk, claude(free) as reference:
        first = await sdk.messages.create(model="m", max_tokens=16, messages=USER, speed="fast", extra_headers=BETA)
        with pytest.raises(anthropic.RateLimitError) as limit:
            await sdk.messages.create(model="m", max_tokens=16, messages=USER, speed="fast", extra_headers=BETA)
        assert limit.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
        assert 1 <= int(limit.value.response.headers["retry-after"]) <= 60
        standard = await sdk.messages.create(model="m", max_tokens=16, messages=USER, extra_headers=BETA)
        assert standard.usage.speed == "standard"  # the limit is fast mode's own
        expected = [await reference.messages.create(model="m", max_tokens=16, messages=USER) for _ in range(2)]
    assert [first.content, standard.content] == [e.content for e in expected]  # the refusal drew nothing


async def test_openai_answers_say_the_service_tier_that_served_them(start_fake_: Factory) -> None:
    server = await start_fake_()
    async with openai.AsyncOpenAI(base_url=server.url, api_key="x", max_retries=0) as sdk:
        chat = await sdk.chat.completions.create(model="m", messages=USER, service_tier="priority")
        assert chat.service_tier == "priority"
        stream = await sdk.chat.completions.create(model="m", messages=USER, service_tier="auto", stream=True)
        assert {chunk.service_tier async for chunk in stream} == {"default"}
        assert (await sdk.chat.completions.create(model="m", messages=USER)).service_tier is None
        response = await sdk.responses.create(model="m", input="hi", service_tier="priority")
        assert response.service_tier == "priority"
        async with sdk.responses.stream(model="m", input="hi", service_tier="flex") as events:
            assert (await events.get_final_response()).service_tier == "flex"


def test_a_field_a_beta_admits_is_refused_without_the_beta() -> None:
    body = {"model": "claude-opus-4-6", "messages": [], "context_management": {"edits": []}}
    refusal = beta_refusal(body, {})
    assert refusal is not None and b"context_management: Extra inputs are not permitted" in refusal
    assert beta_refusal(body, {"anthropic-beta": "claude-code-20250219, context-management-2025-06-27"}) is None
    assert beta_refusal({"model": "m", "messages": []}, {}) is None

"""litellm as a client of the router: `litellm.acompletion` with tools, JSON and streamed, through its
`openai/` provider (the router's /v1/chat/completions) and its `anthropic/` provider (the router's
/v1/messages, litellm translating both ways). Each run is a tool round trip — the call, the tool's
result sent back, the model's text answer — and a fast tier that breaks 30% of its calls never shows.

(litellm is also what the router itself uses for tiers that need translation; that side is tested in
tests/upstream/test_litellm_adapter.py.)
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from tests.clients.conftest import CALL_TIMEOUT, CITY_SCHEMA, Stack, Weather, assert_city_args, assert_final_text

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never fetch litellm's price list
litellm = pytest.importorskip("litellm", reason="litellm is not installed (the `litellm` extra pins it)")

pytestmark = [  # litellm's own, on import and on every response it builds
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211"),
    pytest.mark.filterwarnings("ignore:Item 'summary' on TypedDict:UserWarning"),
]
PROVIDERS = ("openai", "anthropic")
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": CITY_SCHEMA}}]
PROMPT = "What is the weather in Paris? Use the tool."


@pytest.fixture(autouse=True)
def _quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    """litellm prints a provider list when it has no price for a model ("auto"): noise, not an error."""
    monkeypatch.setattr(litellm, "suppress_debug_info", True)


def where(stack: Stack, provider: str) -> dict[str, Any]:
    """litellm's arguments for a provider: the Anthropic SDK's base URL has no /v1."""
    base = stack.proxy.url if provider == "openai" else stack.proxy.base
    return {"model": f"{provider}/auto", "api_base": base, "api_key": "x", "num_retries": 0, "timeout": CALL_TIMEOUT}


async def complete(args: dict[str, Any], messages: list[dict[str, Any]], streamed: bool) -> Any:
    """One call; a stream is rebuilt into a response with litellm's own chunk builder."""
    kwargs = {**args, "messages": messages, "tools": TOOLS, "max_tokens": 200}
    if not streamed:
        return await asyncio.wait_for(litellm.acompletion(**kwargs), CALL_TIMEOUT)

    async def gather() -> list[Any]:
        stream = await litellm.acompletion(**kwargs, stream=True, stream_options={"include_usage": True})
        return [chunk async for chunk in stream]

    chunks = await asyncio.wait_for(gather(), CALL_TIMEOUT)
    assert len({c.id for c in chunks}) == 1, "a stream's chunks carry one id"
    return litellm.stream_chunk_builder(chunks, messages=messages)


async def tool_loop(args: dict[str, Any], weather: Weather, streamed: bool) -> tuple[Any, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
    first = await complete(args, messages, streamed)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls, choice
    calls = [
        {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
        for c in choice.message.tool_calls
    ]
    messages.append({"role": "assistant", "content": choice.message.content, "tool_calls": calls})
    for call in choice.message.tool_calls:
        assert call.function.name == "get_weather" and call.id, call
        assert_city_args(call.function.arguments)
        city = litellm.json.loads(call.function.arguments)["city"]
        messages.append({"role": "tool", "tool_call_id": call.id, "content": weather(city)})
    final = await complete(args, messages, streamed)
    assert final.choices[0].finish_reason == "stop" and not final.choices[0].message.tool_calls, final
    assert_final_text(final.choices[0].message.content)
    for response in (first, final):
        assert response.usage.prompt_tokens > 0 and response.usage.completion_tokens > 0, response.usage
    return first, final


def router_headers(response: Any) -> dict[str, str]:
    """The router's headers as litellm keeps them (prefixed `llm_provider-`)."""
    headers = response._hidden_params.get("additional_headers") or {}
    prefix = "llm_provider-x-router-"
    return {k.removeprefix("llm_provider-"): v for k, v in headers.items() if k.startswith(prefix)}


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_tool_round_trip(stack_, provider: str, streamed: bool) -> None:
    stack = await stack_()
    weather = Weather()
    first, final = await tool_loop(where(stack, provider), weather, streamed)
    assert weather.calls == [{"city": "Paris"}]
    if not streamed:
        for response in (first, final):
            assert router_headers(response)["x-router-tier"] == "fast"
            assert router_headers(response)["x-router-escalated"] == "false"
    stats = await stack.stats()
    assert stats["tiers"]["fast"]["calls"] == 2 and "full" not in stats["tiers"], stats


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_never_sees_a_malformed_call(stack_, provider: str, streamed: bool) -> None:
    stack = await stack_(bad=True)
    weather = Weather()
    escalated = 0
    for _ in range(6):
        first, _final = await tool_loop(where(stack, provider), weather, streamed)
        escalated += not streamed and router_headers(first)["x-router-escalated"] == "true"
    assert len(weather.calls) == 6
    mistakes = await stack.fast_mistakes()
    assert mistakes, "the fast tier never broke a call: the test proved nothing"
    assert await stack.escalations() == sum(mistakes.values())
    if not streamed:
        assert escalated == sum(mistakes.values())

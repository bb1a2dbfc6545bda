"""The OpenAI Agents SDK (`openai-agents`) through the router: an Agent with a function tool, run by
`Runner.run` and `Runner.run_streamed` through each of its OpenAI model classes — Responses over HTTP,
chat completions, and Responses over WebSocket (`OpenAIResponsesWSModel`, which sends
`response.create` frames on one connection).

Each run makes a tool round trip (the tool really runs), ends on the model's own text answer, and the
router's stats count the calls. With the fast tier breaking 30% of its tool calls, the runs still never
see a malformed call: the router escalates them to the clean full tier.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import openai
import pytest

from tests.api.helpers import fake_requests
from tests.clients.conftest import CALL_TIMEOUT, HeaderLog, Stack, Weather, assert_city_args, assert_final_text

agents = pytest.importorskip("agents", reason="openai-agents is not installed (the `dev` extra pins it)")

MODELS = ("responses", "chat", "responses_ws")
PROMPT = "What is the weather in Paris? Use the tool."


@pytest.fixture(autouse=True)
def _no_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Never export traces to OpenAI (the SDK does by default)."""
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
    agents.set_tracing_disabled(True)


@pytest.fixture
async def model_of(headers: HeaderLog) -> AsyncIterator[Callable[[str, str], Any]]:
    """`model_of(kind, url)`: the SDK's model class for `kind` on an openai client pointed at `url`."""
    clients: list[openai.AsyncOpenAI] = []
    ws_models: list[Any] = []

    def make(kind: str, url: str) -> Any:
        client = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0, http_client=headers.client())
        clients.append(client)
        if kind == "chat":
            return agents.OpenAIChatCompletionsModel(model="auto", openai_client=client)
        if kind == "responses":
            return agents.OpenAIResponsesModel(model="auto", openai_client=client)
        model = agents.OpenAIResponsesWSModel(model="auto", openai_client=client)
        ws_models.append(model)
        return model

    yield make
    for model in ws_models:
        await model.close()
    for client in clients:
        await client.close()


def weather_agent(model: Any) -> tuple[Any, Weather]:
    weather = Weather()

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Weather for a city."""
        return weather(city)

    # The chat model asks a stream's usage only from OpenAI's own base URL unless told to.
    settings = agents.ModelSettings(include_usage=True)
    instructions = "Answer with the tool's help."
    agent = agents.Agent(
        name="forecaster", instructions=instructions, tools=[get_weather], model=model, model_settings=settings
    )
    return agent, weather


def assert_tool_round_trip(result: Any, weather: Weather) -> None:
    """At least one call made and executed, every call well formed, a text answer at the end."""
    calls = [item.raw_item for item in result.new_items if item.type == "tool_call_item"]
    outputs = [item for item in result.new_items if item.type == "tool_call_output_item"]
    assert calls and len(outputs) == len(calls) == len(weather.calls), result.new_items
    for call in calls:
        assert call.name == "get_weather"
        assert_city_args(call.arguments)
    assert all(isinstance(c["city"], str) for c in weather.calls)
    assert_final_text(result.final_output)


async def run(agent: Any, streamed: bool, **options: Any) -> Any:
    if not streamed:
        return await asyncio.wait_for(agents.Runner.run(agent, PROMPT, max_turns=6, **options), CALL_TIMEOUT)
    result = agents.Runner.run_streamed(agent, PROMPT, max_turns=6, **options)
    kinds: set[str] = set()

    async def consume() -> None:
        async for event in result.stream_events():
            kinds.add(event.type)

    await asyncio.wait_for(consume(), CALL_TIMEOUT)
    assert "raw_response_event" in kinds and "run_item_stream_event" in kinds, kinds
    assert result.is_complete
    return result


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "streamed"])
@pytest.mark.parametrize("kind", MODELS)
async def test_agent_tool_round_trip(
    stack_: Callable[..., Awaitable[Stack]],
    model_of: Callable[[str, str], Any],
    headers: HeaderLog,
    kind: str,
    streamed: bool,
) -> None:
    stack = await stack_()
    agent, weather = weather_agent(model_of(kind, stack.proxy.url))
    result = await run(agent, streamed)
    assert_tool_round_trip(result, weather)
    assert len(weather.calls) == 1  # the fake ends the loop once it holds one tool result
    usage = result.context_wrapper.usage  # every transport reports usage (WebSocket mode too)
    assert usage.requests == 2 and usage.input_tokens > 0 and usage.output_tokens > 0, usage
    stats = await stack.stats()
    assert stats["tiers"]["fast"]["calls"] == 2, stats  # the call, then the answer after the tool result
    assert await stack.escalations() == 0
    if kind == "responses_ws":
        assert headers.seen == []  # one WebSocket connection, no HTTP calls
    else:
        assert headers.tiers() == ["fast", "fast"]
        assert [h["x-router-escalated"] for h in headers.seen] == ["false", "false"]


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "streamed"])
@pytest.mark.parametrize("kind", MODELS)
async def test_agent_never_sees_a_malformed_call(
    stack_: Callable[..., Awaitable[Stack]], model_of: Callable[[str, str], Any], kind: str, streamed: bool
) -> None:
    """The fast tier breaks 30% of its tool calls; six runs, each a clean tool round trip."""
    stack = await stack_(bad=True)
    model = model_of(kind, stack.proxy.url)
    for _ in range(6):
        agent, weather = weather_agent(model)
        assert_tool_round_trip(await run(agent, streamed), weather)
    mistakes = await stack.fast_mistakes()
    assert mistakes, "the fast tier never broke a call: the test proved nothing"
    assert await stack.escalations() == sum(mistakes.values())


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "streamed"])
@pytest.mark.parametrize("kind", ["responses", "responses_ws"])
async def test_agent_chains_turns_by_previous_response_id(
    stack_: Callable[..., Awaitable[Stack]], model_of: Callable[[str, str], Any], kind: str, streamed: bool
) -> None:
    """`auto_previous_response_id`: the second turn sends only the tool's output and the first
    response's id; the router restores the conversation for the chat tier."""
    stack = await stack_()
    agent, weather = weather_agent(model_of(kind, stack.proxy.url))
    result = await run(agent, streamed, auto_previous_response_id=True)
    assert_tool_round_trip(result, weather)
    registry = stack.proxy.runtime.metrics.registry
    found = sum(
        registry.get_sample_value("router_response_state_total", {"op": "lookup", "outcome": where}) or 0.0
        for where in ("connection", "process")
    )
    assert found == 1, "the second turn did not continue the first by its id"
    [_, second] = await fake_requests(stack.fast.url)
    roles = [m["role"] for m in second["body"]["messages"]]
    assert roles == ["system", "user", "assistant", "tool"], second["body"]["messages"]

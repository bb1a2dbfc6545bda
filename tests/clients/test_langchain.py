"""LangChain's `ChatOpenAI` (`langchain-openai`) through the router: `bind_tools`, a tool round trip
(the tool runs, its `ToolMessage` goes back, the model answers text), invoked and streamed, over chat
completions and over the Responses API (`use_responses_api=True`); `with_structured_output` by
function calling. With the fast tier breaking 30% of its tool calls, LangChain still only ever gets
well-formed calls.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from tests.clients.conftest import CALL_TIMEOUT, HeaderLog, Weather, assert_city_args, assert_final_text

pytest.importorskip("langchain_openai", reason="langchain-openai is not installed (the `dev` extra pins it)")

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langchain_openai import ChatOpenAI

APIS = ("chat", "responses")
PROMPT = "What is the weather in Paris? Use the tool."


class CityWeather(BaseModel):
    """The weather asked for: a city and what it is like."""

    city: str
    summary: str


def chat_model(url: str, api: str, headers: HeaderLog) -> ChatOpenAI:
    return ChatOpenAI(
        model="auto",
        base_url=url,
        api_key="x",  # type: ignore[arg-type]
        max_retries=0,
        timeout=CALL_TIMEOUT,
        http_async_client=headers.client(),
        use_responses_api=api == "responses",
        stream_usage=True,
    )


def weather_tool(weather: Weather) -> StructuredTool:
    def get_weather(city: str) -> str:
        """Weather for a city."""
        return weather(city)

    return StructuredTool.from_function(get_weather)


async def ask(llm: Any, messages: list[BaseMessage], streamed: bool) -> AIMessage:
    if not streamed:
        return await asyncio.wait_for(llm.ainvoke(messages), CALL_TIMEOUT)  # type: ignore[no-any-return]

    async def gather() -> Any:
        total = None
        async for chunk in llm.astream(messages):
            total = chunk if total is None else total + chunk
        return total

    message = await asyncio.wait_for(gather(), CALL_TIMEOUT)
    assert message is not None, "an empty stream"
    return message  # type: ignore[no-any-return]


def text_of(message: AIMessage) -> str:
    return message.text if isinstance(message.text, str) else message.text()  # type: ignore[operator]


async def tool_loop(llm: Any, tool: StructuredTool, streamed: bool) -> tuple[AIMessage, AIMessage]:
    """The loop an agent runs: ask, run the tool, send its result, get the answer."""
    messages: list[BaseMessage] = [HumanMessage(PROMPT)]
    first = await ask(llm, messages, streamed)
    assert first.tool_calls and not first.invalid_tool_calls, (first.tool_calls, first.invalid_tool_calls)
    messages.append(first)
    for call in first.tool_calls:
        assert call["name"] == "get_weather" and call["id"], call
        assert_city_args(call["args"])
        messages.append(ToolMessage(content=await tool.ainvoke(call["args"]), tool_call_id=call["id"]))
    final = await ask(llm, messages, streamed)
    assert not final.tool_calls and not final.invalid_tool_calls, final
    assert_final_text(text_of(final))
    return first, final


@pytest.mark.parametrize("streamed", [False, True], ids=["invoke", "stream"])
@pytest.mark.parametrize("api", APIS)
async def test_bind_tools_round_trip(stack_, headers: HeaderLog, api: str, streamed: bool) -> None:
    stack = await stack_()
    weather = Weather()
    tool = weather_tool(weather)
    llm = chat_model(stack.proxy.url, api, headers).bind_tools([tool])
    first, final = await tool_loop(llm, tool, streamed)
    assert weather.calls == [{"city": "Paris"}]
    for message in (first, final):
        usage = message.usage_metadata
        assert usage is not None and usage["input_tokens"] > 0 and usage["output_tokens"] > 0, message
    assert headers.tiers() == ["fast", "fast"]
    assert [h["x-router-escalated"] for h in headers.seen] == ["false", "false"]
    assert (await stack.stats())["tiers"]["fast"]["calls"] == 2


@pytest.mark.parametrize("streamed", [False, True], ids=["invoke", "stream"])
@pytest.mark.parametrize("api", APIS)
async def test_bind_tools_never_sees_a_malformed_call(stack_, headers: HeaderLog, api: str, streamed: bool) -> None:
    stack = await stack_(bad=True)
    weather = Weather()
    tool = weather_tool(weather)
    llm = chat_model(stack.proxy.url, api, headers).bind_tools([tool])
    for _ in range(6):
        await tool_loop(llm, tool, streamed)
    assert len(weather.calls) == 6
    mistakes = await stack.fast_mistakes()
    assert mistakes, "the fast tier never broke a call: the test proved nothing"
    assert await stack.escalations() == sum(mistakes.values())
    if not streamed:  # a stream's headers go with its first byte; its final decision is in the trailer
        escalated = [h for h in headers.seen if h["x-router-escalated"] == "true"]
        assert len(escalated) == sum(mistakes.values()) and {h["x-router-tier"] for h in escalated} == {"full"}


@pytest.mark.parametrize("api", APIS)
async def test_structured_output_by_function_calling(stack_, headers: HeaderLog, api: str) -> None:
    stack = await stack_(bad=True)
    llm = chat_model(stack.proxy.url, api, headers).with_structured_output(CityWeather, method="function_calling")
    for _ in range(4):
        answer = await asyncio.wait_for(llm.ainvoke(PROMPT), CALL_TIMEOUT)
        assert isinstance(answer, CityWeather) and answer.city and answer.summary
    mistakes = await stack.fast_mistakes()
    assert mistakes, "the fast tier never broke a call: the test proved nothing"
    assert headers.tiers().count("full") == sum(mistakes.values()) and len(headers.seen) == 4

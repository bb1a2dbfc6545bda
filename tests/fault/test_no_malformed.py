"""No malformed tool call reaches a client, from any tier, the chain's last one included.

Both tiers break 30% of their tool calls, in every way the fake knows. Over a thousand calls across
the three APIs, streamed and not, every answer a client gets is either one valid call of an offered
tool (checked here with jsonschema, independently of the router's own validator) or a retryable
error — and errors are as rare as three broken answers in a row (0.3^3 of calls, within sampling
noise: three standard deviations of the binomial count).
"""

from __future__ import annotations

import asyncio
import json
import math
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import anthropic
import httpx
import jsonschema
import openai

from router.fake import FakeConfig
from tests.api.helpers import WEATHER
from tests.conftest import policy_text

RATE = 0.3
ATTEMPTS = 3
PER_KIND = 170  # six kinds of call (3 APIs x JSON/stream): 1,020 calls
SCHEMA = WEATHER["function"]["parameters"]  # type: ignore[index]
PROMPT = "What is the weather in Paris?"


class Malformed(AssertionError):
    pass


def check_call(name: str, arguments: str | dict[str, Any]) -> None:
    """One delivered call: an offered tool, arguments that are JSON and fit its schema."""
    if name != "get_weather":
        raise Malformed(f"unknown tool delivered: {name!r}")
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else arguments
        jsonschema.validate(args, SCHEMA)
    except (ValueError, jsonschema.ValidationError) as exc:
        raise Malformed(f"malformed arguments delivered: {arguments!r} ({type(exc).__name__})") from None


def check_one(calls: list[tuple[str, Any]], text: str) -> None:
    if len(calls) != 1:
        raise Malformed(f"expected one tool call, got {len(calls)} with text {text!r}")
    check_call(*calls[0])


async def chat_json(oai: openai.AsyncOpenAI) -> None:
    r = await oai.chat.completions.create(model="auto", messages=[{"role": "user", "content": PROMPT}], tools=[WEATHER])
    m = r.choices[0].message
    check_one([(c.function.name, c.function.arguments) for c in m.tool_calls or []], m.content or "")


async def chat_stream(oai: openai.AsyncOpenAI) -> None:
    stream = await oai.chat.completions.create(
        model="auto", messages=[{"role": "user", "content": PROMPT}], tools=[WEATHER], stream=True
    )
    calls: dict[int, list[str]] = {}
    text = ""
    async for chunk in stream:  # a partial call followed by an error would show here: deltas are kept
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for tc in choice.delta.tool_calls or []:
                call = calls.setdefault(tc.index, ["", ""])
                call[0] += tc.function.name or "" if tc.function else ""
                call[1] += tc.function.arguments or "" if tc.function else ""
    check_one([(n, a) for n, a in calls.values()], text)


FN = [{"type": "function", "name": "get_weather", "parameters": SCHEMA}]


async def responses_json(oai: openai.AsyncOpenAI) -> None:
    r = await oai.responses.create(model="auto", input=PROMPT, tools=FN)  # type: ignore[arg-type]
    calls = [(o.name, o.arguments) for o in r.output if o.type == "function_call"]
    check_one(calls, r.output_text)


async def responses_stream(oai: openai.AsyncOpenAI) -> None:
    stream = await oai.responses.create(model="auto", input=PROMPT, tools=FN, stream=True)  # type: ignore[arg-type]
    calls: dict[str, list[str]] = {}
    text = ""
    async for event in stream:
        if event.type == "response.output_item.added" and event.item.type == "function_call":
            calls[event.item.id or ""] = [event.item.name, ""]
        elif event.type == "response.function_call_arguments.delta":
            calls.setdefault(event.item_id, ["", ""])[1] += event.delta
        elif event.type == "response.output_text.delta":
            text += event.delta
        elif event.type == "error":
            raise openai.APIError("error event", request=None, body=None)  # type: ignore[arg-type]
    check_one([(n, a) for n, a in calls.values()], text)


TOOLS_A = [{"name": "get_weather", "description": "Weather for a city", "input_schema": SCHEMA}]


async def messages_json(ant: anthropic.AsyncAnthropic) -> None:
    m = await ant.messages.create(
        model="auto", max_tokens=256, messages=[{"role": "user", "content": PROMPT}], tools=TOOLS_A
    )
    calls = [(b.name, b.input) for b in m.content if b.type == "tool_use"]
    check_one(calls, "".join(b.text for b in m.content if b.type == "text"))


async def messages_stream(ant: anthropic.AsyncAnthropic) -> None:
    blocks: dict[int, list[str]] = {}
    text = ""
    async with ant.messages.stream(
        model="auto", max_tokens=256, messages=[{"role": "user", "content": PROMPT}], tools=TOOLS_A
    ) as stream:
        async for event in stream:
            if event.type == "content_block_start" and event.content_block.type == "tool_use":
                blocks[event.index] = [event.content_block.name, ""]
            elif event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                blocks[event.index][1] += event.delta.partial_json
            elif event.type == "content_block_delta" and event.delta.type == "text_delta":
                text += event.delta.text
    check_one([(n, a or "{}") for n, a in blocks.values()], text)


async def test_no_malformed_call_reaches_a_client_from_any_tier(start_fake_, proxy_) -> None:
    fast = await start_fake_(FakeConfig(seed=1, bad_tool_rate=RATE))
    full = await start_fake_(FakeConfig(seed=2, bad_tool_rate=RATE))
    extra = f"escalation: {{to: full, max_attempts: {ATTEMPTS}, deadline: 20}}\n"
    proxy = await proxy_(policy_text(fast.url, full.url, extra=extra))
    oai = openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0)
    ant = anthropic.AsyncAnthropic(base_url=proxy.base, api_key="x", max_retries=0)
    kinds: dict[str, Callable[[], Awaitable[None]]] = {
        "chat": lambda: chat_json(oai),
        "chat-stream": lambda: chat_stream(oai),
        "responses": lambda: responses_json(oai),
        "responses-stream": lambda: responses_stream(oai),
        "messages": lambda: messages_json(ant),
        "messages-stream": lambda: messages_stream(ant),
    }
    outcomes: Counter[str] = Counter()
    malformed: list[str] = []
    gate = asyncio.Semaphore(8)

    async def one(kind: str) -> None:
        async with gate:
            try:
                await asyncio.wait_for(kinds[kind](), 20)
                outcomes["ok"] += 1
            except Malformed as exc:
                malformed.append(f"{kind}: {exc}")
            except openai.APIStatusError as exc:  # must be the retryable kind: the SDKs retry it
                assert exc.status_code == 502 and exc.response.headers.get("x-should-retry") == "true", exc
                outcomes["error"] += 1
            except anthropic.APIStatusError as exc:
                # 502 before anything was sent; an `error` event of a stream comes with the stream's 200
                assert exc.status_code in (200, 502) and exc.body["error"]["type"] == "api_error", exc.body  # type: ignore[index]
                outcomes["error"] += 1
            except (openai.APIError, anthropic.APIError):  # an `error` event in a stream
                outcomes["error"] += 1

    await asyncio.gather(*(one(kind) for kind in kinds for _ in range(PER_KIND)))
    await oai.close()
    await ant.close()
    calls = PER_KIND * len(kinds)
    print(f"{calls} calls: {dict(outcomes)}; malformed delivered: {len(malformed)}")  # shown with -s
    assert malformed == [], malformed[:5]
    assert outcomes["ok"] + outcomes["error"] == calls
    p = RATE**ATTEMPTS
    bound = calls * p + 3 * math.sqrt(calls * p * (1 - p))
    assert outcomes["error"] <= bound, (outcomes, bound)
    async with httpx.AsyncClient() as http:
        stats = (await http.get(proxy.url + "/router/stats")).json()
        metrics = (await http.get(proxy.base + "/metrics")).text
    assert stats["tiers"]["full"]["mistakes"], stats  # the last tier's mistakes were caught and counted
    exhausted = sum(
        float(line.split()[-1]) for line in metrics.splitlines() if line.startswith("router_exhausted_total{")
    )
    assert exhausted == outcomes["error"]

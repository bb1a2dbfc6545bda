"""The proxy end to end against the fake upstream, through the official openai SDK."""

from __future__ import annotations

import openai

from tests.conftest import policy_text

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


async def test_text_and_tool_call_json_and_stream(fake, proxy_) -> None:
    proxy = await proxy_(policy_text(fake.url, extra="escalation: {to: full}\n"))
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0)
    raw = await client.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": "hi"}]
    )
    assert raw.headers["x-router-tier"] == "full"
    assert raw.headers["x-router-route"] == "default"
    assert raw.parse().choices[0].message.content
    stream = await client.chat.completions.create(
        model="auto", messages=[{"role": "user", "content": "weather?"}], tools=TOOLS, stream=True
    )
    calls = {}
    async for chunk in stream:
        for tc in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            calls.setdefault(tc.index, "")
            calls[tc.index] += tc.function.arguments or ""
    assert calls and all(args.startswith("{") for args in calls.values())

"""Answers that go round in a loop: where `loop_end` cuts, what it leaves alone, and `Loop` on chunks."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import aiohttp
import orjson
import pytest

from router.fake import FakeConfig
from router.upstream.loops import MIN_UNIT, Loop, loop_end
from tests.api.helpers import TOOLS, USER, post, sse

CALL = '<tool_call>\n{"name": "list_issues", "arguments": {"status": "open"}}\n</tool_call>\n'


def test_a_call_written_three_times_is_cut_after_the_first() -> None:
    text = "Let me look: " + CALL * 3
    end = loop_end(text)
    assert end is not None and text[:end] == "Let me look: " + CALL
    # where what comes before the loop ends as a copy does, one whole copy is kept from there on
    text = "Let me look.\n" + CALL * 3
    assert text[: loop_end(text)] == "Let me look.\n" + CALL[:-1]


def test_two_copies_are_not_a_loop() -> None:
    assert loop_end("Let me look.\n" + CALL * 2) is None


def test_a_loop_read_mid_copy_keeps_one_whole_copy() -> None:
    text = "Sure: " + CALL * 4 + CALL[:17]  # a stream read to the middle of a copy
    end = loop_end(text)
    assert end is not None and text[:end] == "Sure: " + CALL


@pytest.mark.parametrize(
    "text",
    [
        "0, " * 400,  # a list of zeros
        "-" * 2000,  # a separator
        "\n" * 500,
        "ab" * 1000,
        "x = [" + "0.0, " * 300 + "]",
    ],
)
def test_short_periods_are_never_cut(text: str) -> None:
    assert loop_end(text) is None


def test_distinct_lines_are_not_a_loop() -> None:
    text = "".join(f"line {i}: the value of the sensor at step {i} is {i * i}\n" for i in range(200))
    assert loop_end(text) is None


def test_a_stretch_longer_than_max_unit_is_not_looked_for() -> None:
    unit = "".join(f"{i:05d} " for i in range(800))  # 4800 characters
    assert loop_end(unit * 3) is None
    assert loop_end(unit * 3, max_unit=8192) == len(unit)


def test_a_stretch_holding_the_end_twice_is_still_found() -> None:
    tail = "the end of it all, said only once"[:MIN_UNIT]  # no run: the unit holds it three times
    unit = tail + "-middle-" + tail + "-end of the unit-" + tail
    text = "start " + unit * 3
    end = loop_end(text)
    assert end is not None and loop_end(text[:end]) is None and text[:end].endswith(tail)


def chunk(delta: dict[str, Any]) -> dict[str, Any]:
    return {"id": "c", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


def test_loop_watches_text_as_it_streams() -> None:
    loop = Loop()
    text = CALL * 3
    fed = [loop.feed(chunk({"content": text[i : i + 4]})) for i in range(0, len(text), 4)]
    assert fed[-1] and not any(fed[: len(CALL * 2) // 4])
    assert loop.deltas == len(fed)
    assert loop.kept(text + "<tool") == CALL


def test_loop_watches_structured_calls_too() -> None:
    loop = Loop()
    looped = []
    for index in range(4):
        head = {"index": index, "id": f"call_{index}", "function": {"name": "list_issues", "arguments": ""}}
        looped.append(loop.feed(chunk({"tool_calls": [head]})))
        args = {"index": index, "function": {"arguments": '{"status": "open", "assignee": "maria"}'}}
        looped.append(loop.feed(chunk({"tool_calls": [args]})))
    assert looped.index(True) == 5  # the third call's arguments complete the third copy
    assert Loop().feed({"choices": []}) is False


# -- a tier with `cut_loops`, against the fake upstream's looping answers ---------------------------


def looping_policy(url: str, cut: bool) -> str:
    return f"""
        version: 1
        models:
          fast:
            model: openai/fast-model
            api_base: {url}
            warm_connections: 1
            timeouts: {{connect: 2, first_token: 5, total: 60}}
            cut_loops: {str(cut).lower()}
        routes:
          - name: tool-call
            use: fast
        escalation: {{max_attempts: 1}}
        store: memory://
    """


async def left_early(fake_url: str) -> int:
    """The fake's looping streams whose peer left before their end, once one did (or after 3 s)."""
    for _ in range(60):
        async with aiohttp.ClientSession() as s, s.get(fake_url.removesuffix("/v1") + "/_fake/stats") as r:
            stats = await r.json()
        if stats["left_early"]:
            break
        await asyncio.sleep(0.05)
    return int(stats["left_early"])


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_looping_call_is_stopped_and_made_once(start_fake_, proxy_, stream: bool) -> None:
    fake = await start_fake_(FakeConfig(seed=1, looping=True, chunk_delay_ms=1))
    proxy = await proxy_(looping_policy(fake.url, cut=True))
    body = {"model": "auto", "messages": USER, "tools": TOOLS, "max_tokens": 2048, "stream": stream}
    async with asyncio.timeout(30):
        raw = await post(proxy.url + "/chat/completions", body)
    assert raw.status == 200, raw.body
    assert raw.headers["x-router-looped"] == "true" and raw.headers["x-router-salvaged"] == "true"
    if stream:
        chunks, _, done = sse(raw.body)
        assert done
        calls = [tc for c in chunks for tc in (c["choices"][0]["delta"].get("tool_calls") or []) if c.get("choices")]
    else:
        message = orjson.loads(raw.body)["choices"][0]["message"]
        calls = message["tool_calls"]
        assert orjson.loads(raw.body)["usage"]["completion_tokens"] < 200  # stopped long before 2048
    assert len(calls) == 1 and calls[0]["function"]["name"] in {t["function"]["name"] for t in TOOLS}
    assert await left_early(fake.url) == 1  # the tier was not read to its end
    assert await counted(proxy.base) == 1


async def test_a_cut_answers_usage_is_whole_for_the_agents_sdk(start_fake_, proxy_) -> None:
    """The stream's last chunk, which counts the prompt, never comes: the tier's tokenizer counts it.
    The Agents SDK's chat model fails a run on a usage without all three counts (seen in the eval)."""
    agents = pytest.importorskip("agents", reason="openai-agents is not installed (the `dev` extra pins it)")
    fake = await start_fake_(FakeConfig(seed=1, looping=True, chunk_delay_ms=1, n_ctx=8192))
    proxy = await proxy_(looping_policy(fake.url, cut=True))
    body = {"model": "auto", "messages": USER, "tools": TOOLS, "max_tokens": 2048}
    async with asyncio.timeout(30):
        raw = await post(proxy.url + "/chat/completions", body)
    usage = orjson.loads(raw.body)["usage"]
    assert raw.headers["x-router-looped"] == "true" and usage["prompt_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]

    agents.set_tracing_disabled(True)
    client = agents.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0)

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Weather for a city."""
        return "sunny"

    model = agents.OpenAIChatCompletionsModel(model="auto", openai_client=client)
    agent = agents.Agent(name="a", tools=[get_weather], model=model)
    with pytest.raises(agents.MaxTurnsExceeded):  # the cut answer was read, its call run, and the loop went on
        await agents.Runner.run(agent, "Weather in Paris?", max_turns=1)
    await client.close()


async def test_without_cut_loops_the_loop_is_read_to_its_end(start_fake_, proxy_) -> None:
    fake = await start_fake_(FakeConfig(seed=1, looping=True))
    proxy = await proxy_(looping_policy(fake.url, cut=False))
    body = {"model": "auto", "messages": USER, "tools": TOOLS, "max_tokens": 256}
    async with asyncio.timeout(30):
        raw = await post(proxy.url + "/chat/completions", body)
    assert raw.status == 200, raw.body
    assert "x-router-looped" not in raw.headers
    assert orjson.loads(raw.body)["usage"]["completion_tokens"] == 256
    assert await counted(proxy.base) == 0


async def counted(base: str) -> float:
    """router_loops_cut{tier="fast"} on the proxy's /metrics."""
    async with aiohttp.ClientSession() as s, s.get(base + "/metrics") as r:
        text = await r.text()
    found = re.search(r'^router_loops_cut_total\{route="tool-call",tier="fast"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0

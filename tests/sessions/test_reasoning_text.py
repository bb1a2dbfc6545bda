"""Chat completions' `reasoning_content` bound to the model that wrote it (router/sessions/reasoning_text.py):
marked invisibly on the way to the client, given back unmarked to a tier of that model only, and a tool
loop kept going on a tier that requires it (DeepSeek's thinking mode) or refuses it. Real servers: the
proxy, fake upstreams answering with reasoning as servers with a reasoning parser do, the openai SDK."""

from __future__ import annotations

from typing import Any

import openai
import orjson
import pytest

from router.fake import FakeConfig
from router.sessions.provenance import model_tag
from router.sessions.reasoning_text import ReasoningMarks, mark_reasoning, own_reasoning, reasoning_refused
from tests.api.helpers import fake_requests
from tests.conftest import policy_text
from tests.fake.test_reasoning import refused

TAG_A, TAG_B = model_tag("openai/fast-model"), model_tag("openai/full-model")
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}  # fmt: skip
ASK = [{"role": "user", "content": "Weather in Paris?"}]
ALIASES = 'aliases: {"fast": fast, "full": full, "*": auto}\n'


def test_the_mark_is_invisible_and_only_its_model_gets_the_text_back() -> None:
    marked = mark_reasoning("I should call get_weather.", TAG_A)
    assert marked.endswith("I should call get_weather.") and len(marked) == len("I should call get_weather.") + 26
    assert not any(c.isprintable() for c in marked[:26])  # nothing of the mark is shown
    messages = [{"role": "assistant", "content": "", "reasoning_content": marked}, {"role": "user", "content": "x"}]
    assert own_reasoning(messages, TAG_A)[0]["reasoning_content"] == "I should call get_weather."
    assert "reasoning_content" not in own_reasoning(messages, TAG_B)[0]  # another model's: none of it
    unmarked = [{"role": "assistant", "content": "", "reasoning_content": "written by the client"}]
    assert "reasoning_content" not in own_reasoning(unmarked, TAG_A)[0]  # no model known: none
    plain = [{"role": "user", "content": "x"}]
    assert own_reasoning(plain, TAG_A) is plain  # nothing to change: the list itself


def test_a_stream_marks_the_first_reasoning_delta_of_each_choice() -> None:
    marks = ReasoningMarks(TAG_A)
    chunks = [{"choices": [{"index": 0, "delta": {"reasoning_content": word}}]} for word in ("I", " think")]
    assert [marks.chunk(c) for c in chunks] == [True, False]
    joined = "".join(c["choices"][0]["delta"]["reasoning_content"] for c in chunks)
    assert joined == mark_reasoning("I think", TAG_A)


def test_a_refusal_naming_reasoning_content_changes_only_what_it_names() -> None:
    call = {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function",
            "function": {"name": "get_weather", "arguments": "{}"}}]}  # fmt: skip
    body = orjson.dumps({"messages": [*ASK, call, {"role": "tool", "tool_call_id": "c", "content": "sun"}]})
    missing = "Missing `reasoning_content` field in the assistant message at message index 1."
    filled = orjson.loads(reasoning_refused(400, missing, body) or b"{}")
    assert filled["messages"][1]["reasoning_content"] == "" and "reasoning_content" not in filled["messages"][0]
    assert reasoning_refused(400, "messages.1.reasoning_content: Extra inputs are not permitted", body) is None
    given = orjson.dumps({"messages": [{**call, "reasoning_content": "mine"}]})
    extra = orjson.loads(reasoning_refused(400, "messages.0.reasoning_content: Extra inputs", given) or b"{}")
    assert "reasoning_content" not in extra["messages"][0]
    assert (
        reasoning_refused(500, missing, body) is None and reasoning_refused(400, "max_tokens too large", body) is None
    )


async def turn(sdk: openai.AsyncOpenAI, model: str, messages: list[Any], stream: bool) -> dict[str, Any]:
    """One call; the assistant message as a client keeps it (a stream's deltas joined)."""
    if not stream:
        message = (await sdk.chat.completions.create(model=model, messages=messages, tools=[WEATHER])).choices[0]
        return message.message.model_dump(exclude_none=True)
    reasoning, calls = "", []
    async for chunk in await sdk.chat.completions.create(model=model, messages=messages, tools=[WEATHER], stream=True):
        delta = chunk.choices[0].delta if chunk.choices else None
        reasoning += (getattr(delta, "reasoning_content", None) or "") if delta else ""
        calls += [c.model_dump(exclude_none=True) for c in (delta.tool_calls or ())] if delta else []
    head = calls[0]
    call = {"id": head["id"], "type": "function", "function": {"name": head["function"]["name"],
            "arguments": "".join(c["function"].get("arguments", "") for c in calls)}}  # fmt: skip
    return {"role": "assistant", "content": "", "tool_calls": [call], "reasoning_content": reasoning}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_tool_loop_keeps_each_models_reasoning_its_own(start_fake_, proxy_, stream: bool) -> None:
    fast = await start_fake_(FakeConfig(seed=1, model="fast-model", reasoning_content="write"))
    full = await start_fake_(FakeConfig(seed=2, model="full-model", reasoning_content="require"))  # as DeepSeek
    proxy = await proxy_(policy_text(fast.url, full.url, extra=ALIASES))
    async with openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0) as sdk:
        first = await turn(sdk, "fast", ASK, stream)
        written = "fast-model read 1 messages; calling get_weather."
        assert first["reasoning_content"] == mark_reasoning(written, TAG_A)  # shown as written, marked unseen
        result = {"role": "tool", "tool_call_id": first["tool_calls"][0]["id"], "content": "sunny"}
        loop = [*ASK, first, result]
        await turn(sdk, "fast", loop, stream)  # the same model: its reasoning back, as it wrote it
        [_, again] = await fake_requests(fast.url)
        assert again["body"]["messages"][1]["reasoning_content"] == written
        answered = await turn(sdk, "full", loop, stream)  # another model, which requires reasoning in a loop
    assert answered["tool_calls"]
    refusal, taken = await fake_requests(full.url)
    assert "reasoning_content" not in refusal["body"]["messages"][1]  # none of fast's reasoning reached it
    assert taken["body"]["messages"][1]["reasoning_content"] == ""  # refused without: sent with an empty one
    assert await refused(full) == {"reasoning_content": 1} and await refused(fast) == {}


async def test_a_tier_that_refuses_the_field_is_sent_none(start_fake_, proxy_) -> None:
    """A server without a reasoning parser, of the same model: the client's reasoning is this model's
    own, restored, refused by the server, and sent again without it."""
    fast = await start_fake_(FakeConfig(seed=3, model="fast-model", reasoning_content="write"))
    plain = await start_fake_(FakeConfig(seed=4, model="fast-model", reasoning_content="refuse"))
    policy = policy_text(fast.url, plain.url, extra=ALIASES).replace("openai/full-model", "openai/fast-model")
    proxy = await proxy_(policy)
    async with openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0) as sdk:
        first = await turn(sdk, "fast", ASK, stream=False)
        result = {"role": "tool", "tool_call_id": first["tool_calls"][0]["id"], "content": "sunny"}
        assert (await turn(sdk, "full", [*ASK, first, result], stream=False))["tool_calls"]
    refusal, taken = await fake_requests(plain.url)
    assert refusal["body"]["messages"][1]["reasoning_content"].startswith("fast-model read")
    assert not [m for m in taken["body"]["messages"] if "reasoning_content" in m]

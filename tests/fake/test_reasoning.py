"""The fake upstream binds reasoning state to the request's model as the providers do
(router/fake/reasoning.py): exercised as a real server with the official anthropic and openai SDKs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

from router.fake import FakeConfig, FakeServer, start_fake
from router.fake.reasoning import REDACTED_TRIGGER, effort_refusal

READ = {"name": "Read", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}},
                                         "required": ["path"]}}  # fmt: skip
THINKING: Any = {"type": "enabled", "budget_tokens": 1024}
ASK: list[Any] = [{"role": "user", "content": "Read a.txt"}]


@pytest.fixture
async def fake() -> AsyncIterator[FakeServer]:
    server = await start_fake(FakeConfig(seed=3))
    yield server
    await server.close()


@pytest.fixture
async def claude(fake: FakeServer) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with anthropic.AsyncAnthropic(base_url=fake.url.removesuffix("/v1"), api_key="x", max_retries=0) as sdk:
        yield sdk


async def refused(fake: FakeServer) -> dict[str, int]:
    async with aiohttp.ClientSession() as s, s.get(fake.url.removesuffix("/v1") + "/_fake/stats") as r:
        return dict((await r.json())["refused"])


def loop_after(answer: anthropic.types.Message) -> list[Any]:
    """The conversation after `answer` (a tool call) and its tool_result: a tool loop in progress."""
    [call] = [b for b in answer.content if b.type == "tool_use"]
    result = {"type": "tool_result", "tool_use_id": call.id, "content": "hello"}
    return [*ASK, {"role": "assistant", "content": [b.model_dump() for b in answer.content]},
            {"role": "user", "content": [result]}]  # fmt: skip


async def test_a_thinking_block_is_signed_for_the_requests_model(fake, claude) -> None:
    answer = await claude.messages.create(model="claude-a", max_tokens=2048, messages=ASK, tools=[READ],
                                          thinking=THINKING)  # fmt: skip
    assert [b.type for b in answer.content] == ["thinking", "tool_use"]
    assert answer.content[0].signature and answer.content[0].thinking  # type: ignore[union-attr]
    history = loop_after(answer)
    again = await claude.messages.create(model="claude-a", max_tokens=2048, messages=history, tools=[READ],
                                         thinking=THINKING)  # fmt: skip
    assert again.content[0].type == "thinking"
    with pytest.raises(anthropic.BadRequestError) as foreign:
        await claude.messages.create(model="claude-b", max_tokens=2048, messages=history, tools=[READ],
                                     thinking=THINKING)  # fmt: skip
    assert foreign.value.status_code == 400
    message = "messages.1.content.0: Invalid `signature` in `thinking` block"
    assert foreign.value.body == {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    edited = [*history[:1], {"role": "assistant", "content": [{**history[1]["content"][0], "thinking": "no"},
                                                               *history[1]["content"][1:]]}, history[2]]  # fmt: skip
    with pytest.raises(anthropic.BadRequestError, match="Invalid `signature`"):
        await claude.messages.create(model="claude-a", max_tokens=2048, messages=edited, tools=[READ])
    assert await refused(fake) == {"signature": 2}


async def test_a_tool_loop_without_its_thinking_block_is_refused_when_thinking_is_enabled(fake, claude) -> None:
    answer = await claude.messages.create(model="claude-a", max_tokens=2048, messages=ASK, tools=[READ],
                                          thinking=THINKING)  # fmt: skip
    history = loop_after(answer)
    history[1]["content"] = history[1]["content"][1:]  # the thinking block left out
    with pytest.raises(anthropic.BadRequestError) as error:
        await claude.messages.create(model="claude-a", max_tokens=2048, messages=history, tools=[READ],
                                     thinking=THINKING)  # fmt: skip
    message = error.value.body["error"]["message"]  # type: ignore[index]
    assert message.startswith(
        "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`. "
        "When `thinking` is enabled, a final `assistant` message must start"
    )
    for thinking in ({"type": "adaptive"}, {"type": "disabled"}, None):  # no such rule
        extra = {"thinking": thinking} if thinking else {}
        ok = await claude.messages.create(model="claude-a", max_tokens=2048, messages=history, tools=[READ], **extra)
        assert ok.content[-1].type in ("text", "tool_use")
    assert await refused(fake) == {"thinking_required": 1}


async def test_a_streamed_thinking_block_comes_as_anthropic_streams_it(fake, claude) -> None:
    async with claude.messages.stream(model="claude-a", max_tokens=2048, messages=ASK, tools=[READ],
                                      thinking=THINKING) as stream:  # fmt: skip
        kinds = [(e.type, getattr(getattr(e, "delta", None), "type", None)) async for e in stream]
        answer = await stream.get_final_message()
    assert ("content_block_delta", "thinking_delta") in kinds and ("content_block_delta", "signature_delta") in kinds
    assert [b.type for b in answer.content] == ["thinking", "tool_use"]
    again = await claude.messages.create(model="claude-a", max_tokens=2048, messages=loop_after(answer), tools=[READ],
                                         thinking=THINKING)  # fmt: skip
    assert again.content[0].type == "thinking"
    omitted = await claude.messages.create(model="claude-a", max_tokens=2048, messages=ASK,
                                           thinking={"type": "adaptive", "display": "omitted"})  # type: ignore[typeddict-unknown-key]  # fmt: skip
    assert omitted.content[0].type == "thinking" and omitted.content[0].thinking == ""  # type: ignore[union-attr]
    plain = await claude.messages.create(model="claude-a", max_tokens=2048, messages=ASK)
    assert [b.type for b in plain.content] == ["text"]  # no thinking asked: the answer as before


async def test_redacted_thinking_is_sealed_for_the_model(fake, claude) -> None:
    ask = [{"role": "user", "content": f"{REDACTED_TRIGGER}_46C9 read a.txt"}]
    answer = await claude.messages.create(model="claude-a", max_tokens=2048, messages=ask, tools=[READ],
                                          thinking=THINKING)  # fmt: skip
    assert [b.type for b in answer.content] == ["redacted_thinking", "tool_use"]
    history = [*ask, *loop_after(answer)[1:]]
    await claude.messages.create(model="claude-a", max_tokens=2048, messages=history, tools=[READ], thinking=THINKING)
    with pytest.raises(anthropic.BadRequestError, match=r"messages\.1\.content\.0: Invalid `data` in `redacted_"):
        await claude.messages.create(model="claude-b", max_tokens=2048, messages=history, tools=[READ])


@pytest.mark.parametrize("stream", [False, True])
async def test_responses_encrypted_reasoning_is_sealed_for_the_model(fake, stream: bool) -> None:
    fn = [{"type": "function", "name": "read", "parameters": {"type": "object", "properties": {}}}]
    async with openai.AsyncOpenAI(base_url=fake.url, api_key="x", max_retries=0) as sdk:
        asked = {"model": "gpt-a", "input": "read a.txt", "tools": fn, "store": False,
                 "include": ["reasoning.encrypted_content"]}  # fmt: skip
        if stream:
            async with sdk.responses.stream(**asked) as events:
                kinds = [e.type async for e in events]
                response = await events.get_final_response()
            assert "response.output_item.done" in kinds
        else:
            response = await sdk.responses.create(**asked)
        reasoning, call = response.output
        assert reasoning.type == "reasoning" and reasoning.encrypted_content.startswith("gAAAAA")  # type: ignore[union-attr]
        items = [{"role": "user", "content": "read a.txt"}, *(i.model_dump(exclude_none=True) for i in response.output),
                 {"type": "function_call_output", "call_id": call.call_id, "output": "hi"}]  # type: ignore[union-attr]  # fmt: skip
        again = await sdk.responses.create(**{**asked, "input": items})
        assert again.output[0].type == "reasoning"
        with pytest.raises(openai.BadRequestError) as foreign:
            await sdk.responses.create(**{**asked, "model": "gpt-b", "input": items})
        plain = await sdk.responses.create(model="gpt-a", input="hi")
    assert foreign.value.code == "invalid_encrypted_content"
    assert foreign.value.body["message"].endswith("could not be verified.")  # type: ignore[index]
    assert await refused(fake) == {"encrypted_content": 1}
    assert [i.type for i in plain.output] == ["message"]  # not asked for: no reasoning item


def test_thinking_off_is_refused_as_the_upstreams_refuse_it() -> None:
    off = {"thinking": {"type": "disabled"}}
    assert effort_refusal({**off, "output_config": {"effort": "max"}}, "max") is None  # takes every level
    kind, body = effort_refusal({"thinking": {"type": "disabled", "display": "summarized"}}, "max") or ("", b"")
    assert kind == "effort" and b"thinking.disabled.display: Extra inputs are not permitted" in body
    assert effort_refusal({**off, "output_config": {"effort": "high"}}, "high") is None
    _, body = effort_refusal({"output_config": {"effort": "xhigh"}}, "high") or ("", b"")  # no `thinking`: off
    assert b"'xhigh' is not supported when thinking is disabled" in body
    _, body = effort_refusal({**off, "output_config": {"effort": "low"}}, "none") or ("", b"")
    assert b"cannot be disabled when reasoning_effort is set" in body
    on = {"thinking": {"type": "adaptive"}, "output_config": {"effort": "max"}}
    assert effort_refusal(on, "none") is None  # thinking on: any effort

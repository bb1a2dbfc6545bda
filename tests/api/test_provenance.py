"""Each tier sees only the reasoning state its own model made (router/sessions/provenance.py).

Multi-turn agent sessions through the proxy with the official SDKs, with thinking on, whose turns
move between tiers of different models — an escalated turn, then a routed one, then a sticky one —
against fake upstreams that bind thinking signatures and encrypted reasoning to the request's model
and refuse another model's as Anthropic and OpenAI do (router/fake/reasoning.py). Every turn must
answer, every upstream request must carry only its own model's reasoning state, as that model wrote
it (the router's marks never leave it), and no request may be refused. Tiers of one model (a
fast-mode lane) keep everything.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import anthropic
import openai
import orjson
import pytest

from router.fake import FakeConfig, FakeServer
from router.fake.reasoning import signature
from router.messages.translate import chat_body
from router.responses.translate import chat_body as responses_chat_body
from router.sessions.provenance import MARK
from tests.api.helpers import fake_requests, root
from tests.fake.test_reasoning import refused

KEY = "sk-ant-test-key-for-the-fake"
SIGNING = FakeConfig().signing_key
WEATHER = {"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                                                   "required": ["city"]}}  # fmt: skip
READ = {"name": "Read", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}},
                                         "required": ["path"]}}  # fmt: skip
THINKING: Any = {"type": "enabled", "budget_tokens": 1024}
SESSION = {"user_id": '{"device_id":"d","session_id":"provenance-1"}'}  # as Claude Code 2.1 names its session


def policy(fast: FakeServer, full: FakeServer, fast_model: str, full_model: str, *, responses: bool = False,
           full_params: str = "") -> str:  # fmt: skip
    """fast and full tiers of `anthropic/<model>` (or, `responses`, of `openai/<model>` serving the
    Responses API); tool calls go to fast, escalate to full, and after an agent's error one call sticks."""
    provider, apis = ("openai", "    apis: [responses]\n") if responses else ("anthropic", "")

    def tier(name: str, model: str, fake: FakeServer, params: str = "") -> str:
        base = fake.url if responses else root(fake.url)
        return (f"  {name}:\n    model: {provider}/{model}\n    api_base: {base}\n    api_key: {KEY}\n"
                f"    warm_connections: 0\n{apis}{params}")  # fmt: skip

    return (
        "version: 1\nmodels:\n"
        + tier("fast", fast_model, fast)
        + tier("full", full_model, full, full_params)
        + "routes:\n  - name: tool-calls\n    when: {tools: {present: true}}\n    use: fast\n"
        + "  - name: default\n    use: full\n"
        + "escalation: {to: full, after_agent_error: {sticky_calls: 1}}\nstore: memory://\n"
    )


def original(value: str) -> str:
    """A value the router delivered, as its model wrote it (its mark taken off)."""
    assert value.startswith(MARK), value
    return value.split(".", 2)[2]


async def fakes(start_fake_: Callable[..., Any]) -> tuple[FakeServer, FakeServer]:
    """fast: breaks every get_weather call (so a first turn asking for the weather escalates), calls
    Read when offered; full: answers in words once two tool results are in (its turns end the loop)."""
    fast = await start_fake_(FakeConfig(seed=1, api_key=KEY, bad_tool_rates={"get_weather": 1.0},
                                        bad_kinds=("unknown_tool",), prefer_tools=("Read", "read")))  # fmt: skip
    full = await start_fake_(FakeConfig(seed=2, api_key=KEY, finish_after=2))
    return fast, full


@pytest.fixture
async def claude() -> AsyncIterator[Callable[[Any], anthropic.AsyncAnthropic]]:
    made: list[anthropic.AsyncAnthropic] = []

    def make(proxy: Any) -> anthropic.AsyncAnthropic:
        made.append(anthropic.AsyncAnthropic(base_url=proxy.base, api_key="x", max_retries=0))
        return made[-1]

    yield make
    for client in made:
        await client.close()


class Conversation:
    """An agent's side of a Messages session: the history it replays, a turn at a time."""

    def __init__(self, client: anthropic.AsyncAnthropic, stream: bool) -> None:
        self.client, self.stream = client, stream
        self.messages: list[Any] = []
        self.last: Any = None

    async def turn(self, tools: list[Any], *, user: str | None = None, result: str | None = None,
                   error: bool = False) -> tuple[str, list[str]]:  # fmt: skip
        """Send the next turn (a question, or the result of the last answer's tool call); (tier, block types)."""
        if result is not None:
            [call] = [b for b in self.last.content if b.type == "tool_use"]
            content: Any = [{"type": "tool_result", "tool_use_id": call.id, "content": result, "is_error": error}]
            self.messages.append({"role": "user", "content": content})
        if user is not None:
            self.messages.append({"role": "user", "content": user})
        asked = {"model": "claude-agent", "max_tokens": 4096, "messages": self.messages, "tools": tools,
                 "thinking": THINKING, "metadata": SESSION}  # fmt: skip
        if self.stream:
            async with self.client.messages.stream(**asked) as events:
                self.last = await events.get_final_message()
                tier = events.response.headers["x-router-tier"]
        else:
            raw = await self.client.messages.with_raw_response.create(**asked)
            self.last, tier = await raw.parse(), raw.headers["x-router-tier"]
        self.messages.append(
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in self.last.content]}
        )
        return tier, [b.type for b in self.last.content]


def signatures(request: dict[str, Any]) -> list[str]:
    return [sig for _, sig in thinking_of(request)]


def thinking_of(request: dict[str, Any]) -> list[tuple[str, str]]:
    """(text, signature) of every thinking block an upstream request carries."""
    return [(b["thinking"], b["signature"]) for m in request["body"]["messages"] if isinstance(m["content"], list)
            for b in m["content"] if b["type"] == "thinking"]  # fmt: skip


async def assert_only_own(fake: FakeServer, model: str, path: str = "/v1/messages") -> list[dict[str, Any]]:
    """Every request `fake` got carries only `model`'s reasoning state, unmarked, and none was refused."""
    requests = await fake_requests(fake.url, path=path)
    for request in requests:
        assert MARK not in orjson.dumps(request["body"]).decode()  # the router's marks never leave it
        for text, sig in thinking_of(request) if path == "/v1/messages" else ():
            assert sig == signature(SIGNING, model, text), (model, text)
    assert await refused(fake) == {}
    return requests


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_session_across_two_models_never_sends_one_the_others_thinking(start_fake_, proxy_, claude,
                                                                               stream: bool) -> None:  # fmt: skip
    fast, full = await fakes(start_fake_)
    proxy = await proxy_(policy(fast, full, "claude-fast", "claude-full"))
    agent = Conversation(claude(proxy), stream)

    tier, blocks = await agent.turn([WEATHER], user="What is the weather in Paris?")
    assert tier == "full" and blocks[-2:] == ["thinking", "tool_use"]  # fast's call broke: escalated
    full_made = original(agent.last.content[-2].signature)  # marked with its model on the way out

    tier, _ = await agent.turn([WEATHER, READ], result="sunny")  # a tool loop in progress, routed to fast
    assert tier == "fast"
    [*_, second] = await fake_requests(fast.url, path="/v1/messages")
    assert full_made not in signatures(second)
    if not stream:  # its final assistant turn lost its thinking block: the call is made without thinking
        assert "thinking" not in second["body"]  # (streamed, the client got fast's own first attempt's too)

    tier, blocks = await agent.turn([WEATHER, READ], result="no such file", error=True)
    assert (tier, blocks) == ("full", ["text"])  # sticky after the agent's error; the loop ends
    [*_, third] = await fake_requests(full.url, path="/v1/messages")
    assert full_made in signatures(third)  # its own, as it wrote it

    tier, blocks = await agent.turn([WEATHER, READ], user="Now read b.txt")  # a new turn: thinking on again
    assert (tier, blocks) == ("fast", ["thinking", "tool_use"])
    fast_made = original(agent.last.content[0].signature)
    tier, blocks = await agent.turn([WEATHER, READ], result="b")  # fast's own block goes back to fast
    assert (tier, blocks) == ("fast", ["thinking", "tool_use"])
    [*_, fifth] = await fake_requests(fast.url, path="/v1/messages")
    assert fifth["body"]["thinking"] == THINKING and fast_made in signatures(fifth)
    assert full_made not in signatures(fifth)

    tier, _ = await agent.turn([WEATHER, READ], result="no such file", error=True)
    assert tier == "full"
    [*_, sixth] = await fake_requests(full.url, path="/v1/messages")
    assert fast_made not in signatures(sixth) and full_made in signatures(sixth)
    assert "thinking" not in sixth["body"]  # fast's block led its tool loop's final turn

    await assert_only_own(fast, "claude-fast")
    await assert_only_own(full, "claude-full")


async def test_tiers_of_one_model_keep_every_thinking_block(start_fake_, proxy_, claude) -> None:
    """A fast-mode lane serves the same model: provenance is by model, not by tier name."""
    fast, full = await fakes(start_fake_)
    proxy = await proxy_(policy(fast, full, "claude-same", "claude-same", full_params="    params: {speed: fast}\n"))
    agent = Conversation(claude(proxy), stream=False)
    tier, blocks = await agent.turn([WEATHER], user="What is the weather in Paris?")
    assert (tier, blocks) == ("full", ["thinking", "tool_use"])
    thought = agent.last.content[0]
    tier, _ = await agent.turn([WEATHER, READ], result="sunny")
    assert tier == "fast"
    [*_, second] = await fake_requests(fast.url, path="/v1/messages")
    assert thinking_of(second) == [(thought.thinking, original(thought.signature))]
    assert second["body"]["thinking"] == THINKING  # kept: its tool loop still starts with its thinking block
    await assert_only_own(fast, "claude-same")
    await assert_only_own(full, "claude-same")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_responses_session_never_sends_one_model_the_others_encrypted_reasoning(
    start_fake_, proxy_, stream: bool
) -> None:
    """Codex's way (`store: false`, the whole input replayed, reasoning included encrypted) across
    two tiers that serve the Responses API themselves, of different models."""
    fast, full = await fakes(start_fake_)
    proxy = await proxy_(policy(fast, full, "gpt-mini", "gpt-main", responses=True))
    fn = [{"type": "function", "name": n, "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}
          for n in ("get_weather", "read")]  # fmt: skip
    items: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
    async with openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0) as sdk:

        async def turn(tools: list[Any], output: str | None = None) -> tuple[str, list[Any]]:
            if output is not None:
                call = next(i for i in reversed(items) if i["type"] == "function_call")
                items.append({"type": "function_call_output", "call_id": call["call_id"], "output": output})
            raw = await sdk.responses.with_raw_response.create(
                model="auto", input=items, tools=tools, store=False, include=["reasoning.encrypted_content"],
                stream=stream,
            )  # fmt: skip
            if stream:
                [done] = [e.response async for e in raw.parse() if e.type == "response.completed"]
                answer = done.output
            else:
                answer = raw.parse().output
            items.extend(i.model_dump(exclude_none=True) for i in answer)
            return raw.headers["x-router-tier"], answer

        tier, (reasoning, _) = await turn(fn[:1])
        assert tier == "full" and reasoning.type == "reasoning" and reasoning.encrypted_content.startswith(MARK)
        tier, (mine, _) = await turn(fn, output="sunny")
        assert tier == "fast"
        tier, _ = await turn(fn, output="Error: no such file")  # the agent reports the failure: sticky
        assert tier == "full"
    [*_, second] = await assert_only_own(fast, "gpt-mini", "/v1/responses")
    assert [i.get("type") for i in second["body"]["input"]].count("reasoning") == 0  # full's, left out
    call = next(i for i in second["body"]["input"] if i.get("type") == "function_call")
    assert "id" not in call  # it came with full's reasoning: its upstream id means nothing to another model
    [_, third] = await assert_only_own(full, "gpt-main", "/v1/responses")
    sealed = [i["encrypted_content"] for i in third["body"]["input"] if "encrypted_content" in i]
    assert sealed == [original(reasoning.encrypted_content)]  # its own, as it sent it; not fast's
    assert original(mine.encrypted_content) != sealed[0]


def test_chat_tiers_never_receive_reasoning_state() -> None:
    """The translations for tiers that speak only chat completions leave thinking blocks and
    reasoning items out (router/messages/translate.py, router/responses/items.py)."""
    thought = {"type": "thinking", "thinking": "secret plan", "signature": f"{MARK}0123456789ab.c2ln"}
    redacted = {"type": "redacted_thinking", "data": f"{MARK}0123456789ab.ZA=="}
    request = {"model": "m", "max_tokens": 8, "thinking": THINKING, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [thought, redacted, {"type": "text", "text": "hello"}]},
        {"role": "user", "content": "again"},
    ]}  # fmt: skip
    body, _ = chat_body(request)
    text = orjson.dumps(body).decode()
    assert "secret plan" not in text and MARK not in text and "thinking" not in body
    assert body["messages"][1] == {"role": "assistant", "content": "hello"}
    items = [{"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": f"{MARK}x.gAAAAA"},
             {"type": "message", "role": "user", "content": "hi"}]  # fmt: skip
    assert responses_chat_body({"model": "m", "input": items}, (), stream=False)[0]["messages"] == [
        {"role": "user", "content": "hi"}
    ]

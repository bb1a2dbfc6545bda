"""An agent session on real llama.cpp servers (the default engine, Qwen2.5-Coder-0.5B on both tiers, three
slots each) with sessions pinned to slots and kept warm, as policies/local.yaml has them: each turn
evaluates only what it adds, on the tier that answered before and on a tier that never did (warmed
in the background), and side calls do not evict the session's prompt. Counts are the servers' own
(`x-router-prompt-tokens`, summed over a call's attempts: the policy here makes one attempt per call,
so that each count is one prompt's; a turn lands on full by its model name, as an escalated or
sticky turn would).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from router.commands.llama import ChildFailed, LlamaServer
from router.commands.models import QWEN25_CODER_0_5B, ensure
from tests.conftest import Proxy
from tests.e2e.conftest import READY_TIMEOUT

pytestmark = [pytest.mark.llama, pytest.mark.timeout(600)]

SLOTS = 3
RULES = "\n".join(
    f"{i}. Rule {i}: keep file {i} tidy, name things for what they are, test change {i}." for i in range(120)
)
SYSTEM = f"You are a coding agent working in a repository. Follow these house rules:\n{RULES}"
TOOLS = [
    {"type": "function", "function": {"name": "read_file", "description": "Read a file of the repository.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
    {"type": "function", "function": {"name": "list_files", "description": "List the files of a directory.",
     "parameters": {"type": "object", "properties": {"dir": {"type": "string"}}, "required": ["dir"]}}},
]  # fmt: skip
POLICY = """version: 1
models:
  fast:
    model: openai/qwen2.5-coder-0.5b
    api_base: http://127.0.0.1:{fast}/v1
    timeouts: {{first_token: 600.0, total: 900.0}}  # a cold agent prompt is read for minutes on one core
    params: {{temperature: 0}}
    defaults: {{tool_choice: auto}}
    sessions: {{slots: 3, side_slots: 1, warm: true}}
  full:
    model: openai/qwen2.5-coder-0.5b
    api_base: http://127.0.0.1:{full}/v1
    timeouts: {{first_token: 600.0, total: 900.0}}  # a cold agent prompt is read for minutes on one core
    params: {{temperature: 0}}
    defaults: {{tool_choice: auto}}
    sessions: {{slots: 3, side_slots: 1, warm: true}}
routes:
  - {{name: tool-call, when: {{tools: {{present: true}}}}, use: fast, salvage: false}}
  - {{name: default, use: full}}
escalation: {{to: full, on: [], deadline: 1200.0}}
"""
RESULT = "\n".join(f"line {i}: the router sits between agents and their models" for i in range(20))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def qwen_tiers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LlamaServer, LlamaServer]]:
    model = ensure(QWEN25_CODER_0_5B, show_progress=False)  # cached by scripts/install
    logs = tmp_path_factory.mktemp("sessions")
    servers = tuple(
        LlamaServer(
            name, model, _free_port(), logs / f"{name}.log", alias=QWEN25_CODER_0_5B.alias, n_ctx=8192, slots=SLOTS
        )
        for name in ("fast", "full")
    )
    try:
        for server in servers:
            server.start()
        for server in servers:
            server.wait_ready(READY_TIMEOUT)
    except (ChildFailed, TimeoutError) as exc:
        for server in servers:
            server.stop()
        pytest.fail(f"llama.cpp did not start: {exc}\n" + "\n".join(servers[0].tail()))
    try:
        yield servers[0], servers[1]
    finally:
        for server in servers:
            server.stop()


@pytest.fixture
async def session_proxy(
    qwen_tiers: tuple[LlamaServer, LlamaServer],
    proxy_: Callable[..., Awaitable[Proxy]],
) -> AsyncIterator[tuple[Proxy, openai.AsyncOpenAI]]:
    fast, full = qwen_tiers
    proxy = await proxy_(POLICY.format(fast=fast.port, full=full.port), store="memory://")
    sdk = openai.AsyncOpenAI(base_url=proxy.url, api_key="x", max_retries=0, timeout=300.0)
    yield proxy, sdk
    await sdk.close()


def counts(headers: Any) -> tuple[int, int]:
    """(evaluated, reused) from `x-router-prompt-tokens: evaluated=N reused=M`."""
    parts = dict(p.split("=") for p in headers["x-router-prompt-tokens"].split())
    return int(parts["evaluated"]), int(parts["reused"])


async def turn(sdk: openai.AsyncOpenAI, messages: list[dict[str, Any]], model: str = "auto", **kw: Any) -> Any:
    raw = await sdk.chat.completions.with_raw_response.create(
        model=model,
        messages=messages,
        max_tokens=96,
        extra_headers={"x-session-id": "agent-1"},
        **kw,  # type: ignore[arg-type]
    )
    return raw


def next_turn(messages: list[dict[str, Any]], raw: Any) -> list[dict[str, Any]]:
    """The conversation after `raw`'s answer, with a tool result (or the user's next word)."""
    message = raw.parse().choices[0].message
    answer = message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"})
    answer.setdefault("content", "")
    calls = message.tool_calls or []
    follow = [{"role": "tool", "tool_call_id": c.id, "content": RESULT} for c in calls] or [
        {"role": "user", "content": f"Go on. Here is the file:\n{RESULT}"}
    ]
    return [*messages, answer, *follow]


async def settled(proxy: Proxy, tier: str) -> None:
    """Until the warm-ups queued for `tier` are done (bounded)."""
    for _ in range(600):
        if proxy.runtime.warming.pending(tier) == 0:
            return
        await asyncio.sleep(0.2)
    pytest.fail(f"the warm-ups of {tier} did not finish in 120 s")


async def test_each_turn_reads_only_what_it_adds_on_every_tier(session_proxy: tuple[Proxy, openai.AsyncOpenAI]) -> None:
    proxy, sdk = session_proxy
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Read notes.txt."},
    ]
    first = await turn(sdk, messages, tools=TOOLS)
    assert first.headers["x-router-tier"] == "fast"
    evaluated, reused = counts(first.headers)
    total = evaluated + reused
    assert total > 1500  # a long prompt, read once

    # turn 2 on fast: the slot kept the session's prompt
    messages = next_turn(messages, first)
    second = await turn(sdk, messages, tools=TOOLS)
    assert second.headers["x-router-tier"] == "fast"
    evaluated, reused = counts(second.headers)
    added = evaluated + reused - total
    assert reused >= total - 2 and evaluated <= 1.1 * added + 4, (evaluated, reused, added)
    total = evaluated + reused

    # side calls of the session (no tools, small) on both tiers: they take the side slot
    for model in ("fast", "full"):
        side = await turn(sdk, [{"role": "user", "content": "A three-word title for this chat?"}], model=model)
        assert side.headers["x-router-tier"] == model

    # turn 3 lands on full, which never answered this session: warmed in the background meanwhile
    await settled(proxy, "full")
    messages = next_turn(messages, second)
    third = await turn(sdk, messages, model="full", tools=TOOLS)
    assert third.headers["x-router-tier"] == "full"
    evaluated, reused = counts(third.headers)
    added = evaluated + reused - total
    assert reused >= total - 2 and evaluated <= 1.1 * added + 4, (evaluated, reused, added)
    total = evaluated + reused

    # turn 4 back on fast: fast read turn 3's prompt and answer meanwhile; the side call evicted nothing
    await settled(proxy, "fast")
    messages = next_turn(messages, third)
    fourth = await turn(sdk, messages, tools=TOOLS)
    assert fourth.headers["x-router-tier"] == "fast"
    evaluated, reused = counts(fourth.headers)
    added = evaluated + reused - total
    assert reused >= total - 2 and evaluated <= 1.1 * added + 4, (evaluated, reused, added)

    async with httpx.AsyncClient(base_url=proxy.base, timeout=10) as http:
        await proxy.runtime.store.flush()
        stats = (await http.get("/v1/router/stats")).json()
        metrics = (await http.get("/metrics")).text
    assert stats["tiers"]["fast"]["prompt_tokens"]["reused"] > 3 * 1500
    assert 'router_warm_ups_total{outcome="done",tier="full"}' in metrics


async def test_a_named_tool_choice_forces_that_call_on_llama_server(
    session_proxy: tuple[Proxy, openai.AsyncOpenAI],
) -> None:
    """llama-server ignores a named tool_choice; the tier forces the call under the tool's schema
    (router/upstream/llama_cpp.py), in the session's slot: the prompt is read from its cache."""
    _, sdk = session_proxy
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is in the docs folder?"}]
    first = await turn(sdk, messages, tools=TOOLS)
    choice = {"type": "function", "function": {"name": "list_files"}}
    options: dict[str, Any] = {"model": "fast", "messages": messages, "tools": TOOLS, "tool_choice": choice,
                               "max_tokens": 96, "extra_headers": {"x-session-id": "agent-1"}}  # fmt: skip
    raw = await sdk.chat.completions.with_raw_response.create(**options)
    [call] = raw.parse().choices[0].message.tool_calls or []
    assert call.function.name == "list_files" and isinstance(orjson.loads(call.function.arguments)["dir"], str)
    evaluated, reused = counts(raw.headers)
    assert reused >= sum(counts(first.headers)) - 2 and evaluated < 20, (evaluated, reused)
    stream = await sdk.chat.completions.create(**options, stream=True)
    calls = [tc for chunk in [c async for c in stream] for ch in chunk.choices for tc in ch.delta.tool_calls or []]
    assert calls[0].function and calls[0].function.name == "list_files"
    assert isinstance(orjson.loads("".join(tc.function.arguments or "" for tc in calls if tc.function))["dir"], str)

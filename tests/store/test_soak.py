"""A soak, bounded (about a minute): two replicas on one Redis, scripted agent sessions on every
transport — chat completions (JSON and SSE), Responses over HTTP (chained by `previous_response_id`)
and over its WebSocket mode, Anthropic Messages — through a fake upstream that breaks tool calls,
fails with 500s and cuts streams, while Redis is frozen again and again and one replica restarts.

Each agent sends its turns to the replicas in turn (a load balancer's round robin) and, as agent
CLIs do, sends a turn again when it got no answer (a replica going away, every attempt failing).
What must hold: every session ends on its own with its text answer; no tool call reaches an agent
twice; the calls the stores counted (answered, failed, or cut off unanswered) equal the calls the
upstream got; and each live replica's Redis pool is whole at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import orjson
import pytest
import websockets

from router.app import create_app
from router.fake import FakeConfig, FakeServer
from router.settings import Settings
from tests.api.helpers import root
from tests.conftest import policy_text, start_uvicorn, stop_uvicorn
from tests.store.conftest import RedisServer, free_port
from tests.store.test_redis_outage import wait_until

pytestmark = [pytest.mark.redis, pytest.mark.timeout(240)]

TURNS = 8  # a session's turns at most (the fake answers text after two tool results)
RESENDS = 6  # an agent sends a turn again at most so many times
SESSIONS = 3  # agents per transport, each running sessions one after another
ROUNDS = 40  # sessions an agent runs at most
STALLS = 8  # times Redis is frozen
PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CHAT_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": PARAMS}}
RESPONSES_TOOL = {"type": "function", "name": "get_weather", "parameters": PARAMS}
MESSAGES_TOOL = {"name": "get_weather", "input_schema": PARAMS}


@dataclass
class Replicas:
    """The replicas up now, handed out in turn; one can be restarted (a new app on a new port)."""

    policy: Path
    bases: list[str] = field(default_factory=list)
    servers: dict[str, tuple[Any, asyncio.Task[None], Any]] = field(default_factory=dict)
    turn: itertools.count[int] = field(default_factory=itertools.count)

    async def start(self) -> str:
        app = create_app(Settings(policy=self.policy, reload_policy=False))
        server, task, base = await start_uvicorn(app)
        self.servers[base] = (server, task, app)
        self.bases.append(base)
        return base

    def next(self) -> str:
        return self.bases[next(self.turn) % len(self.bases)]

    async def restart(self, base: str) -> str:
        self.bases.remove(base)  # the balancer stops sending it new turns, then it drains and stops
        server, task, _ = self.servers.pop(base)
        await stop_uvicorn(server, task)
        return await self.start()

    async def close(self) -> None:
        for base in list(self.servers):
            server, task, _ = self.servers.pop(base)
            await stop_uvicorn(server, task)


@dataclass
class Agent:
    """One scripted session: what it was delivered, and how it ended."""

    name: str
    calls: list[str] = field(default_factory=list)  # the tool call ids delivered, in order
    answers: list[str] = field(default_factory=list)  # each session's final text, in order
    resent: int = 0


async def resending(agent: Agent, turn: Callable[[], Awaitable[Any]]) -> Any:
    """A turn, sent again when it got no answer, as an agent CLI does (bounded)."""
    for attempt in range(RESENDS + 1):
        try:
            return await turn()
        except (openai.APIError, anthropic.APIError, aiohttp.ClientError, OSError, websockets.WebSocketException,
                NoAnswer):  # fmt: skip
            if attempt == RESENDS:
                raise
            agent.resent += 1
            await asyncio.sleep(0.2)
    raise AssertionError("unreachable")


class NoAnswer(Exception):
    pass


async def chat_session(agent: Agent, replicas: Replicas, stream: bool) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"{agent.name}: weather in Paris?"}]
    headers = {"x-session-id": agent.name}
    for _ in range(TURNS):

        async def turn() -> dict[str, Any]:
            async with openai.AsyncOpenAI(base_url=replicas.next() + "/v1", api_key="x", max_retries=0) as sdk:
                if not stream:
                    reply = await sdk.chat.completions.create(
                        model="auto",
                        messages=messages,
                        tools=[CHAT_TOOL],
                        extra_headers=headers,  # type: ignore[arg-type]
                    )
                    return reply.choices[0].message.model_dump(exclude_none=True)
                text, calls = "", {}
                async for chunk in await sdk.chat.completions.create(
                    model="auto",
                    messages=messages,
                    tools=[CHAT_TOOL],
                    stream=True,
                    extra_headers=headers,  # type: ignore[arg-type]
                ):
                    delta = chunk.choices[0].delta if chunk.choices else None
                    text += (delta.content or "") if delta else ""
                    for call in (delta.tool_calls or ()) if delta else ():
                        got = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                        got["id"] = call.id or got["id"]
                        got["name"] = (call.function.name if call.function else None) or got["name"]
                        got["arguments"] += (call.function.arguments if call.function else None) or ""
                tool_calls = [
                    {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                    for c in calls.values()
                ]
                return {"role": "assistant", "content": text, **({"tool_calls": tool_calls} if tool_calls else {})}

        message = await resending(agent, turn)
        messages.append(message)
        if not message.get("tool_calls"):
            agent.answers.append(message.get("content") or "")
            return
        for call in message["tool_calls"]:
            orjson.loads(call["function"]["arguments"])  # checked: valid JSON reached the agent
            agent.calls.append(call["id"])
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": "sunny"})


async def responses_session(agent: Agent, replicas: Replicas) -> None:
    previous: str | None = None
    pending: list[dict[str, Any]] = [{"role": "user", "content": f"{agent.name}: weather in Paris?"}]
    history: list[dict[str, Any]] = list(pending)
    for _ in range(TURNS):

        async def turn(previous: str | None = previous, pending: list[Any] = pending) -> Any:
            async with openai.AsyncOpenAI(base_url=replicas.next() + "/v1", api_key="x", max_retries=0) as sdk:
                asked = {"previous_response_id": previous, "input": pending} if previous else {"input": history}
                try:
                    return await sdk.responses.create(model="auto", tools=[RESPONSES_TOOL], **asked)  # type: ignore[arg-type,call-overload]
                except openai.BadRequestError as exc:
                    if "previous_response_not_found" not in str(exc):
                        raise
                return await sdk.responses.create(model="auto", input=history, tools=[RESPONSES_TOOL])  # type: ignore[arg-type,list-item]

        response = await resending(agent, turn)
        calls = [item for item in response.output if item.type == "function_call"]
        if not calls:
            agent.answers.append(response.output_text)
            return
        previous, pending = response.id, []
        for call in calls:
            orjson.loads(call.arguments)
            agent.calls.append(call.call_id)
            history.append({"type": "function_call", "call_id": call.call_id, "name": call.name,
                            "arguments": call.arguments})  # fmt: skip
            output = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
            history.append(output)
            pending.append(output)


async def websocket_session(agent: Agent, replicas: Replicas) -> None:
    history: list[dict[str, Any]] = [{"role": "user", "content": f"{agent.name}: weather in Paris?"}]
    for _ in range(TURNS):

        async def turn(history: list[Any] = history) -> list[dict[str, Any]]:  # a socket per turn: any replica
            url = replicas.next().replace("http://", "ws://") + "/v1/responses"
            async with websockets.connect(url, open_timeout=5, close_timeout=1) as ws:
                await ws.send(orjson.dumps({"type": "response.create", "model": "auto", "input": history,
                                            "tools": [RESPONSES_TOOL], "store": False}).decode())  # fmt: skip
                async with asyncio.timeout(30):
                    async for raw in ws:
                        event = orjson.loads(raw)
                        if event["type"] == "response.completed":
                            return list(event["response"]["output"])
                        if event["type"] in ("error", "response.failed"):
                            raise NoAnswer(str(event)[:200])
            raise NoAnswer("the socket closed before the response completed")

        output = await resending(agent, turn)
        calls = [item for item in output if item.get("type") == "function_call"]
        if not calls:
            agent.answers.append("".join(c.get("text", "") for item in output for c in item.get("content") or ()))
            return
        for call in calls:
            orjson.loads(call["arguments"])
            agent.calls.append(call["call_id"])
            history = [*history, {"type": "function_call", "call_id": call["call_id"], "name": call["name"],
                                  "arguments": call["arguments"]},
                       {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}]  # fmt: skip


async def messages_session(agent: Agent, replicas: Replicas) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"{agent.name}: weather in Paris?"}]
    for _ in range(TURNS):

        async def turn() -> Any:
            async with anthropic.AsyncAnthropic(base_url=replicas.next(), api_key="x", max_retries=0) as sdk:
                return await sdk.messages.create(model="auto", max_tokens=256, messages=messages,  # type: ignore[arg-type]
                                                 tools=[MESSAGES_TOOL], extra_headers={"x-session-id": agent.name})  # type: ignore[list-item]  # fmt: skip

        message = await resending(agent, turn)
        blocks = [b.model_dump() for b in message.content]
        messages.append({"role": "assistant", "content": blocks})
        uses = [b for b in blocks if b["type"] == "tool_use"]
        if not uses:
            agent.answers.append("".join(b.get("text", "") for b in blocks))
            return
        agent.calls += [b["id"] for b in uses]
        messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": b["id"], "content": "sunny"}
                                                     for b in uses]})  # fmt: skip


async def chaos(redis: RedisServer, replicas: Replicas) -> dict[str, int]:
    """Redis frozen most of each second, eight times; one replica restarted after the third."""
    assert redis.proc is not None
    seen = {"stalls": 0, "restarts": 0}
    for _ in range(STALLS):
        await asyncio.sleep(0.5)
        os.kill(redis.proc.pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(1.0)
        finally:
            os.kill(redis.proc.pid, signal.SIGCONT)
        seen["stalls"] += 1
        if seen["stalls"] == 3:
            await replicas.restart(replicas.bases[0])
            seen["restarts"] += 1
    return seen


async def sessions(agent: Agent, run: Callable[[Agent], Awaitable[None]], done: asyncio.Event) -> None:
    """Sessions one after another until the troubles are over (at most `ROUNDS`)."""
    for _ in range(ROUNDS):
        await run(agent)
        if done.is_set():
            return


async def test_sessions_on_every_transport_through_redis_stalls_and_a_restart(
    redis_server_factory: Callable[[int], RedisServer], start_fake_: Callable[..., Awaitable[FakeServer]],
    tmp_path: Path,
) -> None:  # fmt: skip
    redis = redis_server_factory(free_port())
    redis.start()
    fake = await start_fake_(FakeConfig(seed=11, bad_tool_rate=0.25, error_rate=0.03, reset_mid_stream=0.02,
                                        finish_after=2, chunk_delay_ms=2))  # fmt: skip
    policy = tmp_path / "policy.yaml"
    policy.write_text(policy_text(fake.url, extra="escalation: {to: full}\n").replace("memory://", redis.url))
    replicas = Replicas(policy)
    await replicas.start()
    await replicas.start()
    agents = [Agent(f"soak-{kind}-{i}") for kind in ("chat", "sse", "responses", "ws", "messages")
              for i in range(SESSIONS)]  # fmt: skip
    runs = {"chat": lambda a: chat_session(a, replicas, False), "sse": lambda a: chat_session(a, replicas, True),
            "responses": lambda a: responses_session(a, replicas), "ws": lambda a: websocket_session(a, replicas),
            "messages": lambda a: messages_session(a, replicas)}  # fmt: skip
    done = asyncio.Event()
    troubles = asyncio.create_task(chaos(redis, replicas))
    troubles.add_done_callback(lambda _: done.set())
    try:
        async with asyncio.timeout(180):
            results = await asyncio.gather(
                *(sessions(a, runs[a.name.split("-")[1]], done) for a in agents), return_exceptions=True
            )
        seen = await troubles
        failed = [(a.name, r) for a, r in zip(agents, results, strict=True) if isinstance(r, BaseException)]
        assert failed == []
        assert all(a.answers and all(a.answers) for a in agents), [(a.name, a.answers) for a in agents]
        for a in agents:
            assert len(a.calls) == len(set(a.calls)), (a.name, a.calls)  # no tool call delivered twice
        assert seen == {"stalls": STALLS, "restarts": 1}
        for _, _, app in replicas.servers.values():
            await app.state.runtime.store.flush()
        base = replicas.bases[-1]
        async with aiohttp.ClientSession() as s, s.get(base + "/v1/router/stats") as r:
            stats = await r.json()
        # a tier's calls, and those cut off unanswered (a turn cut by the restart): every request it got
        counted = sum(t.get("calls", 0) + t.get("cancelled", 0) for t in stats["tiers"].values())
        async with aiohttp.ClientSession() as s, s.get(root(fake.url) + "/_fake/stats") as r:
            upstream = (await r.json())["model_calls"]  # every model call it got (its request log keeps 100)
        assert counted == upstream, (counted, upstream, stats["store"])
        for _, _, app in replicas.servers.values():
            pool = app.state.runtime.store._redis.connection_pool
            assert await wait_until(lambda pool=pool: not pool._in_use_connections, 3), pool._in_use_connections
        print(f"soak: {sum(len(a.answers) for a in agents)} sessions, {sum(len(a.calls) for a in agents)} tool calls, "
              f"{sum(a.resent for a in agents)} turns sent again, {upstream} upstream calls, {seen}")  # fmt: skip
    finally:
        troubles.cancel()
        with contextlib.suppress(BaseException):
            await troubles
        if redis.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(redis.proc.pid, signal.SIGCONT)
        await replicas.close()

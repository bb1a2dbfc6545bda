"""The agent loop of the TTFT benchmark, three ways, through the official openai SDK.

A coding agent's tool loop: the model calls `read_file`, the agent answers with the file's text
(`OUTPUT_BYTES` per result), for `turns` turns. Each way times every turn:

  new-connection   HTTPS, a new TCP + TLS connection per turn (no keep-alive), full history each turn
  keep-alive       HTTPS on one kept-alive connection, full history each turn
  websocket        one WebSocket (wss) connection; each turn sends only the tool result and
                   `previous_response_id`; the connection set-up is counted in the end-to-end time
  websocket-raw    the same protocol from a thin client (`websockets` + orjson, no SDK): what the
                   proxy and the network cost, without the SDK's own per-event and per-item work

TTFT = from just before the request is sent to the first output delta event
(`response.function_call_arguments.delta` or `response.output_text.delta`).
"""

from __future__ import annotations

import ssl
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai
import orjson
import websockets

READ_FILE = {
    "type": "function",
    "name": "read_file",
    "description": "Read a file of the repository",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
}
TOOLS: list[Any] = [READ_FILE]
DELTAS = {"response.function_call_arguments.delta", "response.output_text.delta"}
OUTPUT_BYTES = 2048
TASK = "Find where the retry budget is computed and explain it. Read the files you need."


@dataclass
class Run:
    mode: str
    ttft: list[float] = field(default_factory=list)  # seconds, per turn
    turn: list[float] = field(default_factory=list)  # seconds, per turn (request to response.completed)
    e2e: float = 0.0  # seconds: client creation / connection to the last response.completed


def tool_result(turn: int) -> str:
    line = f"# file {turn}: retry budget = base * 2 ** attempt, capped; see policy.escalation\n"
    return (line * (OUTPUT_BYTES // len(line) + 1))[:OUTPUT_BYTES]


def _call(response: Any) -> Any:
    calls = [item for item in response.output if item.type == "function_call"]
    if not calls:
        raise RuntimeError(f"turn ended without a tool call: {response.output!r}")
    return calls[0]


def _answer(call: Any, turn: int) -> list[dict[str, Any]]:
    """The items a turn adds to the conversation: the model's call and the agent's result."""
    made = {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments}
    return [made, {"type": "function_call_output", "call_id": call.call_id, "output": tool_result(turn)}]


async def _timed(events: Any, t0: float, run: Run, *, drain: bool) -> Any:
    """Consume one response's events; record TTFT and turn time; return the completed response.
    `drain`: read an HTTP stream to its end after `response.completed`, so that its connection can
    be reused (a response closed before its end closes its connection)."""
    first = None
    async for event in events:
        if first is None and event.type in DELTAS:
            first = time.perf_counter() - t0
        if event.type == "response.completed":
            run.ttft.append(first if first is not None else float("nan"))
            run.turn.append(time.perf_counter() - t0)
            if drain:
                async for _ in events:
                    pass
            return event.response
        if event.type in ("error", "response.failed", "response.incomplete"):
            raise RuntimeError(f"response failed: {event!r}")
    raise RuntimeError("stream ended without response.completed")


@asynccontextmanager
async def _client(url: str, ctx: ssl.SSLContext, keep_alive: bool) -> AsyncIterator[openai.AsyncOpenAI]:
    limits = httpx.Limits(max_keepalive_connections=None if keep_alive else 0)
    http = httpx.AsyncClient(verify=ctx, limits=limits, timeout=30)
    client = openai.AsyncOpenAI(base_url=url, api_key="bench", max_retries=0, http_client=http)
    try:
        yield client
    finally:
        await client.close()


async def http_loop(url: str, ctx: ssl.SSLContext, turns: int, *, keep_alive: bool) -> Run:
    run = Run("keep-alive" if keep_alive else "new-connection")
    start = time.perf_counter()
    async with _client(url, ctx, keep_alive) as client:
        items: list[Any] = [{"role": "user", "content": TASK}]
        for turn in range(turns):
            t0 = time.perf_counter()
            stream: Any = await client.responses.create(
                model="auto", input=items, tools=TOOLS, stream=True, store=False
            )
            async with stream:
                response = await _timed(stream, t0, run, drain=True)
            items += _answer(_call(response), turn)
        run.e2e = time.perf_counter() - start
    return run


async def websocket_loop(url: str, ctx: ssl.SSLContext, turns: int) -> Run:
    run = Run("websocket")
    start = time.perf_counter()
    async with (
        _client(url, ctx, keep_alive=True) as client,
        client.responses.connect(websocket_connection_options={"ssl": ctx}) as conn,  # type: ignore[typeddict-unknown-key]
    ):
        new: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
        previous: str | None = None
        for turn in range(turns):
            t0 = time.perf_counter()
            extra = {"previous_response_id": previous} if previous else {}
            await conn.response.create(model="auto", input=new, tools=TOOLS, store=False, **extra)  # type: ignore[arg-type]
            response = await _timed(conn, t0, run, drain=False)
            previous = response.id
            new = _answer(_call(response), turn)[1:]  # only the tool result: the call is in the server's state
        run.e2e = time.perf_counter() - start
    return run


async def websocket_raw_loop(url: str, ctx: ssl.SSLContext, turns: int) -> Run:
    run = Run("websocket-raw")
    start = time.perf_counter()
    async with websockets.connect(url.replace("https://", "wss://") + "/responses", ssl=ctx) as ws:
        new: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
        previous: str | None = None
        for turn in range(turns):
            t0 = time.perf_counter()
            event: dict[str, Any] = {"type": "response.create", "model": "auto", "input": new, "tools": TOOLS}
            if previous:
                event["previous_response_id"] = previous
            await ws.send(orjson.dumps(event).decode())
            first = None
            for _ in range(10_000):
                data = orjson.loads(await ws.recv())
                if first is None and data["type"] in DELTAS:
                    first = time.perf_counter() - t0
                if data["type"] == "response.completed":
                    break
                if data["type"] == "error":
                    raise RuntimeError(f"response failed: {data!r}")
            run.ttft.append(first if first is not None else float("nan"))
            run.turn.append(time.perf_counter() - t0)
            response = data["response"]
            previous = response["id"]
            [call] = [item for item in response["output"] if item["type"] == "function_call"]
            new = [{"type": "function_call_output", "call_id": call["call_id"], "output": tool_result(turn)}]
        run.e2e = time.perf_counter() - start
    return run


async def upstream_ttft(fake_url: str, samples: int) -> list[float]:
    """The upstream's own TTFT, as this client sees it: a chat stream straight to the fake on one
    kept-alive httpx connection (each body read to its end, so the connection is reused)."""
    out: list[float] = []
    chat_tools = [{"type": "function", "function": {k: v for k, v in READ_FILE.items() if k != "type"}}]
    body = {"model": "fake-model", "messages": [{"role": "user", "content": TASK}], "tools": chat_tools, "stream": True}
    async with httpx.AsyncClient(timeout=30) as client:
        for _ in range(samples):
            t0 = time.perf_counter()
            first = None
            async with client.stream("POST", fake_url + "/chat/completions", json=body) as resp:
                async for line in resp.aiter_lines():
                    if first is None and '"tool_calls"' in line:
                        first = time.perf_counter() - t0
            out.append(first if first is not None else float("nan"))
    return out

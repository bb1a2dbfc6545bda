"""The fake upstream's fault plan for one request: what the ``x-fake-fault`` header forces, plus the
config's seeded rates (router/fake/calls.py documents both)."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from router.fake.tools import BAD_KINDS

if TYPE_CHECKING:
    from router.fake.config import FakeConfig


@dataclass(slots=True)
class Plan:
    status: int = 0
    reset: bool = False
    reset_mid: bool = False
    malformed: bool = False
    bad_kind: str | None = None
    delay_ms: float = 0.0
    first_ms: float = 0.0
    endless: bool = False
    looping: bool = False


def parse_faults(header: str, plan: Plan) -> str | None:
    """Apply ``x-fake-fault`` to ``plan``; return an error message for a bad header."""
    flags = {
        "reset": "reset", "reset-mid-stream": "reset_mid", "malformed-sse": "malformed", "endless": "endless",
        "loop": "looping",
    }  # fmt: skip
    for item in filter(None, (part.strip() for part in header.split(","))):
        name, _, arg = item.partition(":")
        try:
            if item.isdigit() and 400 <= int(item) <= 599:
                plan.status = int(item)
            elif item in flags:
                setattr(plan, flags[item], True)
            elif name == "bad-tool" and arg in BAD_KINDS:
                plan.bad_kind = arg
            elif name in ("slow-first-token", "delay"):
                setattr(plan, "first_ms" if name == "slow-first-token" else "delay_ms", float(arg))
            else:
                return f"x-fake-fault: unknown fault {item!r}"
        except ValueError:
            return f"x-fake-fault: bad value in {item!r}"
    return None


def plan_of(header: str | None, rng: random.Random, cfg: FakeConfig) -> Plan | str:
    """The request's plan, or an error message for a bad header (then nothing is drawn)."""
    plan = Plan(delay_ms=cfg.delay_ms, first_ms=cfg.first_token_delay_ms, endless=cfg.endless, looping=cfg.looping)
    problem = parse_faults(header, plan) if header else None
    if problem:
        return problem
    draw = rng.random  # always four draws, whatever the header forces
    reset, error, reset_mid, malformed = (
        draw() < cfg.reset_before_first_byte,
        draw() < cfg.error_rate,
        draw() < cfg.reset_mid_stream,
        draw() < cfg.malformed_sse,
    )
    plan.reset, plan.reset_mid, plan.malformed = (
        plan.reset or reset,
        plan.reset_mid or reset_mid,
        plan.malformed or malformed,
    )
    plan.status = plan.status or (500 if error else 0)
    return plan


async def send_endless(request: web.Request, stream: bool, tool: str | None) -> web.StreamResponse:
    """An answer that never ends, until the peer goes away: a JSON body whose text goes on forever, or
    a chat stream of one tool call (`tool`) whose arguments go on forever (text when `tool` is None)."""
    content_type = "text/event-stream" if stream else "application/json"
    resp = web.StreamResponse(headers={"Content-Type": content_type})
    await resp.prepare(request)
    if not stream:
        await resp.write(b'{"id": "endless", "object": "chat.completion", "choices": [{"message": {"content": "')
        block = b"a" * 65536
    else:
        base = {"id": "endless", "object": "chat.completion.chunk", "model": "fake-model"}
        head: dict[str, Any] = {"role": "assistant", "content": None if tool else ""}
        if tool:
            head["tool_calls"] = [{"index": 0, "id": "call_endless", "type": "function", "function": {"name": tool}}]
        first = {**base, "choices": [{"index": 0, "delta": head, "finish_reason": None}]}
        await resp.write(b"data: " + orjson.dumps(first) + b"\n\n")
        delta = {"tool_calls": [{"index": 0, "function": {"arguments": "a" * 100}}]} if tool else {"content": "a" * 100}
        event = b"data: " + orjson.dumps({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        block = (event + b"\n\n") * 100
    try:
        while True:
            await resp.write(block)
            await asyncio.sleep(0)
    except (ConnectionError, RuntimeError):  # the peer went away (aiohttp: ClientConnectionResetError)
        return resp


async def send_looping(
    request: web.Request, stream: bool, unit: str, max_tokens: int, gap: float
) -> tuple[web.StreamResponse, bool]:
    """A chat answer that goes round in a loop, as a small model answering greedily does: `unit`
    written again and again until `max_tokens` (a token: 4 characters), finish "length". A stream
    writes one token per event, `gap` seconds apart, and stops when the peer goes away. Returns the
    response and whether the peer left before its end."""
    text = (unit * (max_tokens * 4 // len(unit) + 1))[: max_tokens * 4]
    base = {"id": "chatcmpl-loop", "object": "chat.completion.chunk", "model": "fake-model"}
    if not stream:
        message = {"role": "assistant", "content": text}
        usage = {"prompt_tokens": 1, "completion_tokens": max_tokens, "total_tokens": max_tokens + 1}
        answer = {**base, "object": "chat.completion", "usage": usage,
                  "choices": [{"index": 0, "message": message, "finish_reason": "length"}]}  # fmt: skip
        return web.json_response(answer, dumps=lambda o: orjson.dumps(o).decode()), False
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)

    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return b"data: " + orjson.dumps({**base, "choices": [choice]}) + b"\n\n"

    try:
        await resp.write(event({"role": "assistant", "content": ""}))
        for at in range(0, len(text), 4):
            await resp.write(event({"content": text[at : at + 4]}))
            await asyncio.sleep(gap)
        await resp.write(event({}, "length") + b"data: [DONE]\n\n")
        await resp.write_eof()
    except (ConnectionError, RuntimeError):  # the peer went away (aiohttp: ClientConnectionResetError)
        return resp, True
    return resp, False

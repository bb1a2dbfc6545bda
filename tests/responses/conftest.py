"""Fixtures and helpers of the Responses API tests (HTTP, SSE, WebSocket mode)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import aiohttp

from tests.api.helpers import root, sdk
from tests.store.conftest import redis_base_url, redis_server_factory

__all__ = ["redis_base_url", "redis_server_factory", "sdk"]  # fixtures of the tests here

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
TOOLS = [WEATHER]
TERMINAL = {"response.completed", "response.incomplete", "response.failed", "error"}

# The event order of one streamed response (types joined by spaces).
TEXT_ITEM = (
    r"response\.output_item\.added response\.content_part\.added (response\.output_text\.delta )+"
    r"response\.output_text\.done response\.content_part\.done response\.output_item\.done"
)
CALL_ITEM = (
    r"response\.output_item\.added (response\.function_call_arguments\.delta )+"
    r"response\.function_call_arguments\.done response\.output_item\.done"
)


def assert_order(types: list[str], item: str) -> None:
    """created, in_progress, the items, completed; sequence numbers are checked by the callers."""
    joined = " ".join(types)
    pattern = rf"response\.created response\.in_progress ({item} )+response\.completed"
    assert re.fullmatch(pattern, joined), joined


async def recv_response(conn: Any, limit: int = 5000) -> list[Any]:
    """Events of one response on a WebSocket connection, up to its terminal event (10 s each at most)."""
    out: list[Any] = []
    for _ in range(limit):
        event = await asyncio.wait_for(conn.recv(), 10)
        out.append(event)
        if event.type in TERMINAL:
            return out
    raise AssertionError(f"no terminal event in {limit} events")


async def fake_stats(fake_url: str) -> dict[str, int]:
    async with aiohttp.ClientSession() as s, s.get(root(fake_url) + "/_fake/stats") as r:
        return await r.json()  # type: ignore[no-any-return]


async def fake_log(fake_url: str) -> list[dict[str, Any]]:
    """Everything a fake upstream recorded: HTTP requests, WebSocket upgrades (GET) and messages (WS)."""
    async with aiohttp.ClientSession() as s, s.get(root(fake_url) + "/_fake/requests") as r:
        return await r.json()  # type: ignore[no-any-return]


def socket_messages(log: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The `response.create` messages a fake received on its WebSockets, in order."""
    return [e for e in log if e["method"] == "WS"]

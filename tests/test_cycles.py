"""Served calls leave no reference cycles behind.

A call's objects (uvicorn's request cycle, its scope and headers, the router's call, trace and
parsed body, tenacity's loop) are freed by reference counting the moment it ends. Objects caught in
a reference cycle wait for the garbage collector instead, whose collections then scan thousands of
them at once: pauses of 10 ms and more under load, in the latency of every call in flight (found
under `bench.cpu`'s loads: young collections of 9 to 33 ms every ~1,700 calls). Every transport,
escalations, failing tiers, cut streams and abandoned calls are served with the collector saving
what it finds; nothing of the router's, uvicorn's, Starlette's or tenacity's may be among it.
(Connections that close leave the asyncio transports' own cycles; the test loop is asyncio's, not
uvloop's.)
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from typing import Any

import aiohttp
import orjson
import pytest

from router.fake import FakeConfig
from tests.api.helpers import TOOLS, USER, fake_requests
from tests.conftest import policy_text
from tests.security.test_slow_clients import until

OURS = ("router", "uvicorn", "starlette", "tenacity")
KINDS = [
    ("/chat/completions", {"tools": TOOLS}),
    ("/chat/completions", {"tools": TOOLS, "stream": True}),
    ("/messages", {"max_tokens": 64}),
    ("/messages", {"max_tokens": 64, "stream": True}),
    ("/responses", {}),
    ("/responses", {"stream": True}),
]
TIERS = {
    "answered": FakeConfig(seed=1),
    "escalated": FakeConfig(seed=1, bad_tool_rate=1.0),  # every tool call broken: repaired, then full
    "failing": FakeConfig(seed=1, error_rate=1.0),  # HTTP 500: retried, then a retryable error
    "cut": FakeConfig(seed=1, reset_mid_stream=1.0),  # streams cut after a few events
    "abandoned": FakeConfig(seed=1, delay_ms=3000),  # given up by the client after 0.3 s
}


def _module(obj: Any) -> str:
    module = getattr(obj, "__module__", None) if callable(obj) and not isinstance(obj, type) else None
    return module if isinstance(module, str) else type(obj).__module__


@pytest.fixture
def collector_saving() -> Iterator[None]:
    """The collector off while the test runs; what it then finds unreachable kept in `gc.garbage`."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield
    finally:
        gc.set_debug(0)
        gc.collect()
        gc.garbage.clear()
        gc.enable()


def _ours() -> list[str]:
    gc.collect()
    return sorted({f"{_module(o)}: {type(o).__qualname__}" for o in gc.garbage if _module(o).split(".")[0] in OURS})


async def _call(session: aiohttp.ClientSession, url: str, body: bytes, give_up: float | None = None) -> int:
    try:
        async with asyncio.timeout(give_up), session.post(url, data=body) as r:
            await r.read()
            return r.status
    except (TimeoutError, aiohttp.ClientPayloadError):
        return 0  # given up, or a stream the router ended with an error


@pytest.mark.parametrize("tier", list(TIERS))
async def test_calls_leave_no_reference_cycles(start_fake_, proxy_, collector_saving, tier: str) -> None:
    fast = await start_fake_(TIERS[tier])
    full = await start_fake_(FakeConfig(seed=2) if tier in ("answered", "escalated") else TIERS[tier])
    proxy = await proxy_(policy_text(fast.url, full.url, breakers=False))
    give_up = 0.3 if tier == "abandoned" else None
    statuses = set()
    headers = {"content-type": "application/json"}
    async with aiohttp.ClientSession(headers=headers, timeout=aiohttp.ClientTimeout(total=30)) as session:
        for path, extra in KINDS:
            body = {"model": "auto", "input" if path == "/responses" else "messages": USER, **extra}
            for _ in range(2):
                statuses.add(await _call(session, proxy.url + path, orjson.dumps(body), give_up))
    async with asyncio.timeout(5):  # the abandoned calls' ends reach the router
        await until(lambda: not proxy.runtime.inflight)
    assert not (ours := _ours()), ours
    assert statuses == {"answered": {200}, "escalated": {200}, "abandoned": {0}}.get(tier, statuses), statuses


COSTLY = {"type": "object", "properties": {"q": {"type": "string", "pattern": r"[\w\W]{50000}"}}}
REFUSED = [  # (body, status): refused before any tier is asked
    (b"{not json", 400),
    (orjson.dumps({"messages": USER}), 400),  # no model
    (orjson.dumps({"model": "auto", "messages": USER, "api_base": "http://elsewhere"}), 400),
    (orjson.dumps({"model": "auto", "messages": USER, "tools": [
        {"type": "function", "function": {"name": "find", "parameters": COSTLY}}
    ]}), 400),  # a schema too costly to check
]  # fmt: skip


async def test_refused_calls_leave_no_reference_cycles(start_fake_, proxy_, collector_saving) -> None:
    fast = await start_fake_(FakeConfig(seed=1))
    proxy = await proxy_(policy_text(fast.url))
    headers = {"content-type": "application/json"}
    async with aiohttp.ClientSession(headers=headers, timeout=aiohttp.ClientTimeout(total=30)) as session:
        for body, status in REFUSED:
            for _ in range(2):
                assert await _call(session, proxy.url + "/chat/completions", body) == status
    assert not (ours := _ours()), ours


async def test_fast_mode_fallbacks_leave_no_reference_cycles(start_fake_, proxy_, collector_saving) -> None:
    """A fast-mode request refused, then sent at standard speed (router/upstream/anthropic.py)."""
    claude = await start_fake_(FakeConfig(seed=1, fast_models=()))  # no model has fast mode: every call falls back
    base = claude.url.removesuffix("/v1")
    proxy = await proxy_(
        "version: 1\nstore: memory://\nroutes: [{name: default, use: full}]\nmodels:\n  full: {model: "
        f"anthropic/claude-opus-4-6, api_base: '{base}', api_key: k, speed: fast, warm_connections: 0}}\n"
    )
    headers = {"content-type": "application/json"}
    async with aiohttp.ClientSession(headers=headers, timeout=aiohttp.ClientTimeout(total=30)) as session:
        for extra in ({}, {"stream": True}):
            body = orjson.dumps({"model": "auto", "messages": USER, "max_tokens": 64, **extra})
            for _ in range(2):
                assert await _call(session, proxy.url + "/messages", body) == 200
    assert not (ours := _ours()), ours
    assert len(await fake_requests(claude.url, path="/v1/messages")) == 8  # each refused once, then answered

"""router/core/live/context.py: which context window counts for each tier — the policy's, its server's
report, its errors' word — asked of real servers (the fake upstream with a llama-server context)."""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

from router.core.live.context import Windows
from router.fake import FakeConfig, start_fake
from router.policy.loader import parse_policy
from router.policy.model import Policy
from router.upstream import Upstreams


def two_tiers(fast_url: str, full_url: str, fast: str = "", full: str = "") -> Policy:
    text = f"""
version: 1
models:
  fast: {{model: openai/fast-model, api_base: "{fast_url}", warm_connections: 0, timeouts: {{connect: 1}}{fast}}}
  full: {{model: openai/full-model, api_base: "{full_url}", warm_connections: 0, timeouts: {{connect: 1}}{full}}}
routes: [{{name: default, use: full}}]
store: memory://
"""
    return parse_policy(text, "p.yaml", {})


async def windows_of(policy: Policy, refresh: float = 60.0) -> tuple[Upstreams, Windows]:
    upstreams = Upstreams(warm=False)
    await upstreams.apply(policy)
    windows = Windows(upstreams, refresh)
    windows.apply(policy)
    await windows.settled(5)
    return upstreams, windows


async def test_the_least_known_window_counts(start_fake_: Any, caplog: Any) -> None:
    llama = await start_fake_(FakeConfig(n_ctx=4096))
    plain = await start_fake_()  # reports none, as llama-cpp-python's server or OpenAI
    policy = two_tiers(llama.url, plain.url, fast=", context_window: 32768")
    with caplog.at_level(logging.WARNING, logger="router.context"):
        upstreams, windows = await windows_of(policy)
    try:
        assert windows.known() == {"fast": 4096}  # the server's, less than the policy's; full: not known
        assert any("less than the policy's context_window 32768" in r.getMessage() for r in caplog.records)
        windows.learned("full", 128_000)  # its own context error said so
        windows.learned("nope", 5)  # not a tier: nothing
        windows.learned("fast", None)  # an error that named no window: nothing
        assert windows.known() == {"fast": 4096, "full": 128_000}
        windows.learned("fast", 2048)  # less than its report: the least counts
        assert windows.known()["fast"] == 2048
    finally:
        await windows.close()
        await upstreams.close()


async def test_a_policy_window_counts_where_the_server_reports_none(start_fake_: Any) -> None:
    plain = await start_fake_()
    upstreams, windows = await windows_of(two_tiers(plain.url, plain.url, full=", context_window: 8192"))
    try:
        assert windows.known() == {"full": 8192}
    finally:
        await windows.close()
        await upstreams.close()


async def test_a_server_that_comes_up_later_is_asked_again(start_fake_: Any) -> None:
    with socket.socket() as sock:  # a port nothing listens on, yet
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    upstreams, windows = await windows_of(two_tiers(url, url), refresh=0.2)
    late = None
    try:
        assert windows.known() == {}
        late = await start_fake(FakeConfig(n_ctx=512), port=port)
        for _ in range(100):  # asked again by a call once `refresh` has passed; bounded wait
            windows.known()
            await windows.settled(5)
            if windows.known().get("full") == 512:
                break
            await asyncio.sleep(0.05)
        assert windows.known() == {"fast": 512, "full": 512}
    finally:
        if late is not None:
            await late.close()
        await windows.close()
        await upstreams.close()


async def test_a_changed_tier_forgets_what_was_known_of_the_old_one(start_fake_: Any) -> None:
    small, large = await start_fake_(FakeConfig(n_ctx=256)), await start_fake_(FakeConfig(n_ctx=1024))
    first = two_tiers(small.url, small.url)
    upstreams, windows = await windows_of(first)
    try:
        windows.learned("full", 100)
        assert windows.known() == {"fast": 256, "full": 100}
        second = two_tiers(small.url, large.url)
        await upstreams.apply(second)
        windows.apply(second)
        assert windows.known() == {"fast": 256}  # full is not known until its new server says
        await windows.settled(5)
        assert windows.known() == {"fast": 256, "full": 1024}
    finally:
        await windows.close()
        await upstreams.close()

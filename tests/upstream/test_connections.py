"""New upstream connections: a plain connection to one address is the event loop's `create_connection`,
not aiohttp's happy-eyeballs path (whose `sock_connect` makes uvloop resolve even a numeric address in
a thread pool); what fails still fails the same."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import aiohappyeyeballs
import pytest

from router.errors import UpstreamError
from router.policy.model import Tier
from router.upstream.openai_compat import OpenAICompatUpstream

BODY = {"model": "x", "messages": [{"role": "user", "content": "hi"}]}


def deadline() -> float:
    return asyncio.get_running_loop().time() + 10


async def test_a_plain_connection_to_one_address_is_the_loops_own(fake, monkeypatch) -> None:
    connected: list[Any] = []

    async def refused(addr_infos: Any, **kwargs: Any) -> socket.socket:
        connected.append(addr_infos)
        raise AssertionError("happy eyeballs is not the way to one plain address")

    monkeypatch.setattr(aiohappyeyeballs, "start_connection", refused)
    up = OpenAICompatUpstream("fast", Tier(model="openai/m", api_base=fake.url, warm_connections=0))
    await up.start()
    try:
        for _ in range(2):  # a new connection, then the kept one
            reply = await up.complete(BODY, deadline())
            assert reply.data["choices"][0]["message"]
    finally:
        await up.close()
    assert connected == []


async def test_nothing_listening_is_an_unreachable_tier() -> None:
    with socket.socket() as s:  # a port nobody listens on (closed again at once)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tier = Tier(model="openai/m", api_base=f"http://127.0.0.1:{port}/v1", warm_connections=0)
    up = OpenAICompatUpstream("fast", tier)
    await up.start()
    try:
        with pytest.raises(UpstreamError, match="unreachable"):
            await up.complete(BODY, deadline())
    finally:
        await up.close()


async def test_a_host_name_still_connects(fake) -> None:
    url = fake.url.replace("127.0.0.1", "localhost")  # resolved (one address or more)
    up = OpenAICompatUpstream("fast", Tier(model="openai/m", api_base=url, warm_connections=0))
    await up.start()
    try:
        reply = await up.complete(BODY, deadline())
        assert reply.data["choices"][0]["message"]
    finally:
        await up.close()

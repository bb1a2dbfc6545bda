"""The proxy mounted in a FastAPI app at a prefix, served by a real uvicorn, called by the openai SDK.

A mounted app's lifespan never runs: the first call starts the router (calls meanwhile wait for it),
or the host app starts and closes it with `lifespan_of(proxy)`. A router that cannot start answers 503.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from router.app import create_app, lifespan_of
from router.settings import Settings
from tests.conftest import free_socket, policy_text, start_uvicorn, stop_uvicorn

fastapi = pytest.importorskip("fastapi", reason="mounting under FastAPI needs fastapi (the `dev` extra)")


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """`app` on a free port through uvicorn (its lifespan on); yields the base URL."""
    server, task, base = await start_uvicorn(app)
    try:
        yield base
    finally:
        await stop_uvicorn(server, task)


def settings(tmp_path: Path, policy: str) -> Settings:
    path = tmp_path / "policy.yaml"
    path.write_text(policy)
    return Settings(policy=path, reload_policy=False)


async def test_mounted_at_a_prefix_starts_on_the_first_calls(fake, tmp_path: Path) -> None:
    proxy = create_app(settings(tmp_path, policy_text(fake.url)))
    host = fastapi.FastAPI()
    host.mount("/router", proxy)
    runtime = proxy.state.runtime
    async with serving(host) as base:
        assert not runtime.ready  # the host's lifespan does not reach a mounted app
        client = openai.AsyncOpenAI(base_url=f"{base}/router/v1", api_key="x", max_retries=0)
        ask = client.chat.completions.create
        calls = [ask(model="auto", messages=[{"role": "user", "content": f"hi {i}"}]) for i in range(5)]
        answers = await asyncio.gather(*calls)  # all five arrive while it starts: each waits, none fails
        assert all(a.choices[0].message.content for a in answers)
        assert runtime.ready
        async with httpx.AsyncClient(base_url=base) as http:
            document = await http.get("/router/openapi.json")
        assert document.status_code == 200
        assert "/v1/chat/completions" in document.json()["paths"]


async def test_the_host_lifespan_starts_and_closes_it(fake, tmp_path: Path) -> None:
    proxy = create_app(settings(tmp_path, policy_text(fake.url)))
    host = fastapi.FastAPI(lifespan=lifespan_of(proxy))
    host.mount("/router", proxy)
    runtime = proxy.state.runtime
    async with serving(host) as base:
        assert runtime.ready  # started before the first call
        client = openai.AsyncOpenAI(base_url=f"{base}/router/v1", api_key="x", max_retries=0)
        answer = await client.chat.completions.create(model="auto", messages=[{"role": "user", "content": "hi"}])
        assert answer.choices[0].message.content
    assert not runtime.ready  # closed with the host


async def test_a_router_that_cannot_start_answers_503(fake, tmp_path: Path) -> None:
    closed = free_socket()  # bound, never listening: the Redis store cannot connect
    url = f"redis://127.0.0.1:{closed.getsockname()[1]}/0"
    policy = policy_text(fake.url).replace("store: memory://", f"store: {url}\nstore_required: true")
    proxy = create_app(settings(tmp_path, policy))
    host = fastapi.FastAPI()
    host.mount("/router", proxy)
    async with serving(host) as base, httpx.AsyncClient(base_url=base) as http:
        for _ in range(2):  # each call tries again, and is refused again
            got = await http.post("/router/v1/chat/completions", json={"model": "auto", "messages": []})
            assert got.status_code == 503
            assert got.json()["error"]["code"] == "not_started"
            assert got.headers["retry-after"] == "1"
    closed.close()

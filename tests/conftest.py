"""Shared fixtures: real servers on free ports, nothing mocked.

fake            a running fake upstream (router/fake/server.py), default config
start_fake_     factory: await start_fake_(FakeConfig(...)) -> FakeServer (closed after the test)
proxy_          factory: await proxy_(policy_yaml, **settings) -> Proxy (a real uvicorn server)
policy_text()   a policy with fast/full tiers pointing at given upstream URLs
upstream_app()  a scripted upstream (aiohttp app) for serve_app()
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import re
import socket
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from aiohttp import web

from router.app import create_app
from router.connections import Server, server_options
from router.fake import FakeConfig, FakeServer, start_fake
from router.runtime import Runtime
from router.settings import Settings


def free_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # so asyncio sets TCP_NODELAY
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def policy_text(
    fast_url: str, full_url: str | None = None, *, extra: str = "", routes: str | None = None, breakers: bool = True
) -> str:
    """A fast/full policy; `extra` is appended YAML (top-level keys), `routes` replaces the routes;
    `breakers=False` turns the tiers' breakers off (a test whose every call must meet a failing tier)."""
    full_url = full_url or fast_url
    routes = (
        routes
        or """
        routes:
          - name: simple-tool-call
            when: {tools: {present: true, max_count: 8}, last_role: [user, tool]}
            use: fast
          - name: default
            use: full
    """
    )
    base = f"""
        version: 1
        models:
          fast:
            model: openai/fast-model
            api_base: {fast_url}
            warm_connections: 1
            timeouts: {{connect: 2, first_token: 5, total: 20}}
          full:
            model: openai/full-model
            api_base: {full_url}
            warm_connections: 1
            timeouts: {{connect: 2, first_token: 5, total: 20}}
        store: memory://
    """
    if not breakers:
        base = base.replace("total: 20}\n", "total: 20}\n            breaker: {failures: 0}\n")
    return textwrap.dedent(base) + textwrap.dedent(routes) + textwrap.dedent(extra)


_TRANSLATED_TIER = re.compile(r"^\s*model:\s*(?!openai/|anthropic/)[\w.-]+/", re.MULTILINE)


def needs_litellm(policy_yaml: str) -> bool:
    """True when a tier of the policy is served through litellm (`gemini/*`, `bedrock/*`, …): not
    `openai/*` nor `anthropic/*` tiers, which start without it (a test that sends a chat or
    Responses client to an `anthropic/*` tier skips without litellm itself)."""
    return bool(_TRANSLATED_TIER.search(policy_yaml))


def skip_without_extras(policy_yaml: str) -> None:
    """Skip (with the reason) a test whose policy needs an extra that is not installed."""
    if needs_litellm(policy_yaml) and importlib.util.find_spec("litellm") is None:
        pytest.skip("a tier of this policy is served through litellm: install the `litellm` extra")


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def upstream_app(posts: dict[str, Handler]) -> web.Application:
    """A scripted upstream: `posts` maps paths ("/v1/chat/completions", "/v1/messages") to handlers;
    GET /v1/models answers an empty list, for the router's warm-up."""

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": []})

    app = web.Application()
    for path, handler in posts.items():
        app.router.add_post(path, handler)
    app.router.add_get("/v1/models", models)
    return app


@contextlib.asynccontextmanager
async def serve_app(app: web.Application) -> AsyncIterator[str]:
    """A small scripted upstream (an aiohttp app) on a free port; yields its /v1 URL."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    finally:
        await runner.cleanup()


async def start_uvicorn(app: Any, **options: Any) -> tuple[uvicorn.Server, asyncio.Task[None], str]:
    """`app` served by a real uvicorn on a free port, its lifespan on: (server, its task, base URL).
    Stop it with `stop_uvicorn`."""
    sock = free_socket()
    config = uvicorn.Config(app, log_level="warning", lifespan="on", **{"timeout_graceful_shutdown": 1, **options})
    server = Server(config)  # the router's: its listening socket set up as `serve` sets it
    task = asyncio.create_task(server.serve(sockets=[sock]))
    for _ in range(500):
        if server.started or task.done():
            break
        await asyncio.sleep(0.01)
    if task.done():
        task.result()
    assert server.started, "uvicorn did not start"
    return server, task, f"http://127.0.0.1:{sock.getsockname()[1]}"


async def stop_uvicorn(server: uvicorn.Server, task: asyncio.Task[None]) -> None:
    server.should_exit = True
    await asyncio.wait_for(task, 10)


@dataclass
class Proxy:
    url: str  # ends with /v1
    base: str  # http://127.0.0.1:PORT
    runtime: Runtime
    policy_path: Path
    server: uvicorn.Server | None = None
    task: asyncio.Task[None] | None = None

    async def stop(self) -> None:
        """Shut down now, as on SIGTERM (the lifespan closes the store), rather than after the test."""
        assert self.server is not None and self.task is not None
        self.server.should_exit = True
        await asyncio.wait_for(self.task, 10)


@pytest.fixture
async def start_fake_() -> AsyncIterator[Callable[..., Awaitable[FakeServer]]]:
    servers: list[FakeServer] = []

    async def start(config: FakeConfig | None = None, **kwargs: Any) -> FakeServer:
        server = await start_fake(config or FakeConfig(**kwargs))
        servers.append(server)
        return server

    yield start
    for s in servers:
        await s.close()


@pytest.fixture
async def fake(start_fake_: Callable[..., Awaitable[FakeServer]]) -> FakeServer:
    return await start_fake_()


@pytest.fixture
async def proxy_(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[Proxy]]]:
    running: list[tuple[uvicorn.Server, asyncio.Task[None]]] = []

    async def start(policy_yaml: str, **settings: Any) -> Proxy:
        skip_without_extras(policy_yaml)
        path = tmp_path / f"policy-{len(running)}.yaml"
        path.write_text(policy_yaml)
        settings.setdefault("reload_policy", False)
        # a test's teardown stops its proxy: no wait for late connections (tests/test_restart_under_load.py has them)
        settings.setdefault("accept_drain", 0.0)
        settings.setdefault("shutdown_idle_wait", 0.0)
        app = create_app(Settings(policy=path, **settings))
        server, task, base = await start_uvicorn(app, **server_options(app.state.runtime.settings))
        running.append((server, task))
        return Proxy(f"{base}/v1", base, app.state.runtime, path, server, task)

    yield start
    for server, _task in running:
        server.should_exit = True
    for _server, task in running:
        await asyncio.wait_for(task, 10)

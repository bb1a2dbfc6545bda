"""A fake upstream pair and a proxy running on their own event loop, in a background thread.

Property-based tests (hypothesis, schemathesis) call plain functions many times; they talk to this
stack over real sockets with synchronous clients, so one proxy serves every example of a module.

    with Stack(settings={...}) as stack:
        stack.base                     http://127.0.0.1:PORT (the proxy)
        stack.call(coro_fn)            run `await coro_fn(router)` on the stack's loop (e.g. read inflight)
        stack.assert_settled()         /healthz answers and no call is left in flight

`Stack(policy=fn)`: the policy is `fn(fast_url, full_url)` instead of `policy_text` with `extra`.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import uvicorn

from router.app import create_app
from router.connections import server_options
from router.fake import FakeConfig, FakeServer, start_fake
from router.runtime import Runtime
from router.settings import Settings
from tests.conftest import free_socket, needs_litellm, policy_text

T = TypeVar("T")

# The fuzzed bodies carry arbitrary client tool schemas the fake cannot always satisfy; the
# properties here are about input handling, so the last answer is delivered rather than refused with
# a retryable 502 (which tests/fault/test_no_malformed.py and tests/api/test_escalation.py pin).
ESCALATE = "escalation: {to: full, max_attempts: 2, on_exhausted: deliver}\n"


class Stack:
    def __init__(
        self,
        *,
        fast: FakeConfig | None = None,
        full: FakeConfig | None = None,
        extra: str = ESCALATE,
        settings: dict[str, Any] | None = None,
        policy: Callable[[str, str], str] | None = None,
    ) -> None:
        self.fast_config = fast or FakeConfig(seed=1, bad_tool_rate=0.3)
        self.full_config = full or FakeConfig(seed=2)
        self.extra = extra
        self.policy = policy  # (fast URL, full URL) → the policy's YAML; default: policy_text with `extra`
        self.settings = {"reload_policy": False, **(settings or {})}
        self.base = ""
        self.url = ""
        self.fast_url = ""
        self.full_url = ""
        self.runtime: Runtime | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="proxy-stack", daemon=True)
        self._dir = tempfile.TemporaryDirectory(prefix="agent-router-stack-")

    def __enter__(self) -> Stack:
        probe = self.policy("http://f/v1", "http://g/v1") if self.policy else policy_text("http://f/v1")
        if needs_litellm(probe) and importlib.util.find_spec("litellm") is None:
            pytest.skip("a tier of this policy is served through litellm: install the `litellm` extra")
        self._thread.start()
        if not self._ready.wait(20):
            raise RuntimeError("the proxy stack did not start within 20 s")
        if self._error is not None:
            raise RuntimeError("the proxy stack failed to start") from self._error
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(20)
        self._dir.cleanup()

    def call(self, fn: Callable[[Runtime], Awaitable[T]], timeout: float = 10) -> T:
        """Run `fn(router)` on the stack's loop and return its result."""
        assert self._loop is not None and self.runtime is not None
        runtime = self.runtime

        async def run() -> T:
            return await fn(runtime)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout)

    def inflight(self) -> int:
        async def read(runtime: Runtime) -> int:
            return runtime.inflight

        return self.call(read)

    def assert_settled(self) -> None:
        """The proxy answers /healthz and, within 2 s (the last stream being counted out), has no
        call in flight."""
        with httpx.Client(timeout=10) as client:
            assert client.get(self.base + "/healthz").status_code == 200
        for _ in range(200):
            if self.inflight() == 0:
                break
            time.sleep(0.01)
        assert self.inflight() == 0

    # -- the thread ------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported by __enter__ if start-up failed
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        fast: FakeServer = await start_fake(self.fast_config)
        full: FakeServer = await start_fake(self.full_config)
        self.fast_url, self.full_url = fast.url, full.url
        path = Path(self._dir.name) / "policy.yaml"
        text = self.policy(fast.url, full.url) if self.policy else policy_text(fast.url, full.url, extra=self.extra)
        path.write_text(text)
        app = create_app(Settings(policy=path, **self.settings))
        self.runtime = app.state.runtime
        sock = free_socket()
        options = {**server_options(self.runtime.settings), "timeout_graceful_shutdown": 1}
        config = uvicorn.Config(app, log_level="warning", lifespan="on", **options)
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            for _ in range(1000):
                if server.started or task.done():
                    break
                await asyncio.sleep(0.01)
            if task.done():
                task.result()
            port = sock.getsockname()[1]
            self.base = f"http://127.0.0.1:{port}"
            self.url = self.base + "/v1"
            self._ready.set()
            await self._stop.wait()
        finally:
            server.should_exit = True
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 10)
            await fast.close()
            await full.close()

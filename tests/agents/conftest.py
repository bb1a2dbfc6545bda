"""The real agent CLIs against the router and the fake upstream (real uvicorn servers on free ports).

The CLIs come from npm (package.json, installed by scripts/install); without them these tests skip.
Each run gets its own HOME, config directory and working directory under the test's tmp_path, an
environment of its own (nothing of the caller's, telemetry off) and a bounded time.

Stack      the fake (finishes a tool loop after one result, steered to a harmless tool), the router in
           front of it, and what the router answered: HTTP statuses and WebSocket `error` events
routed()   the router in front of a policy of a test's own (Tiers: two fakes behind it)
run_cli()  one CLI run → (exit code, stdout, stderr); killed after `CLI_TIMEOUT` seconds (or its `bound`)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from router.app import create_app
from router.fake import FakeConfig, FakeServer
from router.settings import Settings
from tests.api.helpers import fake_requests
from tests.conftest import policy_text, start_uvicorn, stop_uvicorn

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "node_modules" / ".bin"
CLI_TIMEOUT = 120.0  # s, per CLI run; the pytest timeout of these tests is above it
# Harmless tools the fake calls when they are offered: Claude Code's file tools, Codex's code-mode `exec`
# (flattened from its `functions` namespace) and its shell tools.
PREFERRED = ("Glob", "Read", "LS", "functions__exec", "exec_command", "shell_command", "shell")
QUIET = {  # nothing phones home: no telemetry, error reports, update checks or other side traffic
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "NO_COLOR": "1",
}

ASGIApp = Callable[..., Awaitable[None]]


def cli(name: str) -> Path:
    path = BIN / name
    if not os.access(path, os.X_OK):
        pytest.skip(f"{path.relative_to(ROOT)} is not installed: run scripts/install (npm ci)")
    return path


@dataclass
class Seen:
    """What the router answered: (method, path, status) of HTTP calls, WebSocket paths, `error` events."""

    http: list[tuple[str, str, int]] = field(default_factory=list)
    websockets: list[str] = field(default_factory=list)
    ws_errors: list[dict[str, Any]] = field(default_factory=list)

    def failures(self) -> list[Any]:
        return [h for h in self.http if h[2] >= 400] + self.ws_errors


def recording(app: ASGIApp, seen: Seen) -> ASGIApp:
    """The app, with every response status and WebSocket error event written down (nothing changed)."""

    async def wrapped(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await app(scope, receive, send)
        if scope["type"] == "websocket":
            seen.websockets.append(scope["path"])

        async def watch(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                seen.http.append((scope["method"], scope["path"], message["status"]))
            elif message["type"] == "websocket.send" and isinstance(text := message.get("text"), str):
                event = orjson.loads(text)
                if isinstance(event, dict) and event.get("type") == "error":
                    seen.ws_errors.append(event)
            await send(message)

        await app(scope, receive, watch)

    return wrapped


@dataclass
class Stack:
    fake: FakeServer
    base: str  # the router, http://127.0.0.1:PORT
    seen: Seen

    async def chat_requests(self) -> list[dict[str, Any]]:
        """The chat-completions bodies that reached the fake, in order."""
        return [r["body"] for r in await fake_requests(self.fake.url) if r["path"] == "/v1/chat/completions"]


@dataclass
class Tiers:
    """Two fake upstreams (fast, full) and the router in front of them, serving a policy of a test's own."""

    fast: FakeServer
    full: FakeServer
    base: str  # the router, http://127.0.0.1:PORT
    seen: Seen


@contextlib.asynccontextmanager
async def routed(policy: str, tmp_path: Path, **settings: Any) -> AsyncIterator[tuple[str, Seen]]:
    """The router on a free port serving `policy` (with `settings` besides): (its base URL, what it answered)."""
    path = tmp_path / "policy.yaml"
    path.write_text(policy)
    seen = Seen()
    app = create_app(Settings(policy=path, reload_policy=False, **settings))
    server, task, base = await start_uvicorn(recording(app, seen))
    try:
        yield base, seen
    finally:
        await stop_uvicorn(server, task)


@pytest.fixture
async def stack(start_fake_: Callable[..., Awaitable[FakeServer]], tmp_path: Path) -> AsyncIterator[Stack]:
    fake = await start_fake_(FakeConfig(finish_after=1, prefer_tools=PREFERRED))
    policy = policy_text(fake.url, extra='aliases: {"*": auto}\n')  # the CLIs' own model names too
    async with routed(policy, tmp_path) as (base, seen):
        yield Stack(fake, base, seen)


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """An environment of the test's own: PATH and locale from the caller, nothing else of theirs."""
    env = {k: os.environ[k] for k in ("PATH", "LANG", "LC_ALL", "TERM") if k in os.environ}
    return {**env, **QUIET, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), **extra}


async def run_cli(argv: list[str], cwd: Path, env: dict[str, str], bound: float = CLI_TIMEOUT) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,  # its children go with it on a timeout
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), bound)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        out, err = await proc.communicate()
        pytest.fail(f"{Path(argv[0]).name} did not finish within {bound}s:\n{err.decode()[-3000:]}")
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def workdir(tmp_path: Path) -> tuple[Path, Path]:
    """A HOME and a working directory with a few files for the agent to look at."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (work / "notes.txt").write_text("the router sits between agents and their models\n")
    (work / "main.py").write_text("print('hello')\n")
    return home, work

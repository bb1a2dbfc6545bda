"""Claude Code's and Codex's first main-loop request as a chat tier sees it: each CLI runs one task
against the router in front of the fake upstream, and the first request offering tools that reached
the fake is kept (messages and tools), with the CLI's version. Run again when a CLI's pin changes."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import uvicorn

from router.app import create_app
from router.connections import Server
from router.fake import FakeConfig, start_fake
from router.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "node_modules" / ".bin"
PROMPTS = Path(__file__).with_name("prompts")
TASK = "What is the secret word in notes.txt? Answer with the word only."
QUIET = {"DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1", "DISABLE_AUTOUPDATER": "1",
         "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "NO_COLOR": "1"}  # fmt: skip
POLICY = """version: 1
models:
  fast: {{model: openai/fake, api_base: "{url}"}}
aliases: {{"*": auto}}
routes: [{{name: default, use: fast}}]
store: memory://
"""
CODEX_CONFIG = """model_provider = "router"
check_for_update_on_startup = false
[analytics]
enabled = false
[model_providers.router]
name = "agent-router"
base_url = "{base}/v1"
wire_api = "responses"
env_key = "ROUTER_API_KEY"
supports_websockets = false
"""


async def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> None:
    out = asyncio.subprocess.DEVNULL
    proc = await asyncio.create_subprocess_exec(*argv, cwd=cwd, env=env, stdin=out, stdout=out, stderr=out)
    try:
        await asyncio.wait_for(proc.wait(), 120)
    except TimeoutError:
        proc.kill()
        await proc.wait()


async def _requests(policy: Path, port: int, argv: list[str], work: Path, env: dict[str, str]) -> list[dict[str, Any]]:
    """Run the CLI against the router (`policy`, on `port`, in front of the fake): the fake's request log."""
    fake = await start_fake(FakeConfig(finish_after=1))
    await asyncio.to_thread(policy.write_text, POLICY.format(url=fake.url))
    app = create_app(Settings(policy=policy, reload_policy=False))
    server = Server(uvicorn.Config(app, port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    for _ in range(200):
        if server.started:
            break
        await asyncio.sleep(0.05)
    try:
        await _run(argv, work, env)
        async with aiohttp.ClientSession() as s, s.get(fake.url.removesuffix("/v1") + "/_fake/requests") as r:
            return list(await r.json())
    finally:
        server.should_exit = True
        await task
        await fake.close()


def capture(agent: str) -> dict[str, Any]:
    """One CLI's first main-loop request (`agent`: claude-code or codex)."""
    cli = BIN / ("claude" if agent == "claude-code" else "codex")
    with tempfile.TemporaryDirectory() as tmp:
        home, work = Path(tmp, "home"), Path(tmp, "work")
        work.mkdir()
        (home / "codex").mkdir(parents=True)
        (work / "notes.txt").write_text("The secret word is PELICAN.\n")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        base = f"http://127.0.0.1:{port}"
        env = {"PATH": os.environ["PATH"], "HOME": str(home), **QUIET}
        if agent == "claude-code":
            env |= {"ANTHROPIC_BASE_URL": base, "ANTHROPIC_API_KEY": "sk-ant-capture"}
            argv = [str(cli), "-p", TASK]
        else:
            (home / "codex" / "config.toml").write_text(CODEX_CONFIG.format(base=base))
            env |= {"CODEX_HOME": str(home / "codex"), "ROUTER_API_KEY": "capture"}
            argv = [str(cli), "exec", "--skip-git-repo-check", TASK]
        log = asyncio.run(_requests(Path(tmp, "policy.yaml"), port, argv, work, env))
    bodies = [e["body"] for e in log if e["path"] == "/v1/chat/completions" and e["body"].get("tools")]
    if not bodies:
        raise RuntimeError(f"{agent} sent no request with tools")
    version = subprocess.run([str(cli), "--version"], capture_output=True, text=True, timeout=60).stdout.strip()
    return {"agent": agent, "version": version, "messages": bodies[0]["messages"], "tools": bodies[0]["tools"]}


def capture_all() -> list[Path]:
    PROMPTS.mkdir(exist_ok=True)
    written = []
    for agent in ("claude-code", "codex"):
        path = PROMPTS / f"{agent}.json"
        path.write_bytes(orjson.dumps(capture(agent), option=orjson.OPT_INDENT_2))
        written.append(path)
    return written

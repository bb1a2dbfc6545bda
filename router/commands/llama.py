"""The llama.cpp servers of the local demo (`agent-router up`, the e2e tests, the benches): the
engine that runs them and the child processes.

    ENGINES           where llama.cpp's server comes from: `xllamacpp` (the default: the prebuilt
                      wheel, nothing compiled; router/commands/engine.py runs it with llama-server's
                      flags) or `source` (llama.cpp's `llama-server` built by scripts/build-llama-server
                      from the sources of LLAMA_CPP, cached: `llama_server_binary()`)
    Child             one child process: its own log file, a readiness URL, a bounded stop
    server_argv()     llama-server's flags for one tier, on either engine
    LlamaServer       a Child running llama.cpp's server; ready when GET /health answers 200

Both engines are llama.cpp's own HTTP server: slots (`--parallel`: a session's prompt stays cached in
its slot for its next turn, router/sessions/affinity.py), `cache_prompt`, `timings`, `/props`,
`/apply-template` + `/completion` (a call forced under its schema: the repair, the `score` verifier's
`via: forced`), with `--jinja` (the GGUF's own chat template, or a template file). Measured side by
side in bench/results/engine.md. Each server gets cores // 2 threads (one core each on 2 cores: two
threads on a shared core spin-wait for it).

llama.cpp is portable on both engines: the wheel is built for AVX2/FMA/F16C, and scripts/install
builds the source engine with CMAKE_ARGS=-DGGML_NATIVE=OFF (a native build on a CPU with AMX crashed,
SIGSEGV in ggml's AMX matmul, on the first prompt inside a VM).

Gemma 3 270M, the first local fast tier, served only on llama-cpp-python's grammar-driven
`chatml-function-calling`; on llama.cpp's server it repeats the user's turn (its GGUF's template) or
echoes a tools template, so it went with that binding (bench/results/engine.md).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

ENGINES = ("xllamacpp", "source")  # the first is the default
LLAMA_CPP = "llama-cpp-python==0.3.36"  # whose vendored llama.cpp scripts/build-llama-server builds (`source`)
READY_TIMEOUT = 120.0  # seconds for each server to answer its readiness URL
BATCH = 512  # llama-server's --batch-size and --ubatch-size (tokens evaluated per step)
# MiB of host memory where llama-server keeps prompts a slot let go (restored when one comes back)
CACHE_RAM = 2048
STOP_TIMEOUT = 10.0  # seconds between SIGTERM and SIGKILL
_TAIL_BYTES = 16_384


# -- child processes ----------------------------------------------------------------------------
class ChildFailed(RuntimeError):
    def __init__(self, child: Child, message: str) -> None:
        super().__init__(f"{child.name}: {message}")
        self.child = child


def exit_reason(code: int) -> str:
    return f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"


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
            raise ChildFailed(self, exit_reason(code))
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


# -- llama.cpp's server, on either engine ------------------------------------------------------------
class EngineMissing(RuntimeError):
    """The engine asked for is not installed (the message says how to install it)."""


def llama_cpp_dir(root: Path | None = None) -> Path:
    """The source engine's cache directory, bin/llama-server (scripts/build-llama-server's key:
    sha256 of the pinned version and CMAKE_ARGS)."""
    from router.commands.models import cache_root

    args = os.environ.get("CMAKE_ARGS") or "-DGGML_NATIVE=OFF"
    key = hashlib.sha256(f"{LLAMA_CPP} {args}".encode()).hexdigest()[:16]
    return (root or cache_root()) / "llama-cpp" / key


def llama_server_binary() -> Path:
    """`$AGENT_ROUTER_LLAMA_SERVER`, else the binary scripts/build-llama-server caches."""
    explicit = os.environ.get("AGENT_ROUTER_LLAMA_SERVER")
    return Path(explicit) if explicit else llama_cpp_dir() / "bin" / "llama-server"


def engine_command(engine: str = ENGINES[0]) -> list[str]:
    """The program that takes llama-server's flags on `engine` (one of ENGINES); EngineMissing when
    it is not installed."""
    if engine == "xllamacpp":
        import importlib.util

        if importlib.util.find_spec("xllamacpp") is None:
            raise EngineMissing("the xllamacpp engine is not installed: pip install 'agent-router[local]'")
        return [sys.executable, "-m", "router.commands.engine"]
    if engine == "source":
        if not (binary := llama_server_binary()).is_file():
            raise EngineMissing(f"no llama-server at {binary}: scripts/build-llama-server builds it")
        return [str(binary)]
    raise EngineMissing(f"unknown engine {engine!r}: one of {', '.join(ENGINES)}")


def server_argv(
    command: Sequence[str],
    model: Path,
    port: int,
    *,
    alias: str,
    template: Path | None = None,
    threads: int | None = None,
    n_ctx: int = 4096,
    slots: int = 1,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """llama-server's command line: the Jinja chat template (`template`, else the GGUF's), `slots`
    slots of `n_ctx` tokens each (each keeps its last prompt for the next request that names it:
    a session's, router/sessions/affinity.py), CACHE_RAM MiB to keep the prompts slots let go (a
    session whose slot went to another finds its prompt there), cores // 2 threads, and batches of
    BATCH tokens (a request that gives way — a warm-up cancelled for a live call — stops at the end
    of one)."""
    threads = threads or max(1, (os.cpu_count() or 2) // 2)
    return [
        *command, "--model", str(model), "--alias", alias, "--host", "127.0.0.1", "--port", str(port),
        "--ctx-size", str(n_ctx * slots), "--parallel", str(slots), "--no-kv-unified", "--cache-ram", str(CACHE_RAM),
        "--batch-size", str(BATCH), "--ubatch-size", str(BATCH),
        "--threads", str(threads), "--threads-batch", str(threads),
        "--jinja", *(["--chat-template-file", str(template)] if template else []), "--no-webui", *extra_args,
    ]  # fmt: skip


class LlamaServer(Child):
    """llama.cpp's server on 127.0.0.1:port, on `engine` (ENGINES); ready when GET /health answers 200
    (the model loaded). Raises EngineMissing when the engine is not installed."""

    def __init__(
        self,
        name: str,
        model: Path,
        port: int,
        log_path: Path,
        *,
        alias: str,
        template: Path | None = None,
        n_ctx: int = 4096,
        slots: int = 1,
        engine: str = ENGINES[0],
        extra_args: Sequence[str] = (),
    ) -> None:
        argv = server_argv(
            engine_command(engine), model, port,
            alias=alias, template=template, n_ctx=n_ctx, slots=slots, extra_args=extra_args,
        )  # fmt: skip
        super().__init__(name, argv, f"http://127.0.0.1:{port}/health", log_path)
        self.port = port
        self.alias = alias
        self.slots = slots
        self.engine = engine
        self.n_ctx = n_ctx

    @property
    def url(self) -> str:
        """The OpenAI base URL (ends with /v1)."""
        return f"http://127.0.0.1:{self.port}/v1"

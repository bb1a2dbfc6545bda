"""Shadow mode and `agent-router qa` against the real Gemma 3 270M tiers: `python -m bench.qa_gemma [N]`.

    two llama.cpp servers    router.commands.llama.LlamaServer, Gemma 3 270M Q4_K_M, n_ctx 1024
    serve                    policies/local.yaml with `shadow: {rate: 1.0, mode: record}` on the
                             `tool-call` route and an SQLite store in a temporary directory
    traffic                  the first N (default 20) call cases of evals/tool_calls.jsonl, one at a
                             time; the fast tier samples (server default temperature 0.8), the full
                             tier is greedy (local.yaml), so their answers can differ
    qa                       `agent-router qa --route tool-call` on that store: the full tier answers
                             each kept sample and judges it against the fast answer

Writes bench/results/qa_gemma.md: what qa reported, and what it cost. Local only; nothing is fetched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.harness import free_port
from router.commands.llama import LlamaServer, model_path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "qa_gemma.md"
CASES = ROOT / "evals" / "tool_calls.jsonl"


def policy(store: Path) -> str:
    text = (ROOT / "policies" / "local.yaml").read_text()
    marker = "    use: fast\n    repair: true\n"
    assert marker in text, "policies/local.yaml changed: update bench/qa_gemma.py"
    text = text.replace(marker, marker + "    shadow: {rate: 1.0, mode: record}\n", 1)
    return text.replace("store: sqlite:///./.agent-router/state.db", f"store: sqlite:///{store}")


def _wait_healthy(url: str, limit: float) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} not healthy after {limit} s")


def main(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        servers = [
            LlamaServer(name, model_path(), free_port(), work / f"{name}.log", n_ctx=1024) for name in ("fast", "full")
        ]
        for s in servers:
            s.start()
        for s in servers:
            s.wait_ready(180)
        env = {**os.environ, "FAST_PORT": str(servers[0].port), "FULL_PORT": str(servers[1].port)}
        path = work / "policy.yaml"
        path.write_text(policy(work / "state.db"))
        port = free_port()
        serve = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "router",
                "serve",
                "--policy",
                str(path),
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            env=env,
        )
        try:
            _wait_healthy(f"http://127.0.0.1:{port}/healthz", 60)
            cases = [json.loads(line) for line in CASES.read_text().splitlines() if line.strip()]
            cases = [c for c in cases if c.get("tools") and "call" in c.get("tags", [])][:n]
            started = time.monotonic()
            tiers: dict[str, int] = {}
            with httpx.Client(timeout=300) as client:
                for case in cases:
                    body = {"model": "auto", "messages": case["messages"], "tools": case["tools"],
                            "tool_choice": "auto", "max_tokens": 64}  # fmt: skip
                    r = client.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body)
                    tier = r.headers.get("x-router-tier", f"HTTP {r.status_code}")
                    tiers[tier] = tiers.get(tier, 0) + 1
            traffic = time.monotonic() - started
        finally:
            serve.terminate()
            serve.wait(30)
        started = time.monotonic()
        qa = subprocess.run(
            [sys.executable, "-m", "router", "qa", "--policy", str(path), "--route", "tool-call",
             "--samples", str(n), "--min-samples", "10", "--concurrency", "1", "--json"],
            env=env, capture_output=True, text=True, timeout=3600,
        )  # fmt: skip
        judging = time.monotonic() - started
        for s in servers:
            s.stop()
    report = qa.stdout.strip()
    OUT.write_text(
        "# `agent-router qa` on the real Gemma 3 270M tiers\n\n"
        f"`python -m bench.qa_gemma {n}` — {n} call cases of evals/tool_calls.jsonl through `serve` "
        "(policies/local.yaml: fast samples at 0.8, full is greedy; shadow `rate: 1.0, mode: record` on "
        "`tool-call`, SQLite), then "
        "`agent-router qa --route tool-call` on that store; 2 cores, llama-cpp-python, n_ctx 1024.\n\n"
        f"- traffic: {traffic:.1f} s for {n} calls; tiers that answered: {tiers}\n"
        f"- qa: {judging:.1f} s (the full tier answers each sample, then judges it), exit {qa.returncode}\n\n"
        "```json\n"
        + report
        + "\n```\n"
        + (f"\nstderr:\n```\n{qa.stderr.strip()[-2000:]}\n```\n" if qa.returncode else "")
    )
    print(OUT.read_text())


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)

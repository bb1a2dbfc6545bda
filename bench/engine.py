"""The two llama.cpp engines side by side (router/commands/llama.py's ENGINES): the prebuilt xllamacpp
wheel `up` runs by default, and llama-server built from source (scripts/build-llama-server).

    python -m bench.engine [--rounds 2] [--prompt-tokens 1500]

For each round, each tier's model (Qwen2.5-Coder-0.5B, fast; -1.5B, full) and each engine in turn
(alternating, so a busy spell of the machine falls on both): a server as `up` starts it (one slot,
cores // 2 threads), then one agent-sized request with nothing cached — a system prompt of tool
definitions and instructions about `--prompt-tokens` long, a user turn, greedy, 64 tokens out,
streamed. Read: the time to the first streamed token (the client's clock), and the server's own
`timings` (prompt and predicted tokens per second). Writes bench/results/engine.json and the table
in bench/results/engine.md. Run it on a quiet machine: it measures CPU throughput.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import time
import urllib.request
from pathlib import Path
from typing import Any

from router.commands.llama import ENGINES, LlamaServer
from router.commands.models import QWEN25_CODER_0_5B, QWEN25_CODER_1_5B, PackedModel, ensure

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results"
TIERS: dict[str, PackedModel] = {"fast": QWEN25_CODER_0_5B, "full": QWEN25_CODER_1_5B}
TIMEOUT = 900.0  # seconds for one request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def agent_prompt(tokens: int) -> list[dict[str, Any]]:
    """A coding agent's opening request, about `tokens` long (Qwen's tokenizer: ~4 characters a token)."""
    rules = [
        f"Rule {i}: when editing file src/module_{i}.py, read it first, keep its style, run the tests in "
        f"tests/test_module_{i}.py and report what changed in one sentence."
        for i in range(tokens // 40)
    ]
    system = "You are a coding agent working in a repository. Use the tools.\n" + "\n".join(rules)
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": "The test tests/test_module_3.py fails. Find out why and fix it."},
    ]


def measure(server: LlamaServer, messages: list[dict[str, Any]]) -> dict[str, Any]:
    body = {"model": server.alias, "messages": messages, "max_tokens": 64, "temperature": 0, "stream": True,
            "cache_prompt": False, "stream_options": {"include_usage": True}}  # fmt: skip
    request = urllib.request.Request(
        server.url + "/chat/completions", json.dumps(body).encode(), {"content-type": "application/json"}
    )
    started, first, timings = time.monotonic(), None, {}
    with urllib.request.urlopen(request, timeout=TIMEOUT) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            data = json.loads(line[6:])
            delta = (data.get("choices") or [{}])[0].get("delta") or {}
            if first is None and (delta.get("content") or delta.get("tool_calls")):
                first = time.monotonic() - started
            timings = data.get("timings") or timings
    return {
        "ttft_s": round(first or 0.0, 2),
        "prompt_tokens": timings.get("prompt_n"),
        "prefill_tps": round(timings.get("prompt_per_second", 0.0), 1),
        "decode_tps": round(timings.get("predicted_per_second", 0.0), 1),
    }


def run(rounds: int, prompt_tokens: int) -> list[dict[str, Any]]:
    messages = agent_prompt(prompt_tokens)
    logs = OUT / "engine-logs"
    rows = []
    for r in range(rounds):
        for tier, packed in TIERS.items():
            order = ENGINES if r % 2 == 0 else tuple(reversed(ENGINES))
            for engine in order:
                server = LlamaServer(tier, ensure(packed), free_port(), logs / f"{tier}-{engine}.log",
                                     alias=packed.alias, n_ctx=prompt_tokens * 2, engine=engine)  # fmt: skip
                with server:
                    ready = server.wait_ready(300.0)
                    row = {"round": r + 1, "tier": tier, "engine": engine, "ready_s": round(ready, 1),
                           "load": round(os.getloadavg()[0], 2), **measure(server, messages)}  # fmt: skip
                print(row, flush=True)
                rows.append(row)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| tier | engine | runs | prompt tokens | prefill tok/s | decode tok/s | TTFT s | ready s |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for tier in TIERS:
        for engine in ENGINES:
            mine = [r for r in rows if r["tier"] == tier and r["engine"] == engine]
            if not mine:
                continue

            def med(key: str, runs: list[dict[str, Any]] = mine) -> float:
                return float(statistics.median(r[key] for r in runs))

            lines.append(
                f"| {tier} | {engine} | {len(mine)} | {mine[0]['prompt_tokens']} | {med('prefill_tps'):.1f} | "
                f"{med('decode_tps'):.1f} | {med('ttft_s'):.1f} | {med('ready_s'):.1f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--prompt-tokens", type=int, default=1500)
    args = parser.parse_args()
    rows = run(args.rounds, args.prompt_tokens)
    (OUT / "engine.json").write_text(json.dumps({"rows": rows}, indent=2) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()

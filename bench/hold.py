"""What holding a streamed tool call until it is checked costs: `python -m bench.hold [--quick]`.

Every tier's streamed tool call is held by the router until the whole call has arrived and passed
the checks (router/flow/streaming.py), so a client sees its first tool-call byte only when the upstream
has finished writing the call. Text is not held. This measures, against the fake upstream writing
its stream with a delay between events (0, 5 and 20 ms: a fast local model to a slow remote one),
the time to the first tool-call delta and to the first text delta, direct and through the router
(one tier, c=1, one aiohttp session each), and the time to the whole answer.

Writes bench/results/hold.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import platform
import sys
import tempfile
from pathlib import Path

import aiohttp
import orjson

from bench.harness import Cluster, free_port, wait_healthy
from bench.load import Result, closed_loop

ROOT = Path(__file__).resolve().parents[1]
POLICY = ROOT / "bench" / "policies" / "bench.yaml"
OUT = ROOT / "bench" / "results" / "hold.md"
DELAYS_MS = (0, 5, 20)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]


def _payload(model: str, tools: bool) -> bytes:
    body = {"model": model, "messages": MESSAGES, "stream": True, **({"tools": TOOLS} if tools else {})}
    return orjson.dumps(body)


async def _measure(url: str, model: str, tools: bool, count: int) -> Result:
    async with aiohttp.ClientSession() as session:
        payload = _payload(model, tools)
        await closed_loop(session, url, payload, concurrency=1, count=5, budget=10, stream="content")  # warm
        first = "tool_calls" if tools else "content"
        return await closed_loop(session, url, payload, concurrency=1, count=count, budget=60, stream=first)


async def run(count: int) -> list[tuple[int, str, Result, Result]]:
    rows: list[tuple[int, str, Result, Result]] = []
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(Path(tmp))
        try:
            for delay in DELAYS_MS:
                fake_port, proxy_port = free_port(), free_port()
                fake = cluster.start(
                    f"fake-{delay}",
                    [py, "-m", "router", "fake-upstream", "--port", str(fake_port), "--chunk-delay-ms", str(delay)],
                    fake_port,
                )
                await wait_healthy(fake, f"http://127.0.0.1:{fake_port}/health", 30)
                proxy = cluster.start(
                    f"router-{delay}",
                    [py, "-m", "router", "serve", "--policy", str(POLICY), "--port", str(proxy_port),
                     "--log-level", "warning", "--no-access-log"],
                    proxy_port,
                    env={"BENCH_FAKE_PORT": str(fake_port)},
                )  # fmt: skip
                await wait_healthy(proxy, f"http://127.0.0.1:{proxy_port}/healthz", 30)
                direct = f"http://127.0.0.1:{fake_port}/v1/chat/completions"
                via = f"http://127.0.0.1:{proxy_port}/v1/chat/completions"
                for kind, tools in (("tool call", True), ("text", False)):
                    d = await _measure(direct, "fake-model", tools, count)
                    r = await _measure(via, "auto", tools, count)
                    rows.append((delay, kind, d, r))
                    print(f"  delay {delay} ms, {kind}: direct {d.p(50, True):.1f} ms, router {r.p(50, True):.1f} ms")
                cluster.stop(proxy)
                cluster.stop(fake)
        finally:
            cluster.stop_all()
    return rows


def report(rows: list[tuple[int, str, Result, Result]], count: int) -> str:
    lines = [
        "# Holding streamed tool calls until checked: what it adds to time to first byte",
        "",
        f"`python -m bench.hold` — {dt.date.today()}, {platform.machine()}, {count} calls per row, c=1, "
        "one tier (`bench/policies/bench.yaml`), the fake upstream writing its stream with the given delay "
        "between events (a tool call's arguments come in 4 pieces: 7 events in all).",
        "",
        "| event delay | answer | first byte direct p50 | via router p50 | added p50 | whole answer direct p50 "
        "| via router p50 | errors |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for delay, kind, d, r in rows:
        lines.append(
            f"| {delay} ms | {kind} | {d.p(50, True):.1f} ms | {r.p(50, True):.1f} ms "
            f"| {r.p(50, True) - d.p(50, True):+.1f} ms | {d.p(50):.1f} ms | {r.p(50):.1f} ms | {d.errors + r.errors} |"
        )
    lines += [
        "",
        "Read it as: a tool call reaches the client when the upstream has written all of it, so its first byte",
        "comes about as late as the whole answer (the added time grows with the call's generation time); text",
        "is forwarded as it comes and adds only the proxy's own overhead. The whole answer is not delayed.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 calls per row instead of 100")
    args = parser.parse_args()
    count = 20 if args.quick else 100
    rows = asyncio.run(run(count))
    OUT.write_text(report(rows, count))
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

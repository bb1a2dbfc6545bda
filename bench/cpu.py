"""CPU per call, this tree against other trees: `python -m bench.cpu --candidate NAME=DIR [...]`.

The figure a CPU cut is judged by (CPU-seconds per 1,000 calls), measured so that the machine's
drift cancels: one fake upstream and, per tree, two `agent-router serve` processes (the policies of
`bench.overhead`: plain, and tools with validation on); per load, `--blocks` blocks of `--calls`
closed-loop calls on each tree in turn, the order reversed every other block (ABBA), and the
proxy's user + system CPU per call in each block. A block pair runs within a few seconds, so a
slower minute of the machine (other tenants, steal) moves both trees alike: the ratio reported is
the median over the block pairs of this tree / candidate, with the pairs' range. `bench.overhead`
pools its rounds instead, and its ratio moves by ±0.1 from run to run on a shared machine.

`--console` adds this tree once more with a console viewer reading each proxy's live tail of calls
(/console/api/calls/live) the whole time: what watching the console costs the calls.

Loads: c=16 JSON and c=8 SSE streams (to the stream's end), each without and with 8 tools
(`tools`: answers checked, streamed tool calls held until valid), and with every tool call of the
routed tier broken (`escalated`: a second fake with `--bad-tool-rate 1`, so each call is checked,
found wrong and answered by the escalation tier: bench/policies/bench-escalate.yaml). Writes
bench/results/cpu.md (or `--out`). Bounded: every block has a deadline (`BLOCK_SECONDS`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson

from bench.harness import Cluster, Proc, busy_seconds, cpu_seconds, free_port, wait_healthy
from bench.load import First, closed_loop
from bench.overhead_model import CHAT, HEADERS, POLICIES, TOOL_CHAT

ROOT = Path(__file__).resolve().parent.parent
BLOCK_SECONDS = 60.0
WARM_CALLS = 300
LOADS = {  # name → (policy, stream, concurrency)
    "c=16 JSON, plain": ("plain", False, 16),
    "c=8 stream, plain": ("plain", True, 8),
    "c=16 JSON, tools (validation on)": ("tools", False, 16),
    "c=8 stream, tools (validation on)": ("tools", True, 8),
    "c=16 JSON, escalated (fast's every call broken)": ("escalated", False, 16),
    "c=8 stream, escalated (fast's every call broken)": ("escalated", True, 8),
}
KINDS = {"plain": "bench.yaml", "tools": "bench-validate.yaml", "escalated": "bench-escalate.yaml"}
WATCHING = "console open"  # this tree, its console's live tail watched while it serves (--console)


async def _watch(url: str, seen: list[int]) -> None:
    """A console viewer: reads the live tail of calls until cancelled, counting the calls it got
    (`seen[0]`) and the times the proxy dropped it for falling behind and it watched again (`seen[1]`)."""
    async with aiohttp.ClientSession() as http:
        while True:
            async with http.get(url, timeout=aiohttp.ClientTimeout(total=None)) as live:
                async for line in live.content:
                    seen[0] += line.startswith(b"data: ")
            seen[1] += 1
            await asyncio.sleep(1.0)  # as the page does: it reads the store, then watches again


@dataclass
class Measured:
    """CPU ms per call of each tree in each block of one load."""

    per_block: dict[str, list[float]] = field(default_factory=dict)

    def median(self, tree: str) -> float:
        return statistics.median(self.per_block[tree])

    def ratios(self, tree: str, against: str) -> list[float]:
        return [a / b for a, b in zip(self.per_block[tree], self.per_block[against], strict=True) if b > 0]


async def _proxies(
    cluster: Cluster, trees: dict[str, Path], fake_port: int, bad_port: int
) -> dict[tuple[str, str], Proc]:
    proxies = {}
    for name, tree in trees.items():
        for kind, policy in KINDS.items():
            port = free_port()
            policy_file = str(POLICIES / policy)
            cmd = [sys.executable, "-P", "-m", "router", "serve", "--policy", policy_file, "--port", str(port)]
            env = {"PYTHONPATH": str(tree), "BENCH_FAKE_PORT": str(fake_port), "BENCH_BAD_FAKE_PORT": str(bad_port)}
            proc = cluster.start(f"{name}-{kind}", cmd, port, env)
            await wait_healthy(proc, f"http://127.0.0.1:{port}/healthz", 60)
            proxies[(name, kind)] = proc
    return proxies


async def measure(trees: dict[str, Path], blocks: int, calls: int) -> tuple[dict[str, Measured], float]:
    """Every load on every tree; also the other processes' CPU (cores) while it ran."""
    cluster = Cluster(Path(tempfile.mkdtemp(prefix="agent-router-cpu-")))
    names = list(trees)
    results: dict[str, Measured] = {}
    ours = 0.0
    busy0, wall0 = busy_seconds(), time.monotonic()
    try:
        fake_port = free_port()
        fake_cmd = [sys.executable, "-m", "router", "fake-upstream", "--port", str(fake_port), "--bad-tool-rate", "0"]
        fake = cluster.start("fake", fake_cmd, fake_port, {"PYTHONPATH": str(ROOT)})
        bad_port = free_port()
        bad_cmd = [sys.executable, "-m", "router", "fake-upstream", "--port", str(bad_port), "--bad-tool-rate", "1"]
        bad = cluster.start("fake-bad", bad_cmd, bad_port, {"PYTHONPATH": str(ROOT)})
        await wait_healthy(fake, f"http://127.0.0.1:{fake_port}/health", 30)
        await wait_healthy(bad, f"http://127.0.0.1:{bad_port}/health", 30)
        proxies = await _proxies(cluster, trees, fake_port, bad_port)
        everyone = [fake, bad, *proxies.values()]
        watched = [0, 0]  # calls the console viewers got, times they were dropped and came back
        viewers = [
            asyncio.create_task(_watch(f"http://127.0.0.1:{proc.port}/console/api/calls/live", watched))
            for (name, _), proc in proxies.items() if name == WATCHING
        ]  # fmt: skip
        start_cpu = sum(cpu_seconds(p.pid) for p in everyone)
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(headers=HEADERS, connector=connector) as session:
            client0 = time.process_time()
            for load, (kind, stream, concurrency) in LOADS.items():
                tools = kind != "plain"
                body = {**(TOOL_CHAT if tools else CHAT), **({"stream": True} if stream else {})}
                payload = orjson.dumps(body)
                first: First | None = ("tool_calls" if tools else "content") if stream else None
                measured = results[load] = Measured({name: [] for name in names})
                for name in names:
                    url = f"http://127.0.0.1:{proxies[(name, kind)].port}/v1/chat/completions"
                    await closed_loop(session, url, payload, concurrency=concurrency, count=WARM_CALLS,
                                      budget=BLOCK_SECONDS, stream=first)  # fmt: skip
                for block in range(blocks):
                    for name in names if block % 2 == 0 else names[::-1]:
                        proc = proxies[(name, kind)]
                        url = f"http://127.0.0.1:{proc.port}/v1/chat/completions"
                        before = cpu_seconds(proc.pid)
                        res = await closed_loop(session, url, payload, concurrency=concurrency, count=calls,
                                                budget=BLOCK_SECONDS, stream=first)  # fmt: skip
                        done = len(res.latency)
                        measured.per_block[name].append(1000 * (cpu_seconds(proc.pid) - before) / max(done, 1))
                        if res.errors:
                            raise RuntimeError(f"{name}, {load}: {res.errors} errors in a block")
                    took = ", ".join(f"{n} {measured.per_block[n][-1]:.3f} ms" for n in names)
                    print(f"{load}, block {block + 1}/{blocks}: {took}", flush=True)
            ours = time.process_time() - client0 + sum(cpu_seconds(p.pid) for p in everyone) - start_cpu
        for viewer in viewers:
            viewer.cancel()
        if viewers:
            print(f"the console viewers got {watched[0]} calls, dropped {watched[1]} times", flush=True)
    finally:
        cluster.stop_all()
    wall = time.monotonic() - wall0
    others = max(0.0, busy_seconds() - busy0 - ours) / wall
    return results, others


def report(results: dict[str, Measured], trees: dict[str, Path], args: argparse.Namespace, took: float,
           others: float) -> str:  # fmt: skip
    names = list(trees)
    this = names[0]
    flags = " ".join("--console" if n == WATCHING else f"--candidate {n}={trees[n]}" for n in names[1:])
    lines = [
        "# CPU per call: this tree against candidates",
        "",
        f"`python -m bench.cpu {flags} --blocks {args.blocks} --calls {args.calls}` ({took:.0f} s; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}). {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}; other processes used {others:.2f} cores on average while it ran.",
        "",
        f"Per load, {args.blocks} blocks of {args.calls} closed-loop calls on each tree in turn (ABBA order); "
        "CPU ms per call = the proxy's user + system CPU in the block / calls. Ratio: the median over block "
        "pairs of this tree / candidate (range in brackets) — the machine's drift cancels within a pair.",
        "",
        "| load | " + " | ".join(f"{n} ms (median)" for n in names) + " | "
        + " | ".join(f"this / {n}" for n in names[1:]) + " |",
        "|---|" + "---:|" * (len(names) + len(names) - 1),
    ]  # fmt: skip
    for load, m in results.items():
        cells = [f"{m.median(n):.3f}" for n in names]
        for n in names[1:]:
            r = m.ratios(this, n)
            cells.append(f"{statistics.median(r):.3f} ({min(r):.2f} to {max(r):.2f})")
        lines.append(f"| {load} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--candidate", action="append", default=[], metavar="NAME=DIR",
                        help="another source tree whose `router` is measured beside this one; repeatable")  # fmt: skip
    parser.add_argument("--blocks", type=int, default=8, help="blocks per load and tree")
    parser.add_argument("--calls", type=int, default=1500, help="calls per block")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "cpu.md")
    parser.add_argument("--console", action="store_true",
                        help="also this tree with a console viewer on each proxy's live tail")  # fmt: skip
    args = parser.parse_args()
    trees = {"this": ROOT, **({WATCHING: ROOT} if args.console else {})}
    for spec in args.candidate:
        name, _, tree = spec.partition("=")
        if not name or not tree or not (Path(tree) / "router").is_dir():
            parser.error(f"--candidate {spec}: NAME=DIR, DIR holding a `router` package")
        trees[name] = Path(tree).resolve()
    started = time.monotonic()
    results, others = asyncio.run(measure(trees, args.blocks, args.calls))
    text = report(results, trees, args, time.monotonic() - started, others)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()

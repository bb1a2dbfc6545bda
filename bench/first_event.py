"""When a text stream's first byte and first text arrive, this tree against another: `python -m bench.first_event`.

Two routers side by side in front of one fake upstream (first event after 20 ms, then one every
2 ms): one from a git ref (`--before`, default `main`, exported with `git archive`), one from this
tree. Calls alternate between them, c=1, on chat SSE, Responses SSE and Responses WebSocket mode,
each a text answer; per call the time from sending the request to the first byte (the first body
bytes, or the first WebSocket message) and to the first text delta. Access log on (to a file), as
deployed. Writes bench/results/first_event.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import io
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import orjson
import websockets

from bench.harness import Cluster, free_port, wait_healthy

ROOT = Path(__file__).resolve().parents[1]
POLICY = ROOT / "bench" / "policies" / "bench.yaml"
OUT = ROOT / "bench" / "results" / "first_event.md"
TEXT_DELTA = (b'"delta":{"content"', b'"type":"response.output_text.delta"')

Timing = tuple[float, float]  # ms to the first byte, ms to the first text delta
Measure = Callable[[str], Awaitable[Timing]]


def export(ref: str, into: Path) -> str:
    """`ref`'s tree in `into` (git archive); its commit."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", ref], check=True, capture_output=True)
    data = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return commit.stdout.decode().strip()


async def sse(session: aiohttp.ClientSession, url: str, body: bytes) -> Timing:
    t0 = time.perf_counter()
    first = None
    async with session.post(url, data=body, headers={"content-type": "application/json"}) as r:
        assert r.status == 200, r.status
        async for chunk in r.content.iter_any():
            now = time.perf_counter()
            first = first if first is not None else now
            if any(marker in chunk for marker in TEXT_DELTA):
                await r.read()
                return (first - t0) * 1000, (now - t0) * 1000
    raise AssertionError("no text delta")


async def ws(conn: websockets.ClientConnection, body: str) -> Timing:
    t0 = time.perf_counter()
    first = None
    await conn.send(body)
    delta = None
    while True:
        message = await asyncio.wait_for(conn.recv(), 10)
        now = time.perf_counter()
        first = first if first is not None else now
        kind = orjson.loads(message)["type"]
        if kind == "response.output_text.delta" and delta is None:
            delta = now
        if kind in ("response.completed", "error"):
            assert kind == "response.completed" and delta is not None, message
            return (first - t0) * 1000, (delta - t0) * 1000


async def measure(bases: dict[str, str], count: int) -> dict[tuple[str, str], list[Timing]]:
    chat = orjson.dumps({"model": "auto", "stream": True, "messages": [{"role": "user", "content": "Hello"}]})
    resp = orjson.dumps({"model": "auto", "stream": True, "input": "Hello"})
    create = orjson.dumps({"type": "response.create", "model": "auto", "input": "Hello", "store": False}).decode()
    out: dict[tuple[str, str], list[Timing]] = {}
    async with aiohttp.ClientSession() as session:
        conns = {
            name: await websockets.connect(base.replace("http", "ws") + "/v1/responses") for name, base in bases.items()
        }
        try:
            ways: dict[str, Callable[[str], Awaitable[Timing]]] = {
                "chat SSE": lambda name: sse(session, bases[name] + "/v1/chat/completions", chat),
                "Responses SSE": lambda name: sse(session, bases[name] + "/v1/responses", resp),
                "Responses WebSocket": lambda name: ws(conns[name], create),
            }
            for way, run in ways.items():
                for name in bases:  # warm
                    for _ in range(5):
                        await run(name)
                for i in range(count):
                    order = list(bases) if i % 2 == 0 else list(reversed(bases))
                    for name in order:
                        out.setdefault((way, name), []).append(await run(name))
        finally:
            for conn in conns.values():
                await conn.close()
    return out


def p(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def report(results: dict[tuple[str, str], list[Timing]], before: str, after: str, count: int, load: str) -> str:
    lines = [
        "# A text stream's first byte and first text: this tree against the one before",
        "",
        f"`python -m bench.first_event --count {count}` — {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, "
        f"{platform.machine()}, {os.cpu_count()} CPUs, load average at start {load}; before = `{before}`, "
        f"after = `{after}`; {count} calls per row and side, c=1, alternating; fake upstream: first event "
        "after 20 ms, one every 2 ms, 12 words; one tier (`bench/policies/bench.yaml`), access log on.",
        "",
        "| transport | side | first byte p50 | p90 | first text p50 | p90 |",
        "|---|---|---:|---:|---:|---:|",
    ]
    ratios = []
    for way in dict.fromkeys(w for w, _ in results):
        for side in ("before", "after"):
            t = results[(way, side)]
            firsts, texts = [a for a, _ in t], [b for _, b in t]
            lines.append(
                f"| {way} | {side} | {p(firsts, 50):.2f} ms | {p(firsts, 90):.2f} ms "
                f"| {p(texts, 50):.2f} ms | {p(texts, 90):.2f} ms |"
            )
        b, a = results[(way, "before")], results[(way, "after")]
        ratios.append(
            f"- {way}: first text p50 after / before = "
            f"{p([x for _, x in a], 50) / p([x for _, x in b], 50):.3f}, first byte "
            f"{p([x for x, _ in a], 50) / p([x for x, _ in b], 50):.3f}"
        )
    lines += [
        "",
        *ratios,
        "",
        "Read it as: on SSE the headers and the first events go out together with the answer's first chunk on",
        "both sides, so first byte and first text coincide. In WebSocket mode `before` sent `response.created`",
        "and `.in_progress` before the upstream answered (its first byte is the router's own work), `after`",
        "sends them with the first chunk so that they name the model that answers: the first message comes",
        "when the first text does, and the first text itself should not move. The p90s carry the machine's load.",
        "",
    ]
    return "\n".join(lines)


async def run(old: Path, tmpdir: Path, count: int) -> dict[tuple[str, str], list[Timing]]:
    py = sys.executable
    cluster = Cluster(tmpdir)
    try:
        fake_port = free_port()
        fake = cluster.start(
            "fake",
            [py, "-m", "router", "fake-upstream", "--port", str(fake_port),
             "--first-token-delay-ms", "20", "--chunk-delay-ms", "2"],
            fake_port,
        )  # fmt: skip
        await wait_healthy(fake, f"http://127.0.0.1:{fake_port}/health", 30)
        bases = {}
        for side, tree in (("before", old), ("after", ROOT)):
            port = free_port()
            env = {"BENCH_FAKE_PORT": str(fake_port), "PYTHONPATH": str(tree)}  # -P: not the working directory's
            cmd = [py, "-P", "-m", "router", "serve", "--policy", str(POLICY), "--port", str(port)]
            proc = cluster.start(side, [*cmd, "--log-level", "info"], port, env=env)
            await wait_healthy(proc, f"http://127.0.0.1:{port}/healthz", 30)
            bases[side] = f"http://127.0.0.1:{port}"
        return await measure(bases, count)
    finally:
        cluster.stop_all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="main", help="the git ref to compare with (default: main)")
    parser.add_argument("--count", type=int, default=200, help="calls per transport and side")
    args = parser.parse_args()
    load = "{:.2f}, {:.2f}, {:.2f}".format(*os.getloadavg())
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, check=True)
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "router"], capture_output=True).stdout
    after = head.stdout.decode().strip() + (" with uncommitted changes" if dirty else "")
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "before"
        old.mkdir()
        before = f"{args.before} ({export(args.before, old)})"
        results = asyncio.run(run(old, Path(tmp), args.count))
    OUT.write_text(report(results, before, after, args.count, load))
    print(OUT.read_text())


if __name__ == "__main__":
    main()

"""TTFT and bytes sent upstream per turn, by how the router reaches a Responses tier over a WAN:
its WebSocket mode vs HTTP keep-alive vs a new connection per request.

    python -m bench.ttft.upstream [--quick] [--rtt-ms 50 150] [--turns 10] [--repeats 3]
        → bench/results/ttft_upstream.md, .json, .png

The emulated WAN is on the router's upstream leg, the agent sits next to the router:

    agent (thin `websockets` client, loopback) → router (`agent-router serve`)
        → WAN relay (bench/ttft/wan.py: RTT/2 each way, one RTT more before a connection's first bytes)
        → fake upstream over TLS (bench/ttft/upstream_fake.py: self-signed, TLS 1.3; one `read_file`
          call per answer after `--first-token-ms`)

One router, three tiers of the same fake, chosen per session with `x-router-tier`:
    websocket       `websocket: true`: one upstream socket per session, only new input after turn 1
    keep-alive      `apis: [responses]` over the tier's warm aiohttp pool: the whole chain each turn
    new-connection  the same against a fake that closes each connection (`Connection: close`): TCP and
                    TLS again every turn (warm_connections: 0)

Each session is a Codex-like loop: a `generate: false` warm-up (the task and the tools; on the
WebSocket tier it opens the socket and the upstream takes the input), then `--turns` turns, each the
previous call's result (`OUTPUT_BYTES`) after `previous_response_id`. TTFT: from sending a turn to its
first `response.function_call_arguments.delta`. Bytes: what the fake received per turn (the JSON body or
message, before TLS and WebSocket framing; compression not counted). Netem is not used: this kernel
has no `sch_netem` (`tc qdisc add dev lo root netem delay` → "Specified qdisc kind is unknown"), although
network namespaces and veth pairs work.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import ssl
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import websockets

from bench.harness import Cluster, CpuMeter, free_port, wait_healthy
from bench.ttft.agent import OUTPUT_BYTES, READ_FILE, TASK, tool_result
from bench.ttft.run import self_signed, wait_tls

MODES = ("websocket", "keep-alive", "new-connection")
TIER = {"websocket": "ws", "keep-alive": "keepalive", "new-connection": "newconn"}
DELTAS = ("response.function_call_arguments.delta", "response.output_text.delta")

POLICY = """\
version: 1
models:
  ws:
    model: openai/fake-model
    api_base: https://127.0.0.1:{wan}/v1
    apis: [responses]
    websocket: true
    warm_connections: 0
  keepalive:
    model: openai/fake-model
    api_base: https://127.0.0.1:{wan}/v1
    apis: [responses]
    warm_connections: 2
  newconn:
    model: openai/fake-model
    api_base: https://127.0.0.1:{wan_close}/v1
    apis: [responses]
    warm_connections: 0
    keep_warm: 0
routes:
  - name: all
    use: ws
escalation: {{after_agent_error: {{repeated_call: false}}}}
allow_tier_header: true
store: memory://
"""


@dataclass
class Session:
    mode: str
    warm_ms: float = 0.0
    warm_bytes: int = 0
    ttft_ms: list[float] = field(default_factory=list)
    turn_ms: list[float] = field(default_factory=list)
    bytes: list[int] = field(default_factory=list)  # sent upstream, per turn
    sockets: int = 0  # upstream WebSocket connections the session used


@dataclass
class Setting:
    rtt_ms: float
    first_token_ms: float
    turns: int
    relay_rtt_ms: float = 0.0  # measured: a kept-alive request through the relay minus without it
    sessions: dict[str, list[Session]] = field(default_factory=lambda: {m: [] for m in MODES})
    others: float = 0.0


async def one_session(router: str, mode: str, turns: int, name: str) -> Session:
    """The warm-up and `turns` turns of one agent session, over the router's WebSocket mode."""
    s = Session(mode)
    headers = {"x-router-tier": TIER[mode], "x-session-id": name}
    async with websockets.connect(router, additional_headers=headers, max_size=None) as ws:

        async def turn(body: dict[str, Any]) -> tuple[dict[str, Any], float | None, float]:
            t0 = time.perf_counter()
            await ws.send(orjson.dumps({"type": "response.create", "model": "auto", "tools": [READ_FILE],
                                        "store": False, **body}).decode())  # fmt: skip
            first = None
            while True:
                event = orjson.loads(await asyncio.wait_for(ws.recv(), 30))
                if first is None and event["type"] in DELTAS:
                    first = time.perf_counter() - t0
                if event["type"] == "response.completed":
                    return event["response"], first, time.perf_counter() - t0
                if event["type"] == "error":
                    raise RuntimeError(f"{mode}: {event}")

        task = [{"type": "message", "role": "user", "content": TASK}]
        warm, _, took = await turn({"input": task, "generate": False})
        s.warm_ms = took * 1000
        previous, new = warm["id"], []
        for i in range(turns):
            response, first, took = await turn({"input": new, "previous_response_id": previous})
            s.ttft_ms.append((first if first is not None else float("nan")) * 1000)
            s.turn_ms.append(took * 1000)
            [call] = [item for item in response["output"] if item["type"] == "function_call"]
            previous = response["id"]
            new = [{"type": "function_call_output", "call_id": call["call_id"], "output": tool_result(i)}]
    return s


async def upstream_log(fake: str, ctx: ssl.SSLContext) -> list[dict[str, Any]]:
    """What the fake received since it was last cleared (then cleared)."""
    async with aiohttp.ClientSession() as http:
        async with http.get(fake + "/_fake/requests", ssl=ctx) as r:
            log = await r.json()
        async with http.delete(fake + "/_fake/requests", ssl=ctx) as r:
            await r.read()
    return [e for e in log if e["path"] == "/v1/responses" and e["method"] in ("POST", "WS")]


def account(s: Session, log: list[dict[str, Any]]) -> None:
    """Bytes per turn from the fake's log (the warm-up first, where it went upstream)."""
    if log and isinstance(log[0]["body"], dict) and log[0]["body"].get("generate") is False:
        s.warm_bytes = log.pop(0)["bytes"]
    s.bytes = [e["bytes"] for e in log]
    s.sockets = len({e["connection"] for e in log if e["method"] == "WS"})
    assert len(s.bytes) == len(s.ttft_ms), (s.mode, len(s.bytes), len(s.ttft_ms))


async def relay_rtt(direct: str, relayed: str, ctx: ssl.SSLContext, samples: int = 15) -> float:
    """ms a kept-alive GET /health takes through the relay, minus without it (medians)."""

    async def median(url: str) -> float:
        times = []
        async with aiohttp.ClientSession() as http:
            for _ in range(samples + 2):
                t0 = time.perf_counter()
                async with http.get(url + "/health", ssl=ctx) as r:
                    await r.read()
                times.append(time.perf_counter() - t0)
        return statistics.median(times[2:]) * 1000

    return await median(relayed) - await median(direct)


async def measure(cluster: Cluster, setting: Setting, cert: Path, key: Path, tmp: Path, repeats: int) -> None:
    py = sys.executable
    ctx = ssl.create_default_context(cafile=str(cert))
    fake, fake_close, wan, wan_close, router = (free_port() for _ in range(5))
    common = ["--cert", str(cert), "--key", str(key), "--first-token-delay-ms", str(setting.first_token_ms)]
    serve_fake = [py, "-m", "bench.ttft.upstream_fake"]
    procs = [
        cluster.start("fake", [*serve_fake, "--port", str(fake), *common], fake),
        cluster.start("fake-close", [*serve_fake, "--port", str(fake_close), "--close", *common], fake_close),
    ]
    for proc, port in zip(procs, (fake, fake_close), strict=True):
        await wait_tls(proc, f"https://127.0.0.1:{port}/health", ctx, 30)
    relay = [py, "-m", "bench.ttft.wan", "--rtt-ms", str(setting.rtt_ms), "--listen-port"]
    procs.append(cluster.start("wan", [*relay, str(wan), "--target-port", str(fake)], wan))
    procs.append(cluster.start("wan-close", [*relay, str(wan_close), "--target-port", str(fake_close)], wan_close))
    for proc, port in zip(procs[2:], (wan, wan_close), strict=True):
        await wait_tls(proc, f"https://127.0.0.1:{port}/health", ctx, 30)
    policy = tmp / f"policy-{setting.rtt_ms:g}.yaml"
    policy.write_text(POLICY.format(wan=wan, wan_close=wan_close))
    serve = [py, "-m", "router", "serve", "--policy", str(policy), "--port", str(router), "--log-level", "warning"]
    procs.append(cluster.start("router", serve, router, env={"SSL_CERT_FILE": str(cert)}))  # trusts the fake's cert
    try:
        await wait_healthy(procs[-1], f"http://127.0.0.1:{router}/healthz", 60)
        setting.relay_rtt_ms = await relay_rtt(f"https://127.0.0.1:{fake}", f"https://127.0.0.1:{wan}", ctx)
        url = f"ws://127.0.0.1:{router}/v1/responses"
        logs = {m: f"https://127.0.0.1:{fake_close if m == 'new-connection' else fake}" for m in MODES}
        for mode in MODES:  # first-call costs of every part, not measured
            await one_session(url, mode, 2, f"warm-{mode}")
            await upstream_log(logs[mode], ctx)
        with CpuMeter(procs) as meter:
            for r in range(repeats):
                for mode in MODES[r % len(MODES) :] + MODES[: r % len(MODES)]:
                    session = await one_session(url, mode, setting.turns, f"{mode}-{r}")
                    account(session, await upstream_log(logs[mode], ctx))
                    setting.sessions[mode].append(session)
        setting.others = meter.others
    finally:
        for proc in reversed(procs):
            cluster.stop(proc)


async def main_async(args: argparse.Namespace) -> list[Setting]:
    settings = [Setting(rtt, args.first_token_ms, args.turns) for rtt in args.rtt_ms]
    with tempfile.TemporaryDirectory(prefix="bench-ttft-upstream-") as name:
        tmp = Path(name)
        cert, key = self_signed(tmp)
        cluster = Cluster(tmp)
        try:
            for s in settings:
                started = time.monotonic()
                await measure(cluster, s, cert, key, tmp, args.repeats)
                medians = ", ".join(
                    f"{m} {statistics.median(t for x in s.sessions[m] for t in x.ttft_ms):.1f} ms" for m in MODES
                )
                print(f"RTT {s.rtt_ms:g} ms: TTFT {medians} ({time.monotonic() - started:.0f}s)", flush=True)
        finally:
            cluster.stop_all()
    return settings


def load(path: Path) -> list[Setting]:
    out = []
    for raw in json.loads(path.read_text()):
        saved = raw.pop("sessions")
        sessions = {m: [Session(**x) for x in saved[m]] for m in MODES}
        out.append(Setting(**raw, sessions=sessions))
    return out


def dump(settings: list[Setting]) -> str:
    return json.dumps([asdict(s) for s in settings], indent=1)


def main() -> None:
    from bench.ttft.upstream_report import write

    parser = argparse.ArgumentParser(description="TTFT and bytes upstream: WebSocket vs keep-alive vs new connection")
    parser.add_argument("--quick", action="store_true", help="one repeat, the first RTT only")
    parser.add_argument("--rtt-ms", type=float, nargs="+", default=[50.0, 150.0])
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--first-token-ms", type=float, default=20.0, help="the fake's own TTFT")
    parser.add_argument("--from-json", type=Path, help="re-write the report from a saved ttft_upstream.json")
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.rtt_ms = 1, args.rtt_ms[:1]
    started = time.monotonic()
    settings = load(args.from_json) if args.from_json else asyncio.run(main_async(args))
    with contextlib.suppress(IndexError):
        args.repeats = len(settings[0].sessions[MODES[0]])
    write(settings, args, time.monotonic() - started, OUTPUT_BYTES, dump(settings))


if __name__ == "__main__":
    main()

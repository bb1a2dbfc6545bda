"""Run the TTFT benchmark: `python -m bench.ttft [--quick] [--rtt-ms 50] [--turns 20]`.

Per upstream TTFT setting (the main one first, then a sweep), in one run on this machine:

    fake upstream  `agent-router fake-upstream --first-token-delay-ms T`     (plain HTTP, local)
    proxy          `agent-router serve --ssl-certfile ... --ssl-keyfile ...` (TLS, self-signed)
    WAN relay      bench/ttft/wan.py in front of the proxy (RTT), and one in front of the fake
                   (to calibrate: the fake's TTFT through the relay should be its own TTFT + RTT)
    agent          bench/ttft/agent.py: 20-turn tool loop for each way in MODES,
                   `repeats` times, the order rotated each repeat; medians are reported

The agent talks to the proxy only through the relay; the proxy talks to the fake directly (its
warm pool), as a deployment next to the agent's models would.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.harness import Cluster, CpuMeter, Proc, StartError, free_port, wait_healthy
from bench.ttft.agent import Run, http_loop, upstream_ttft, websocket_loop, websocket_raw_loop

ROOT = Path(__file__).resolve().parents[2]
POLICY = Path(__file__).resolve().parent / "policy.yaml"
MODES = ("new-connection", "keep-alive", "websocket", "websocket-raw")


@dataclass
class Setting:
    first_token_ms: float  # the fake's configured TTFT
    rtt_ms: float
    turns: int
    upstream: list[float] = field(default_factory=list)  # s: the fake's own TTFT, seen by the client
    through_wan: list[float] = field(default_factory=list)  # s: the same through the relay (kept alive)
    runs: dict[str, list[Run]] = field(default_factory=lambda: {m: [] for m in MODES})
    others: float = 0.0  # cores used by unrelated processes during the loops

    @property
    def upstream_ms(self) -> float:
        return statistics.median(self.upstream) * 1000

    @property
    def wan_rtt_ms(self) -> float:
        return (statistics.median(self.through_wan) - statistics.median(self.upstream)) * 1000

    def e2e(self, mode: str) -> float:
        return statistics.median(r.e2e for r in self.runs[mode])

    def ttft_per_turn(self, mode: str) -> list[float]:
        """ms, per turn: the median over repeats."""
        runs = self.runs[mode]
        return [statistics.median(r.ttft[i] for r in runs) * 1000 for i in range(self.turns)]

    @property
    def through_wan_ms(self) -> float:
        """The upstream's TTFT through the relay: its own TTFT + one RTT as the relay delivers it."""
        return statistics.median(self.through_wan) * 1000

    def excess(self, mode: str, calibrated: bool = True) -> list[float]:
        """ms, per turn: `mode`'s TTFT minus (the upstream's own TTFT + one RTT). Calibrated: that
        bound measured through the relay (its timer error included); else the nominal RTT."""
        bound = self.through_wan_ms if calibrated else self.upstream_ms + self.rtt_ms
        return [t - bound for t in self.ttft_per_turn(mode)]


def self_signed(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


async def wait_tls(proc: Proc, url: str, ctx: ssl.SSLContext, limit: float) -> None:
    deadline = time.monotonic() + limit
    async with httpx.AsyncClient(verify=ctx, timeout=2) as probe:
        while time.monotonic() < deadline:
            if not proc.alive():
                raise StartError(f"{proc.name} exited:\n{proc.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if (await probe.get(url)).status_code == 200:
                    return
            await asyncio.sleep(0.1)
    raise StartError(f"{proc.name} not healthy at {url} after {limit:.0f}s:\n{proc.log_tail()}")


async def one_loop(mode: str, url: str, ctx: ssl.SSLContext, turns: int) -> Run:
    if mode == "websocket":
        return await websocket_loop(url, ctx, turns)
    if mode == "websocket-raw":
        return await websocket_raw_loop(url, ctx, turns)
    return await http_loop(url, ctx, turns, keep_alive=mode == "keep-alive")


async def measure(cluster: Cluster, setting: Setting, cert: Path, key: Path, repeats: int) -> None:
    py = sys.executable
    ctx = ssl.create_default_context(cafile=str(cert))
    rtt = str(setting.rtt_ms)
    fake_port, proxy_port, wan_port, wan_fake_port = (free_port() for _ in range(4))
    fake_cmd = [py, "-m", "router", "fake-upstream", "--port", str(fake_port)]
    fake = cluster.start("fake", [*fake_cmd, "--first-token-delay-ms", str(setting.first_token_ms)], fake_port)
    await wait_healthy(fake, f"http://127.0.0.1:{fake_port}/health", 30)
    serve = [py, "-m", "router", "serve", "--policy", str(POLICY), "--port", str(proxy_port), "--log-level", "warning"]
    tls = ["--ssl-certfile", str(cert), "--ssl-keyfile", str(key)]
    proxy = cluster.start("proxy", [*serve, *tls], proxy_port, env={"BENCH_FAKE_PORT": str(fake_port)})
    await wait_tls(proxy, f"https://127.0.0.1:{proxy_port}/healthz", ctx, 60)
    wan_cmd = [py, "-m", "bench.ttft.wan", "--rtt-ms", rtt, "--listen-port"]
    wan = cluster.start("wan", [*wan_cmd, str(wan_port), "--target-port", str(proxy_port)], wan_port)
    wan_fake = cluster.start("wan-fake", [*wan_cmd, str(wan_fake_port), "--target-port", str(fake_port)], wan_fake_port)
    try:
        await wait_tls(wan, f"https://127.0.0.1:{wan_port}/healthz", ctx, 30)
        await wait_healthy(wan_fake, f"http://127.0.0.1:{wan_fake_port}/health", 30)
        setting.upstream = (await upstream_ttft(f"http://127.0.0.1:{fake_port}/v1", 25))[5:]
        setting.through_wan = (await upstream_ttft(f"http://127.0.0.1:{wan_fake_port}/v1", 25))[5:]
        url = f"https://127.0.0.1:{wan_port}/v1"
        for mode in MODES:  # warm-up: first-call costs of the proxy and the client libraries
            await one_loop(mode, url, ctx, 3)
        with CpuMeter([fake, proxy, wan]) as meter:
            for r in range(repeats):
                for mode in MODES[r % len(MODES) :] + MODES[: r % len(MODES)]:
                    setting.runs[mode].append(await one_loop(mode, url, ctx, setting.turns))
        setting.others = meter.others
    finally:
        for proc in (wan_fake, wan, proxy, fake):
            cluster.stop(proc)


async def main_async(args: argparse.Namespace) -> list[Setting]:
    settings = [Setting(t, args.rtt_ms, args.turns) for t in args.first_token_ms]
    with tempfile.TemporaryDirectory(prefix="bench-ttft-") as tmp:
        cert, key = self_signed(Path(tmp))
        cluster = Cluster(Path(tmp))
        try:
            for s in settings:
                started = time.monotonic()
                await measure(cluster, s, cert, key, args.repeats)
                summary = ", ".join(f"{m} {s.e2e(m):.2f}s" for m in MODES)
                print(f"TTFT {s.first_token_ms:g} ms: {summary} ({time.monotonic() - started:.0f}s)", flush=True)
        finally:
            cluster.stop_all()
    return settings


def main() -> None:
    from bench.ttft.report import write

    parser = argparse.ArgumentParser(description="TTFT per agent turn over an emulated WAN")
    parser.add_argument("--quick", action="store_true", help="one repeat, main setting only")
    parser.add_argument("--rtt-ms", type=float, default=50.0)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--first-token-ms", type=float, nargs="+", default=[50.0, 20.0, 100.0, 200.0],
        help="the fake's TTFT settings; the first is the main one",
    )  # fmt: skip
    parser.add_argument("--from-json", type=Path, help="re-write the report from a saved ttft.json (no measuring)")
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.first_token_ms = 1, args.first_token_ms[:1]
    started = time.monotonic()
    settings = load(args.from_json) if args.from_json else asyncio.run(main_async(args))
    if args.from_json:
        args.repeats = len(settings[0].runs[MODES[0]])
    write(settings, args, time.monotonic() - started)


def load(path: Path) -> list[Setting]:
    out = []
    for raw in json.loads(path.read_text()):
        saved = raw.pop("runs")
        runs = {mode: [Run(**r) for r in saved[mode]] for mode in MODES}
        out.append(Setting(**raw, runs=runs))
    return out

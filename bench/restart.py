"""Connections through rolling restarts and a stop: `python -m bench.restart [--runs N] [--seconds S]`.

Runs `agent-router serve --workers 2` (SQLite store) in front of `agent-router fake-upstream`, both
real processes, and drives a mixed load at it over loopback for `--seconds`: chat calls each on a
new connection, chat calls on kept-alive connections, SSE streams (chat, `stream: true`) read to
their end, and WebSocket sessions (`/v1/responses`, several turns each). During the load the
supervisor gets SIGHUP `--reloads` times (a rolling restart each); with `--stop` it then gets
SIGTERM, and the load goes on until the supervisor has exited.

Every call is counted by what the client saw (`Tally`):

    ok            answered 200 (a stream: read to its end, `[DONE]`; a WebSocket turn: completed)
    reset         the connection was reset or closed with no answer (ECONNRESET, EOF, a cut stream)
    refused       connect() was refused (ECONNREFUSED): no request was sent. Expected only once
                  the listening socket is closed after SIGTERM
    ws_closed_before_turn
                  a WebSocket closed 1012 (service restart) between turns, or after a turn was
                  sent but before its first event (the server had not taken it): the session
                  reconnects and sends it again, as a client does on 1012
    ws_refused_before_turn
                  a turn answered at once with the `error` event `shutting_down` (sent to a
                  draining worker: never run, to be sent again), then the socket closes 1012
    other         anything else (status ≠ 200, a turn's `error` event, a timeout), by its repr

A run is clean when nothing is `reset` or `other`, and nothing `refused` before the stop (each
kind is counted per load: new, kept, stream, ws). Prints one line
per run and the totals; `--before` labels the lines (for the numbers in docs/operations.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp
import orjson
import websockets

ROOT = Path(__file__).resolve().parents[1]
CHAT = orjson.dumps({"model": "auto", "messages": [{"role": "user", "content": "hello"}]})
STREAM = orjson.dumps({"model": "auto", "stream": True, "messages": [{"role": "user", "content": "hello"}]})
HEADERS = {"content-type": "application/json"}
TIMEOUT = aiohttp.ClientTimeout(total=15)
POLICY = """
version: 1
models:
  fast:
    model: openai/fake-model
    api_base: {url}
routes:
  - name: default
    use: fast
store: sqlite:///{db}
"""


class Tally:
    """Outcomes of the load's calls, by kind (see the module's docstring)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.stopped_at: float | None = None  # when SIGTERM was sent
        self.done = False  # set to end the load before its time
        self.samples: dict[str, str] = {}

    def add(self, kind: str, who: str, detail: str = "") -> None:
        """Count one outcome of a call made by `who` (new, kept, stream, ws)."""
        if kind == "refused" and self.stopped_at is None:
            kind = "refused_while_serving"
        key = kind if kind == "ok" else f"{kind}[{who}]"
        self.counts[key] += 1
        if detail:
            self.samples.setdefault(key, detail)

    def failed(self, exc: BaseException, who: str) -> None:
        """Count a call that raised."""
        refused = isinstance(exc, aiohttp.ClientConnectorError) and exc.errno == errno.ECONNREFUSED
        if refused or isinstance(exc, ConnectionRefusedError):
            self.add("refused", who)
        elif isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError | ConnectionError):
            self.add("reset", who, repr(exc))
        elif isinstance(exc, aiohttp.ClientOSError) and exc.errno in (errno.ECONNRESET, errno.EPIPE, None):
            self.add("reset", who, repr(exc))  # None: "Can not write request body" (the connection was closed)
        elif isinstance(exc, websockets.ConnectionClosed):
            self.add("reset", who, repr(exc))
        else:
            self.add("other", who, repr(exc))

    def bad(self) -> int:
        """Calls that failed while the server was expected to take them."""
        return sum(v for k, v in self.counts.items() if k.startswith(("reset", "other", "refused_while_serving")))

    def line(self) -> str:
        return " ".join(f"{k}={v}" for k, v in sorted(self.counts.items()))


async def _call(session: aiohttp.ClientSession, url: str, body: bytes, tally: Tally, who: str) -> None:
    try:
        async with session.post(url, data=body, headers=HEADERS) as resp:
            raw = await resp.read()
        if resp.status != 200:
            tally.add("other", who, f"status {resp.status}: {raw[:200]!r}")
        elif who == "stream" and b"data: [DONE]" not in raw:
            tally.add("reset", who, f"stream without [DONE]: {raw[-200:]!r}")
        else:
            tally.add("ok", who)
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        tally.failed(exc, who)


async def _http(base: str, tally: Tally, until: float, *, keep_alive: bool, stream: bool = False) -> None:
    """Calls one after another until `until`: each on a new connection, or on one kept alive."""
    connector = aiohttp.TCPConnector(limit=1, force_close=not keep_alive)
    async with aiohttp.ClientSession(connector=connector, timeout=TIMEOUT) as session:
        while time.monotonic() < until and not tally.done:
            started = time.monotonic()
            who = "stream" if stream else "kept" if keep_alive else "new"
            await _call(session, base + "/v1/chat/completions", STREAM if stream else CHAT, tally, who)
            if tally.stopped_at is not None and time.monotonic() - started < 0.01:
                await asyncio.sleep(0.05)  # refused at once after the stop: no busy loop


async def _ws(base: str, tally: Tally, until: float) -> None:
    """WebSocket sessions of several turns each, reconnecting when one is closed between turns."""
    url = base.replace("http://", "ws://") + "/v1/responses"
    turn = orjson.dumps({"type": "response.create", "model": "auto", "input": "hi"}).decode()
    while time.monotonic() < until and not tally.done:
        try:
            async with websockets.connect(url, open_timeout=10, close_timeout=2) as ws:
                for _ in range(20):
                    if time.monotonic() >= until or tally.done:
                        break
                    events = 0
                    try:
                        await ws.send(turn)
                        while True:
                            event = orjson.loads(await asyncio.wait_for(ws.recv(), 15))
                            events += 1
                            if event["type"] == "response.completed":
                                tally.add("ok", "ws")
                                break
                            if event["type"] == "error" and event.get("code") == "shutting_down" and events == 1:
                                tally.add("ws_refused_before_turn", "ws")  # draining: the turn never ran
                                break
                            if event["type"] == "error":
                                tally.add("other", "ws", f"error event: {event}")
                                break
                    except websockets.ConnectionClosed as closed:
                        if closed.rcvd is not None and closed.rcvd.code == 1012 and not events:
                            # service restart before the turn began: a client sends it again on a new socket
                            tally.add("ws_closed_before_turn", "ws")
                            break
                        raise
        except websockets.InvalidStatus as exc:
            tally.add("other", "ws", repr(exc))
        except (OSError, TimeoutError, websockets.WebSocketException, aiohttp.ClientError) as exc:
            tally.failed(exc, "ws")
            if tally.stopped_at is not None:
                await asyncio.sleep(0.05)


async def drive(base: str, seconds: float, tally: Tally, shape: dict[str, int] | None = None) -> None:
    """The mixed load for `seconds`, or until `tally.done` (every call is bounded by its timeout)."""
    shape = shape or {"new": 4, "kept": 3, "stream": 2, "ws": 2}
    until = time.monotonic() + seconds
    tasks = [
        *(_http(base, tally, until, keep_alive=False) for _ in range(shape["new"])),
        *(_http(base, tally, until, keep_alive=True) for _ in range(shape["kept"])),
        *(_http(base, tally, until, keep_alive=True, stream=True) for _ in range(shape["stream"])),
        *(_ws(base, tally, until) for _ in range(shape["ws"])),
    ]
    await asyncio.wait_for(asyncio.gather(*tasks), seconds + 30)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def ready(url: str, proc: subprocess.Popen[bytes], limit: float = 60) -> None:
    """Until `url` answers 200 (every worker has started: the log says so), or fail after `limit` s."""
    deadline = time.monotonic() + limit
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as s:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"exited with {proc.returncode}")
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with s.get(url) as resp:
                    if resp.status == 200:
                        return
            await asyncio.sleep(0.1)
    raise TimeoutError(url)


async def wait_logged(log: Path, text: str, count: int, limit: float) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if (await asyncio.to_thread(log.read_text, errors="replace")).count(text) >= count:
            return True
        await asyncio.sleep(0.1)
    return False


async def one_run(seconds: float, reloads: int, stop: bool, workdir: Path) -> Tally:
    fake_port, port = free_port(), free_port()
    policy = workdir / "policy.yaml"
    policy.write_text(POLICY.format(url=f"http://127.0.0.1:{fake_port}/v1", db=workdir / "state.db"))
    log = workdir / "serve.log"
    env = {**os.environ, "AGENT_ROUTER_RELOAD_POLICY": "false", "AGENT_ROUTER_WARM_UP": "false"}
    fake = subprocess.Popen(  # noqa: ASYNC220
        [sys.executable, "-m", "router", "fake-upstream", "--port", str(fake_port)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    with log.open("wb") as out:
        serve = subprocess.Popen(  # noqa: ASYNC220
            [sys.executable, "-m", "router", "serve", "--policy", str(policy), "--port", str(port),
             "--workers", "2", "--log-level", "info"],
            cwd=ROOT, env=env, stdout=out, stderr=out,
        )  # fmt: skip
    tally = Tally()
    try:
        await ready(f"http://127.0.0.1:{fake_port}/health", fake)
        await ready(f"http://127.0.0.1:{port}/readyz", serve)
        if not await wait_logged(log, "workers serving on", 1, 60):
            raise TimeoutError("the workers did not start")
        load = asyncio.create_task(drive(f"http://127.0.0.1:{port}", seconds, tally))
        await asyncio.sleep(1.0)
        for n in range(1, reloads + 1):
            serve.send_signal(signal.SIGHUP)
            if not await wait_logged(log, "reload done", n, 30):
                raise TimeoutError(f"reload {n} did not finish")
            await asyncio.sleep(0.5)
        if stop:
            tally.stopped_at = time.monotonic()
            serve.send_signal(signal.SIGTERM)
            await asyncio.to_thread(serve.wait, 30)
        await load
    finally:
        for proc in (serve, fake):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    return tally


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=15.0, help="of load per run")
    parser.add_argument("--reloads", type=int, default=2, help="SIGHUPs per run")
    parser.add_argument("--stop", action="store_true", help="SIGTERM at the end of each run, under load")
    parser.add_argument("--label", default="", help="printed with each line (say: before, after)")
    args = parser.parse_args()
    total = Counter[str]()
    clean = 0
    for n in range(1, args.runs + 1):
        with tempfile.TemporaryDirectory(prefix="bench-restart-") as tmp:
            tally = await one_run(args.seconds, args.reloads, args.stop, Path(tmp))
        total.update(tally.counts)
        clean += not tally.bad()
        samples = "".join(f"\n  {k}: {v}" for k, v in tally.samples.items())
        print(f"{args.label} run {n}: {tally.line()}{samples}", flush=True)
    totals = " ".join(f"{k}={v}" for k, v in sorted(total.items()))
    print(f"{args.label} total over {args.runs} runs ({clean} clean): {totals}")
    return 0 if clean == args.runs else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

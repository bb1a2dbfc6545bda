"""Soak: `python -m bench.soak [--minutes 10] [--rate 20] [--concurrency 64] [--seed 7]`.

Starts two fake upstreams (`fast`: 20% of its tool calls broken, in every way the fake knows;
`full`: healthy), and the proxy as `agent-router serve` (SQLite store in a temporary directory),
all on loopback. Then drives a steady, open-loop rate of mixed calls for N minutes, at most
`--concurrency` in flight, each with a 30 s client timeout:

    chat JSON (text, tools)  ·  chat SSE (text, tools; raw bytes, and through the openai SDK)
    Responses JSON and SSE (tools)  ·  Responses WebSocket turns (a tool loop on persistent
    connections, chained with previous_response_id; a new conversation every 20 turns)

Every answer is checked, and any failure counts as a client error:
- status 200; the fake's answers are seeded but their order at the fake depends on scheduling, so
  streams are checked structurally and against what the fake can produce: one id, one role delta,
  content and tool-call deltas before the one finish_reason, the `: router` trailer then `[DONE]`
  last, no error frame; text answers are whole (12 words of the fake's vocabulary, capitalized,
  ending with "."; a lost or reordered first/last chunk shows), tool calls are whole and valid
  against the offered schema (a lost argument chunk shows); Responses events have contiguous
  sequence numbers, their deltas add up to the `.done` values and to `response.completed`.
- the proxy's RSS (with its children) is sampled every 10 s; the growth per minute is the slope
  of a least-squares line over the samples after the first minute (warm-up).
Writes bench/results/soak.md (summary) and bench/results/soak.json (samples).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import random
import re
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import jsonschema
import openai
import orjson
import websockets

from bench.harness import Cluster, Proc, free_port, wait_healthy

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"

BAD_TOOL_RATE = 0.2
CALL_TIMEOUT = 30.0
SAMPLE_EVERY = 10.0
WS_CONNECTIONS = 2
WS_CHAIN = 20  # turns before a WebSocket agent starts a new conversation
WORDS = 12  # the fake's text answers: this many words

PARAMS = {
    "get_weather": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "read_file": {
        "type": "object",
        "properties": {"path": {"type": "string"}, "lines": {"type": "integer", "minimum": 1}},
        "required": ["path"],
    },
}
CHAT_TOOLS = [{"type": "function", "function": {"name": n, "parameters": p}} for n, p in PARAMS.items()]
RESP_TOOLS = [{"type": "function", "name": n, "parameters": p} for n, p in PARAMS.items()]
ANNOUNCE = re.compile(r"I will call (get_weather|read_file) now\.")  # the fake's missing_tool_call text

# kind → share of calls
MIX: dict[str, float] = {
    "chat-json-text": 0.10,
    "chat-json-tools": 0.20,
    "chat-sse-text": 0.10,
    "chat-sse-tools": 0.20,
    "chat-sdk-sse-tools": 0.10,
    "resp-json-tools": 0.10,
    "resp-sse-tools": 0.10,
    "resp-ws-turn": 0.10,
}


class Bad(Exception):
    """An answer that breaks the contract (the soak's client error)."""


@dataclass
class Outcome:
    escalated: bool = False
    tools: bool = False


@dataclass
class KindStats:
    calls: int = 0
    latencies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    escalated: int = 0
    tool_calls: int = 0


# ------------------------------------------------------------------------------ answer checks


def check_text(text: str, vocab: frozenset[str]) -> None:
    words = text.removesuffix(".").split(" ")
    if not text.endswith(".") or len(words) != WORDS or not words[0][:1].isupper():
        raise Bad(f"text is not a whole answer: {text!r}")
    if any(w.lower() not in vocab for w in words):
        raise Bad(f"text has words the fake never says: {text!r}")


def check_call(name: str, arguments: str) -> None:
    if name not in PARAMS:
        raise Bad(f"unknown tool reached the client: {name!r}")
    try:
        args = orjson.loads(arguments)
        jsonschema.validate(args, PARAMS[name])
    except (orjson.JSONDecodeError, jsonschema.ValidationError) as exc:
        raise Bad(f"invalid tool call reached the client: {name} {arguments!r} ({type(exc).__name__})") from None


def check_tool_text(text: str) -> None:
    """Text before a tool call: only the fast tier's announcement, which escalated after it was sent."""
    if text and not ANNOUNCE.fullmatch(text.split("\n\n")[0]):
        raise Bad(f"unexpected text in a tool answer: {text!r}")


def check_chat_message(message: dict[str, Any], finish: str | None, tools: bool, vocab: frozenset[str]) -> None:
    calls = message.get("tool_calls") or []
    if tools:
        if len(calls) != 1 or finish != "tool_calls":
            raise Bad(f"expected one tool call, got {len(calls)} (finish {finish})")
        check_call(calls[0]["function"]["name"], calls[0]["function"]["arguments"])
    else:
        if calls or finish != "stop":
            raise Bad(f"a text answer with calls or finish {finish}")
        check_text(message.get("content") or "", vocab)


def parse_chat_sse(raw: bytes) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The chunks and the trailer of a chat SSE body, checking its framing."""
    if not raw.endswith(b"data: [DONE]\n\n"):
        raise Bad(f"stream does not end with [DONE]: {raw[-120:]!r}")
    frames = raw[: -len(b"data: [DONE]\n\n")].split(b"\n\n")
    if frames[-1] != b"":
        raise Bad("a frame is not terminated")
    frames = frames[:-1]
    if not frames or not frames[-1].startswith(b": router "):
        raise Bad("the trailer is not right before [DONE]")
    trailer = orjson.loads(frames[-1][len(b": router ") :])
    chunks = []
    for frame in frames[:-1]:
        if not frame.startswith(b"data: ") or b"\n" in frame:
            raise Bad(f"unexpected frame: {frame[:120]!r}")
        chunk = orjson.loads(frame[6:])
        if "error" in chunk:
            raise Bad(f"error frame: {chunk}")
        chunks.append(chunk)
    return chunks, trailer


def check_chat_chunks(chunks: list[dict[str, Any]], tools: bool, vocab: frozenset[str]) -> None:
    if not chunks:
        raise Bad("no chunks")
    if len({c["id"] for c in chunks}) != 1:
        raise Bad("more than one id")
    roles, text = 0, ""
    finishes: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    for i, chunk in enumerate(chunks):
        if chunk.get("object") != "chat.completion.chunk":
            raise Bad(f"chunk object {chunk.get('object')!r}")
        for choice in chunk.get("choices") or []:
            if choice.get("index") != 0:
                raise Bad("choice index != 0")
            if finishes:
                raise Bad(f"a delta after the finish (chunk {i})")
            delta = choice.get("delta") or {}
            if "role" in delta:
                roles += 1
                if text or calls:
                    raise Bad("the role delta is not first")
            text += delta.get("content") or ""
            for tc in delta.get("tool_calls") or []:
                call = calls.setdefault(tc["index"], {"id": "", "name": "", "arguments": ""})
                if tc.get("id"):
                    if call["id"]:
                        raise Bad("a tool call id sent twice")
                    call["id"] = tc["id"]
                fn = tc.get("function") or {}
                call["name"] += fn.get("name") or ""
                call["arguments"] += fn.get("arguments") or ""
            if choice.get("finish_reason"):
                finishes.append(choice["finish_reason"])
    if roles != 1 or len(finishes) != 1:
        raise Bad(f"{roles} role deltas, finishes {finishes}")
    if tools:
        if len(calls) != 1 or finishes != ["tool_calls"]:
            raise Bad(f"expected one tool call, got {len(calls)} (finish {finishes})")
        [call] = calls.values()
        if not call["id"]:
            raise Bad("a tool call without id")
        check_call(call["name"], call["arguments"])
        check_tool_text(text)
    else:
        if calls or finishes != ["stop"]:
            raise Bad(f"a text answer with calls or finish {finishes}")
        for part in text.split("\n\n"):
            check_text(part, vocab)


def check_resp_events(events: list[dict[str, Any]], tools: bool, vocab: frozenset[str]) -> dict[str, Any]:
    """One streamed response's events; returns `response.completed`."""
    if [e.get("sequence_number") for e in events] != list(range(len(events))):
        raise Bad("sequence numbers are not contiguous")
    types = [e["type"] for e in events]
    if types[:2] != ["response.created", "response.in_progress"] or types[-1] != "response.completed":
        raise Bad(f"event order: {types[:3]} … {types[-2:]}")
    if "error" in types:
        raise Bad("an error event")
    text_deltas: dict[int, str] = {}
    arg_deltas: dict[int, str] = {}
    done: dict[int, dict[str, Any]] = {}
    for e in events:
        if e["type"] == "response.output_text.delta":
            text_deltas[e["output_index"]] = text_deltas.get(e["output_index"], "") + e["delta"]
        elif e["type"] == "response.output_text.done" and text_deltas.get(e["output_index"]) != e["text"]:
            raise Bad("text deltas do not add up to the done text")
        elif e["type"] == "response.function_call_arguments.delta":
            arg_deltas[e["output_index"]] = arg_deltas.get(e["output_index"], "") + e["delta"]
        elif (
            e["type"] == "response.function_call_arguments.done" and arg_deltas.get(e["output_index"]) != e["arguments"]
        ):
            raise Bad("argument deltas do not add up to the done arguments")
        elif e["type"] == "response.output_item.done":
            done[e["output_index"]] = e["item"]
    final = events[-1]["response"]
    if final["output"] != [done[i] for i in sorted(done)]:
        raise Bad("response.completed's output differs from the items streamed")
    check_resp_output(final, tools, vocab)
    return events[-1]


def check_resp_output(response: dict[str, Any], tools: bool, vocab: frozenset[str]) -> None:
    if response.get("status") != "completed":
        raise Bad(f"response status {response.get('status')}")
    calls = [i for i in response["output"] if i["type"] == "function_call"]
    texts = [p["text"] for i in response["output"] if i["type"] == "message" for p in i["content"]]
    if tools:
        if len(calls) != 1:
            raise Bad(f"expected one function_call, got {len(calls)}")
        check_call(calls[0]["name"], calls[0]["arguments"])
        check_tool_text("".join(texts))
    else:
        if calls or len(texts) != 1:
            raise Bad(f"a text answer with {len(calls)} calls and {len(texts)} texts")
        for part in texts[0].split("\n\n"):
            check_text(part, vocab)


# ------------------------------------------------------------------------------ the calls


class Driver:
    def __init__(
        self,
        base: str,
        session: aiohttp.ClientSession,
        sdk: openai.AsyncOpenAI,
        vocab: frozenset[str],
        sessions: int = 0,
    ) -> None:
        self.sessions = sessions
        self.base = base
        self.url = base + "/v1"
        self.session = session
        self.sdk = sdk
        self.vocab = vocab
        self.ws: list[WsAgent] = [WsAgent(self, i) for i in range(WS_CONNECTIONS)]
        self._next_ws = 0

    def headers(self, n: int) -> dict[str, str]:
        """`x-session-id` from a pool of `sessions` agents; none (a session per call) when 0."""
        return {"x-session-id": f"soak-agent-{n % self.sessions}"} if self.sessions else {}

    async def post(self, path: str, body: dict[str, Any], n: int) -> tuple[int, dict[str, str], bytes]:
        async with self.session.post(self.url + path, data=orjson.dumps(body), headers=self.headers(n)) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, await r.read()

    @staticmethod
    def ok(status: int, raw: bytes) -> None:
        if status != 200:
            raise Bad(f"HTTP {status}: {raw[:200]!r}")

    async def call(self, kind: str, n: int) -> Outcome:
        tools = "tools" in kind or kind == "resp-ws-turn"
        user = f"call {n}: what is the weather in Paris, and what is in README.md?"
        chat: dict[str, Any] = {"model": "auto", "messages": [{"role": "user", "content": user}]}
        if tools and kind.startswith("chat"):
            chat["tools"] = CHAT_TOOLS
        if kind.startswith("chat-json"):
            status, headers, raw = await self.post("/chat/completions", chat, n)
            self.ok(status, raw)
            choice = orjson.loads(raw)["choices"][0]
            check_chat_message(choice["message"], choice.get("finish_reason"), tools, self.vocab)
            return Outcome(headers.get("x-router-escalated") == "true", tools)
        if kind.startswith("chat-sse"):
            status, headers, raw = await self.post("/chat/completions", {**chat, "stream": True}, n)
            self.ok(status, raw)
            chunks, trailer = parse_chat_sse(raw)
            check_chat_chunks(chunks, tools, self.vocab)
            return Outcome(bool(trailer.get("escalated")), tools)
        if kind == "chat-sdk-sse-tools":
            raw_stream = await self.sdk.chat.completions.with_raw_response.create(
                **chat, stream=True, extra_headers=self.headers(n)
            )
            chunks = [c.model_dump(exclude_none=True) async for c in raw_stream.parse()]
            check_chat_chunks([c for c in chunks if c.get("choices") is not None], tools, self.vocab)
            # the trailer is an SSE comment the SDK skips; the headers tell escalations before the first byte
            return Outcome(raw_stream.headers.get("x-router-escalated") == "true", tools)
        resp = {"model": "auto", "input": user, "tools": RESP_TOOLS, "store": False}
        if kind == "resp-json-tools":
            status, headers, raw = await self.post("/responses", resp, n)
            self.ok(status, raw)
            check_resp_output(orjson.loads(raw), True, self.vocab)
            return Outcome(headers.get("x-router-escalated") == "true", True)
        if kind == "resp-sse-tools":
            status, headers, raw = await self.post("/responses", {**resp, "stream": True}, n)
            self.ok(status, raw)
            events = sse_events(raw)
            final = check_resp_events(events, True, self.vocab)
            return Outcome(bool(final["router"]["escalated"]), True)
        agent = self.ws[self._next_ws % len(self.ws)]
        self._next_ws += 1
        return await agent.turn(n)


def sse_events(raw: bytes) -> list[dict[str, Any]]:
    events = []
    for frame in raw.split(b"\n\n"):
        if not frame or frame.startswith(b": router "):
            continue
        lines = frame.split(b"\n")
        if len(lines) != 2 or not lines[0].startswith(b"event: ") or not lines[1].startswith(b"data: "):
            raise Bad(f"unexpected frame: {frame[:120]!r}")
        event = orjson.loads(lines[1][6:])
        if lines[0][7:].decode() != event["type"]:
            raise Bad("event: line and data type differ")
        events.append(event)
    return events


class WsAgent:
    """One persistent WebSocket connection running a tool loop: ask (tools offered) → a function
    call; answer it (no tools) → text; chained with previous_response_id, anew every WS_CHAIN turns."""

    def __init__(self, driver: Driver, index: int) -> None:
        self.driver = driver
        self.index = index
        self.lock = asyncio.Lock()
        self.conn: Any = None
        self.previous: str | None = None
        self.pending_call: dict[str, Any] | None = None
        self.turns = 0

    async def turn(self, n: int) -> Outcome:
        async with self.lock:  # one response at a time on a connection
            if self.conn is None:
                url = self.driver.url.replace("http://", "ws://") + "/responses"
                headers = self.driver.headers(self.index)
                self.conn = await websockets.connect(url, max_size=None, open_timeout=10, additional_headers=headers)
            if self.turns % WS_CHAIN == 0:
                self.previous, self.pending_call = None, None
            self.turns += 1
            event: dict[str, Any] = {"type": "response.create", "model": "auto", "store": False}
            if self.pending_call is not None:
                output = {"type": "function_call_output", "call_id": self.pending_call["call_id"], "output": "sunny"}
                event["input"] = [output]
                tools = False
            else:
                event["input"] = f"turn {n}: what is the weather in Paris?"
                event["tools"] = RESP_TOOLS
                tools = True
            if self.previous is not None:
                event["previous_response_id"] = self.previous
            try:
                await self.conn.send(orjson.dumps(event).decode())
                events = []
                for _ in range(10_000):
                    events.append(orjson.loads(await self.conn.recv()))
                    if events[-1]["type"] in ("response.completed", "response.incomplete", "error"):
                        break
            except BaseException:
                conn, self.conn = self.conn, None  # a broken connection is not reused
                with contextlib.suppress(Exception):
                    await conn.close()
                raise
            final = check_resp_events(events, tools, self.driver.vocab)
            response = final["response"]
            self.previous = response["id"]
            calls = [i for i in response["output"] if i["type"] == "function_call"]
            self.pending_call = calls[0] if tools else None
            return Outcome(bool(final["router"]["escalated"]), tools)

    async def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                await self.conn.close()


# ------------------------------------------------------------------------------ the run


def policy(fast_port: int, full_port: int, db: Path) -> str:
    return f"""\
version: 1
models:
  fast:
    model: openai/fast-model
    api_base: http://127.0.0.1:{fast_port}/v1
    warm_connections: 4
    timeouts: {{connect: 2, first_token: 10, total: 30}}
  full:
    model: openai/full-model
    api_base: http://127.0.0.1:{full_port}/v1
    warm_connections: 4
    timeouts: {{connect: 2, first_token: 10, total: 30}}
aliases: {{"*": auto}}
routes:
  - name: all
    use: fast
escalation: {{to: full, max_attempts: 3, deadline: 30}}
store: sqlite:///{db}
"""


def router_cmd(*args: str) -> list[str]:
    exe = Path(sys.executable).parent / "agent-router"
    return [str(exe), *args] if exe.exists() else [sys.executable, "-m", "router", *args]


def percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))] * 1000


def slope_per_minute(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MiB) samples, in MiB per minute."""
    if len(samples) < 2:
        return float("nan")
    xs, ys = [t for t, _ in samples], [m for _, m in samples]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var * 60 if var else float("nan")


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


async def sampler(proxy: Proc, t0: float, out: list[dict[str, float]], stop: asyncio.Event) -> None:
    while not stop.is_set():
        out.append({"t": time.monotonic() - t0, "rss_mib": proxy.rss_mib(), "fds": open_fds(proxy.pid)})
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), SAMPLE_EVERY)


async def soak(
    minutes: float, rate: float, concurrency: int, seed: int, out_dir: Path, sessions: int = 0
) -> dict[str, Any]:
    from router.fake.values import VOCAB  # the fake's words: what a whole text answer is made of

    vocab = frozenset(w.lower() for w in VOCAB)
    work = Path(tempfile.mkdtemp(prefix="agent-router-soak-"))
    cluster = Cluster(work)
    fast_port, full_port, proxy_port = free_port(), free_port(), free_port()
    stats = {k: KindStats() for k in MIX}
    samples: list[dict[str, float]] = []
    examples: list[str] = []
    try:
        fake = ["fake-upstream", "--chunk-delay-ms", "1"]
        fast = cluster.start(
            "fast",
            router_cmd(*fake, "--port", str(fast_port), "--seed", "1", "--bad-tool-rate", str(BAD_TOOL_RATE)),
            fast_port,
        )
        full = cluster.start("full", router_cmd(*fake, "--port", str(full_port), "--seed", "2"), full_port)
        for p in (fast, full):
            await wait_healthy(p, f"http://127.0.0.1:{p.port}/health", 30)
        policy_path = work / "policy.yaml"
        policy_path.write_text(policy(fast_port, full_port, work / "state.db"))
        env = {"AGENT_ROUTER_RELOAD_POLICY": "false"}
        proxy = cluster.start(
            "proxy",
            router_cmd("serve", "--policy", str(policy_path), "--port", str(proxy_port), "--log-level", "warning"),
            proxy_port,
            env,
        )
        await wait_healthy(proxy, f"http://127.0.0.1:{proxy_port}/healthz", 60)
        base = f"http://127.0.0.1:{proxy_port}"
        idle_rss = proxy.rss_mib()
        print(f"proxy pid {proxy.pid} healthy, RSS {idle_rss:.1f} MiB; soaking {minutes} min at {rate}/s", flush=True)

        connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=0, keepalive_timeout=60)
        timeout = aiohttp.ClientTimeout(total=CALL_TIMEOUT)
        async with (
            aiohttp.ClientSession(connector=connector, timeout=timeout) as session,
            openai.AsyncOpenAI(base_url=base + "/v1", api_key="x", max_retries=0, timeout=CALL_TIMEOUT) as sdk,
        ):
            driver = Driver(base, session, sdk, vocab, sessions)
            rng = random.Random(seed)
            kinds, weights = list(MIX), list(MIX.values())
            gate = asyncio.Semaphore(concurrency)
            tasks: set[asyncio.Task[None]] = set()
            stop = asyncio.Event()
            t0 = time.monotonic()
            sampling = asyncio.create_task(sampler(proxy, t0, samples, stop))
            late = 0

            async def one(kind: str, n: int) -> None:
                st = stats[kind]
                started = time.monotonic()
                try:
                    async with asyncio.timeout(CALL_TIMEOUT + 5):
                        outcome = await driver.call(kind, n)
                    st.latencies.append(time.monotonic() - started)
                    st.escalated += outcome.escalated
                    st.tool_calls += outcome.tools
                except Exception as exc:  # every failure is a client error, counted and kept as an example
                    label = type(exc).__name__
                    st.errors[label] += 1
                    if len(examples) < 20:
                        examples.append(f"{kind} #{n}: {label}: {str(exc)[:300]}")
                finally:
                    st.calls += 1
                    gate.release()

            end = t0 + minutes * 60
            n = 0
            while True:  # bounded: by the clock
                due = t0 + n / rate
                if due >= end:
                    break
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                if gate.locked():
                    late += 1
                await gate.acquire()
                kind = rng.choices(kinds, weights)[0]
                task = asyncio.create_task(one(kind, n))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                n += 1
                if n % int(rate * 60) == 0:
                    errors = sum(sum(s.errors.values()) for s in stats.values())
                    rss = samples[-1]["rss_mib"] if samples else float("nan")
                    print(f"  {n / rate / 60:4.1f} min: {n} calls, {errors} errors, RSS {rss:.1f} MiB", flush=True)
            issued_wall = time.monotonic() - t0
            if tasks:
                _, stuck = await asyncio.wait(tasks, timeout=CALL_TIMEOUT + 10)
                for task in stuck:
                    task.cancel()
            stop.set()
            await sampling
            samples.append({"t": time.monotonic() - t0, "rss_mib": proxy.rss_mib(), "fds": open_fds(proxy.pid)})
            for agent in driver.ws:
                await agent.close()
            async with session.get(base + "/v1/router/stats") as r:
                router_stats = await r.json()
            async with session.get(base + "/metrics") as r:
                metrics = await r.text()
        log_text = proxy.log_path.read_text(errors="replace")
        result = {
            "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
            "minutes": minutes,
            "rate": rate,
            "concurrency": concurrency,
            "seed": seed,
            "sessions": sessions,
            "issued": n,
            "issued_wall": issued_wall,
            "late": late,
            "idle_rss_mib": idle_rss,
            "samples": samples,
            "kinds": {
                k: {
                    "calls": s.calls,
                    "errors": dict(s.errors),
                    "escalated": s.escalated,
                    "tool_calls": s.tool_calls,
                    "p50_ms": percentile(s.latencies, 50),
                    "p99_ms": percentile(s.latencies, 99),
                }
                for k, s in stats.items()
            },
            "all_latencies_p50_ms": percentile([x for s in stats.values() for x in s.latencies], 50),
            "all_latencies_p99_ms": percentile([x for s in stats.values() for x in s.latencies], 99),
            "examples": examples,
            "router_stats": router_stats,
            "refused": [line for line in metrics.splitlines() if line.startswith("router_refused_total")],
            "proxy_log_errors": [
                line for line in log_text.splitlines() if re.search(r"ERROR|Traceback|CRITICAL", line)
            ][:20],
        }
        write_report(result, out_dir)
        return result
    finally:
        cluster.stop_all()


def write_report(r: dict[str, Any], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "soak.json").write_text(json.dumps(r, indent=1, default=str) + "\n")
    kinds = r["kinds"]
    calls = sum(k["calls"] for k in kinds.values())
    errors = sum(sum(k["errors"].values()) for k in kinds.values())
    tool_calls = sum(k["tool_calls"] for k in kinds.values())
    escalated = sum(k["escalated"] for k in kinds.values())
    samples = r["samples"]
    warm = [(s["t"], s["rss_mib"]) for s in samples if s["t"] >= 60] or [(s["t"], s["rss_mib"]) for s in samples]
    growth = slope_per_minute(warm)
    fast = r["router_stats"].get("tiers", {}).get("fast", {})
    lines = [
        "# Soak: steady mixed load with broken fast answers",
        "",
        f"`python -m bench.soak --minutes {r['minutes']:g} --rate {r['rate']:g}"
        + (f" --sessions {r['sessions']}" if r.get("sessions") else "")
        + f"` — {r['when']}, {r['machine']}.",
        "",
        f"Fast tier: the fake upstream with {BAD_TOOL_RATE:.0%} of its tool calls broken (every kind it knows); full "
        "tier: a healthy fake; every call routed to fast, escalated to full on a mistake. Store: SQLite. "
        f"Open-loop arrivals at {r['rate']:g}/s, at most {r['concurrency']} in flight "
        f"({r['late']} arrivals waited for a free slot). Responses calls use `store: false`. "
        + (
            f"Calls come from {r['sessions']} agents (`x-session-id`)."
            if r.get("sessions")
            else "Every call opens a new session (a unique opening message, no `x-session-id`): the worst case "
            "for per-session state (sticky tier, the tool calls routed to it), which the store keeps in process "
            "memory, about 0.8 KB per session, in an LRU of at most 100,000 sessions for 24 h — so the RSS grows "
            "with the number of sessions until that bound; `--sessions N` sends the calls from N agents instead."
        ),
        "",
        "| | |",
        "|---|---|",
        f"| calls | {calls} (issued over {r['issued_wall'] / 60:.1f} min, {calls / r['issued_wall']:.1f}/s) |",
        f"| client errors (status, framing, lost/reordered chunks, invalid calls) | **{errors}** |",
        f"| latency p50 / p99 (all calls) | {r['all_latencies_p50_ms']:.1f} ms / {r['all_latencies_p99_ms']:.1f} ms |",
        f"| escalation rate (of tool calls; SDK streams see only escalations before the first byte) | "
        f"{escalated / tool_calls:.1%} ({escalated} of {tool_calls}) |"
        if tool_calls
        else "| escalation rate | — |",
        f"| fast tier mistakes (router stats) | {fast.get('mistakes', {})} over {fast.get('calls', 0)} answers |",
        f"| proxy RSS idle → start of load → end | {r['idle_rss_mib']:.1f} → {samples[0]['rss_mib']:.1f} → "
        f"{samples[-1]['rss_mib']:.1f} MiB |",
        f"| RSS growth after the first minute (least squares) | **{growth:+.3f} MiB/min** |",
        f"| proxy open fds first → last sample | {samples[0]['fds']:.0f} → {samples[-1]['fds']:.0f} |",
        f"| refusals (metrics) | {', '.join(r['refused']) or 'none'} |",
        f"| ERROR / Traceback lines in the proxy's log | {len(r['proxy_log_errors'])} |",
        "",
        "| call kind | calls | errors | escalated | p50 ms | p99 ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, k in kinds.items():
        errs = sum(k["errors"].values())
        lines.append(f"| {name} | {k['calls']} | {errs} | {k['escalated']} | {k['p50_ms']:.1f} | {k['p99_ms']:.1f} |")
    lines += ["", "RSS samples (every 10 s):", "", "| minute | RSS MiB | open fds |", "|---:|---:|---:|"]
    step = max(1, len(samples) // 30)
    for s in samples[::step]:
        lines.append(f"| {s['t'] / 60:.1f} | {s['rss_mib']:.1f} | {s['fds']:.0f} |")
    if r["examples"]:
        lines += ["", "First client errors:", "", *[f"- {e}" for e in r["examples"]]]
    if r["proxy_log_errors"]:
        lines += ["", "Proxy log:", "", "```", *r["proxy_log_errors"], "```"]
    (out_dir / "soak.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="length of the load (default 10)")
    parser.add_argument("--rate", type=float, default=20.0, help="calls per second (default 20)")
    parser.add_argument("--concurrency", type=int, default=64, help="calls in flight at most (default 64)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the call mix")
    parser.add_argument(
        "--sessions", type=int, default=0, help="agents (x-session-id) the calls come from; 0: a new session per call"
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="directory for soak.md and soak.json")
    args = parser.parse_args(argv)
    if not (0 < args.minutes <= 120 and 0 < args.rate <= 500 and 0 < args.concurrency <= 1024 and args.sessions >= 0):
        parser.error("bounds: 0 < minutes <= 120, 0 < rate <= 500, 0 < concurrency <= 1024, sessions >= 0")
    result = asyncio.run(soak(args.minutes, args.rate, args.concurrency, args.seed, args.out, args.sessions))
    errors = sum(sum(k["errors"].values()) for k in result["kinds"].values())
    print((args.out / "soak.md").read_text())
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The fault matrix: every way an upstream can fail, on every transport, and what the agent sees.

Each row starts two fake upstreams (``fast`` broken one way, ``full`` healthy or broken too; the
proxy does not forward client headers, so faults are FakeConfig knobs per tier) and one proxy whose
only route sends every call to ``fast`` with ``escalation: {to: full}``. The row's call then goes
through five transports at once: chat JSON, chat SSE, Responses JSON, Responses SSE and WebSocket.

    row                      fault: fast tier / full tier            JSON                  stream (SSE, WebSocket)
    -----------------------  --------------------------------------  --------------------  ---------------------------
    5xx-fast                 HTTP 500 / healthy                      escalate              escalate, invisibly
    refused-fast             nothing listening / healthy             escalate              escalate, invisibly
    reset-before-first-byte  TCP RST before any byte / healthy       escalate              escalate, invisibly
    reset-mid-stream-tool    RST halfway through a tool call /       escalate              escalate, invisibly (the
                             healthy                                                       call was held)
    reset-mid-stream-text    RST after text was sent / healthy       escalate              one valid stream: fast's
                                                                                           text, a blank line, full's
    malformed-sse-text       a garbage `data:` line (JSON: half a    escalate              one valid stream, as above
                             body) / healthy
    slow-first-token         first event after 2 s, first_token      escalate (`timeout`)  escalate (`timeout`),
                             0.3 s / healthy                                               invisibly
    slow-total               headers after 3 s / healthy;            504 `timeout` at the  504 `timeout` at the
                             deadline 0.5 s                          deadline              deadline (nothing sent)
    slow-total-streaming     text trickles for 6 s; deadline 0.6 s   —                     SSE `error` frame
                                                                                           (`timeout`) at the deadline
    both-5xx                 HTTP 500 / HTTP 500                     502                   502
    both-slow-first-token    first event after 2 s / the same        504 `timeout`         504 `timeout`
    full-resets-mid-stream   HTTP 500 / RST after text was sent      502                   SSE `error` frame
    full-malformed-sse       HTTP 500 / a garbage `data:` line       502                   SSE `error` frame
    both-5xx-short-deadline  HTTP 500 / HTTP 500; max_attempts 8,    502 or 504, by the    the same
                             deadline 0.4 s                          deadline (backoff
                                                                     stops there)

"escalate" means: status 200, ``x-router-tier: full``, ``x-router-escalated: true`` and the fault's
mistake kind (``upstream_error`` or ``timeout``) in ``x-router-mistakes``. A stream that escalated
after text was sent still has one id, one role delta, one finish_reason and ``[DONE]`` last; its
headers say ``fast`` (they left first) and its trailing ``: router {json}`` comment says ``full``.
An SSE ``error`` frame is ``data: {"error": {...}}`` in the OpenAI error shape, then the trailer,
then the stream closes (no ``[DONE]``). Every 502 and 504 is an OpenAI error body with
``x-should-retry: false`` (the router already retried and escalated). On the Responses transports
the same outcomes are an HTTP error before the stream starts, a ``response.completed`` (with
``router`` saying ``full``), or an ``error`` event with its HTTP ``status`` (WebSocket: after
``response.created``/``in_progress``).

For every row and transport: the call ends within its deadline plus a margin (each call runs under
``asyncio.timeout``). After every row: the proxy has no call in flight (``runtime.inflight == 0``),
its upstream pools hold no acquired connection, each fake's ``open_connections`` is back to the
keep-alive connections the pool holds (plus the one asking), and no task is left over — every task
created during the row has finished (the fakes' per-connection tasks are counted as connections).
"""

from __future__ import annotations

import asyncio
import socket
import textwrap
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
import pytest
import websockets
from aiohttp import web

from router.fake import FakeConfig, create_fake_app
from router.fake.state import STATE
from tests.api.helpers import ERROR_KEYS, Raw, assert_error_body, post, sse, trailer
from tests.conftest import Proxy

WEATHER_CHAT = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
WEATHER_RESP = {"type": "function", **WEATHER_CHAT["function"]}  # type: ignore[dict-item]
TERMINAL = {"response.completed", "response.incomplete", "response.failed", "error"}
TRANSPORTS = ("chat-json", "chat-sse", "resp-json", "resp-sse", "resp-ws")
MARGIN = 1.5  # seconds a call may take beyond its deadline (scheduling on a loaded 2-core machine)


# ------------------------------------------------------------------------------ outcomes


@dataclass(frozen=True)
class Escalated:
    """200 from the full tier; `after_content`: a stream that had sent fast's text first."""

    mistake: str = "upstream_error"
    after_content: bool = False


@dataclass(frozen=True)
class Error:
    """An OpenAI error before anything was sent."""

    status: int
    code: str
    alternative: tuple[int, str] | None = None  # another documented outcome (status, code)

    def allowed(self) -> set[tuple[int, str]]:
        return {(self.status, self.code), *([self.alternative] if self.alternative else [])}


@dataclass(frozen=True)
class ErrorFrame:
    """A stream that started, then an SSE `error` frame (Responses: an `error` event) and the end."""

    code: str


Outcome = Escalated | Error | ErrorFrame | None  # None: the row does not apply to that transport


@dataclass(frozen=True)
class Row:
    id: str
    fast: FakeConfig | None  # None: nothing listens on the fast tier's port
    full: FakeConfig | None
    json: Outcome
    stream: Outcome
    tools: bool = False
    escalation: str = "{to: full}"
    fast_timeouts: str = "{connect: 1, first_token: 5, total: 20}"
    full_timeouts: str = "{connect: 1, first_token: 5, total: 20}"
    limit: float = 3.0  # seconds any one call of the row may take (its deadline + MARGIN)


HEALTHY = FakeConfig(seed=2, words=8)
TEXT = 30  # words in fast's text answers: enough chunks that a cut or a garbage line comes after text
SLOW = "{connect: 1, first_token: 0.3, total: 20}"

ROWS = [
    Row("5xx-fast", FakeConfig(error_rate=1.0), HEALTHY, Escalated(), Escalated()),
    Row("refused-fast", None, HEALTHY, Escalated(), Escalated()),
    Row("reset-before-first-byte", FakeConfig(reset_before_first_byte=1.0), HEALTHY, Escalated(), Escalated()),
    Row("reset-mid-stream-tool", FakeConfig(reset_mid_stream=1.0), HEALTHY, Escalated(), Escalated(), tools=True),
    Row(
        "reset-mid-stream-text",
        FakeConfig(reset_mid_stream=1.0, words=TEXT),
        HEALTHY,
        Escalated(),
        Escalated(after_content=True),
    ),
    Row(
        "malformed-sse-text",
        FakeConfig(malformed_sse=1.0, words=TEXT),
        HEALTHY,
        Escalated(),
        Escalated(after_content=True),
    ),
    Row(
        "slow-first-token",
        FakeConfig(first_token_delay_ms=2000),
        HEALTHY,
        Escalated("timeout"),
        Escalated("timeout"),
        fast_timeouts=SLOW,
        limit=0.3 + MARGIN,
    ),
    Row(
        "slow-total",
        FakeConfig(delay_ms=3000),
        HEALTHY,
        Error(504, "timeout"),
        Error(504, "timeout"),
        escalation="{to: full, deadline: 0.5}",
        limit=0.5 + MARGIN,
    ),
    Row(
        "slow-total-streaming",
        FakeConfig(chunk_delay_ms=200, words=TEXT),
        HEALTHY,
        None,
        ErrorFrame("timeout"),
        escalation="{to: full, deadline: 0.6}",
        limit=0.6 + MARGIN,
    ),
    Row(
        "both-5xx",
        FakeConfig(error_rate=1.0),
        FakeConfig(error_rate=1.0),
        Error(502, "upstream_error"),
        Error(502, "upstream_error"),
    ),
    Row(
        "both-slow-first-token",
        FakeConfig(first_token_delay_ms=2000),
        FakeConfig(first_token_delay_ms=2000),
        Error(504, "timeout"),
        Error(504, "timeout"),
        escalation="{to: full, max_attempts: 2}",
        fast_timeouts=SLOW,
        full_timeouts=SLOW,
        limit=0.6 + MARGIN,
    ),
    Row(
        "full-resets-mid-stream",
        FakeConfig(error_rate=1.0),
        FakeConfig(reset_mid_stream=1.0, words=TEXT),
        Error(502, "upstream_error"),
        ErrorFrame("upstream_error"),
    ),
    Row(
        "full-malformed-sse",
        FakeConfig(error_rate=1.0),
        FakeConfig(malformed_sse=1.0, words=TEXT),
        Error(502, "upstream_error"),
        ErrorFrame("upstream_error"),
    ),
    Row(
        "both-5xx-short-deadline",
        FakeConfig(error_rate=1.0),
        FakeConfig(error_rate=1.0),
        Error(502, "upstream_error", (504, "timeout")),
        Error(502, "upstream_error", (504, "timeout")),
        escalation="{to: full, max_attempts: 8, deadline: 0.4}",
        limit=0.4 + 0.3,  # tighter: no slow upstream here, only backoff, which must stop at the deadline
    ),
]


# ------------------------------------------------------------------------------ servers


@dataclass
class Fake:
    url: str
    runner: web.AppRunner


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def start_fake(config: FakeConfig) -> Fake:
    """The project's fake upstream, served with handler cancellation: a request whose client (the
    proxy) went away stops at once, so its task ending proves the proxy closed that connection."""
    app = create_fake_app(config)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0, handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    app[STATE].server = runner.server
    return Fake(f"http://127.0.0.1:{runner.addresses[0][1]}/v1", runner)


@pytest.fixture
async def fakes() -> AsyncIterator[Callable[[FakeConfig], Awaitable[Fake]]]:
    started: list[Fake] = []

    async def start(config: FakeConfig) -> Fake:
        fake = await start_fake(config)
        started.append(fake)
        return fake

    yield start
    for fake in started:
        await fake.runner.cleanup()


def policy(row: Row, fast_url: str, full_url: str) -> str:
    """Breakers off: each transport's call must meet the row's fault itself, whatever the other
    four calls of the row did to the tiers before it (breakers: tests/fault/test_breaker.py)."""
    return textwrap.dedent(f"""
        version: 1
        models:
          fast:
            model: openai/fast-model
            api_base: {fast_url}
            warm_connections: 1
            timeouts: {row.fast_timeouts}
            breaker: {{failures: 0}}
          full:
            model: openai/full-model
            api_base: {full_url}
            warm_connections: 1
            timeouts: {row.full_timeouts}
            breaker: {{failures: 0}}
        aliases: {{"*": auto}}
        routes:
          - name: all
            use: fast
        escalation: {row.escalation}
        store: memory://
    """)


# ------------------------------------------------------------------------------ one call per transport


def chat_body(row: Row, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "auto", "messages": [{"role": "user", "content": "What is the weather?"}]}
    if row.tools:
        body["tools"] = [WEATHER_CHAT]
    if stream:
        body["stream"] = True
    return body


def resp_body(row: Row, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "auto", "input": "What is the weather?"}
    if row.tools:
        body["tools"] = [WEATHER_RESP]
    if stream:
        body["stream"] = True
    return body


def check_headers(raw: Raw, outcome: Escalated) -> None:
    h = raw.headers
    if outcome.after_content:  # the headers left while fast was answering
        assert h["x-router-tier"] == "fast", h
    else:
        assert (h["x-router-tier"], h["x-router-escalated"]) == ("full", "true"), h
        assert outcome.mistake in h["x-router-mistakes"].split(","), h


def check_error(raw: Raw, outcome: Error) -> None:
    err = assert_error_body(raw, raw.status)
    assert (raw.status, err["code"]) in outcome.allowed(), (raw.status, err)
    assert raw.headers["x-should-retry"] == "false"


def check_router_summary(summary: dict[str, Any], outcome: Escalated) -> None:
    assert summary["tier"] == "full" and summary["escalated"] is True, summary
    assert summary["tiers"][0] == "fast" and summary["tiers"][-1] == "full", summary
    assert outcome.mistake in summary["mistakes"], summary


def check_chat_stream(raw: Raw, outcome: Escalated | ErrorFrame, tools: bool) -> None:
    assert raw.status == 200, raw.body
    assert raw.headers["content-type"].startswith("text/event-stream")
    events, _, done = sse(raw.body)
    chunks = [e for e in events if "error" not in e]
    errors = [e for e in events if "error" in e]
    assert chunks, raw.body
    assert len({c["id"] for c in chunks}) == 1, "one stream, one id"
    roles = [c["delta"]["role"] for e in chunks for c in e["choices"] if "role" in c["delta"]]
    assert roles == ["assistant"], roles
    finishes = [c["finish_reason"] for e in chunks for c in e["choices"] if c.get("finish_reason")]
    content = "".join(c["delta"].get("content") or "" for e in chunks for c in e["choices"])
    summary = trailer(raw.body)
    if isinstance(outcome, ErrorFrame):
        assert not done and not finishes, "a failed stream has no finish and no [DONE]"
        assert content, "the stream had started"
        [err] = errors
        assert set(err) == {"error"} and set(err["error"]) == ERROR_KEYS, err
        assert err["error"]["code"] == outcome.code, err
        assert raw.body.rstrip().endswith(b"}")  # the trailer is the last thing sent
        assert events[-1] is err
        return
    assert not errors and done and raw.body.endswith(b"data: [DONE]\n\n")
    assert len(finishes) == 1, finishes
    check_router_summary(summary, outcome)
    if outcome.after_content:
        first, _, rest = content.partition("\n\n")
        assert first and rest, f"the full tier's text follows fast's after a blank line: {content!r}"
    else:
        check_headers(raw, outcome)
        assert "\n\n" not in content, "nothing of the fast attempt reached the client"
    calls: dict[int, dict[str, str]] = {}
    for tc in (tc for e in chunks for c in e["choices"] for tc in c["delta"].get("tool_calls") or []):
        call = calls.setdefault(tc["index"], {"id": "", "name": "", "arguments": ""})
        assert not (tc.get("id") and call["id"]), "a call's id is sent once"
        call["id"] += tc.get("id") or ""
        call["name"] += (tc.get("function") or {}).get("name") or ""
        call["arguments"] += (tc.get("function") or {}).get("arguments") or ""
    if tools:  # one whole, valid call: only the full tier's
        [call] = calls.values()
        assert call["name"] == "get_weather" and call["id"], call
        assert isinstance(orjson.loads(call["arguments"])["city"], str), call
        assert finishes == ["tool_calls"]
    else:
        assert not calls and finishes == ["stop"]


def check_resp_events(events: list[dict[str, Any]], outcome: Escalated | Error | ErrorFrame, ws: bool) -> None:
    """The events of one streamed response (Responses SSE, or a WebSocket turn)."""
    assert events, "no events"
    types = [e["type"] for e in events]
    assert types[-1] in TERMINAL and all(t not in TERMINAL for t in types[:-1]), types
    assert [e["sequence_number"] for e in events] == list(range(len(events))), types
    last = events[-1]
    if isinstance(outcome, Escalated):
        assert last["type"] == "response.completed", last
        check_router_summary(last["router"], outcome)
        assert len({e["response"]["id"] for e in events if "response" in e}) == 1
        text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
        assert ("\n\n" in text) == outcome.after_content, text
        return
    assert last["type"] == "error", last
    assert set(last["error"]) == ERROR_KEYS, last
    if isinstance(outcome, Error):
        assert ws, "an HTTP stream fails before it starts with a plain HTTP error"
        assert types == ["error"], types  # before the first chunk: no response was begun
        assert (last["status"], last["code"]) in outcome.allowed(), last
    else:
        assert "response.output_text.delta" in types, types
        assert last["code"] == outcome.code, last


def sse_events(body: bytes) -> list[dict[str, Any]]:
    data, _, _ = sse(body)
    return data


async def call_ws(proxy: Proxy, body: dict[str, Any]) -> list[dict[str, Any]]:
    url = proxy.url.replace("http://", "ws://") + "/responses"
    events: list[dict[str, Any]] = []
    async with websockets.connect(url, open_timeout=5, close_timeout=2) as ws:
        await ws.send(orjson.dumps({"type": "response.create", **body}).decode())
        for _ in range(2000):
            event = orjson.loads(await ws.recv())
            events.append(event)
            if event["type"] in TERMINAL:
                return events
    raise AssertionError("no terminal event")


async def run_transport(proxy: Proxy, row: Row, transport: str) -> None:
    outcome = row.json if transport.endswith("json") else row.stream
    if outcome is None:
        return
    stream = transport != "chat-json" and transport != "resp-json"
    if transport.startswith("chat"):
        raw = await post(proxy.url + "/chat/completions", chat_body(row, stream))
        if isinstance(outcome, Error):
            check_error(raw, outcome)
        elif stream:
            check_chat_stream(raw, outcome, row.tools)
        else:
            assert isinstance(outcome, Escalated)
            assert raw.status == 200, raw.body
            check_headers(raw, outcome)
            assert raw.json()["choices"][0]["message"]
        return
    if transport == "resp-ws":
        check_resp_events(await call_ws(proxy, resp_body(row, False)), outcome, ws=True)
        return
    raw = await post(proxy.url + "/responses", resp_body(row, stream))
    if isinstance(outcome, Error):
        check_error(raw, outcome)
    elif stream:
        assert raw.status == 200, raw.body
        if isinstance(outcome, Escalated) and not outcome.after_content:
            check_headers(raw, outcome)
        check_resp_events(sse_events(raw.body), outcome, ws=False)
        assert trailer(raw.body)["tiers"][0] == "fast"
    else:
        assert isinstance(outcome, Escalated)
        assert raw.status == 200, raw.body
        check_headers(raw, outcome)
        assert raw.json()["status"] == "completed"


# ------------------------------------------------------------------------------ leak accounting


def _name(task: asyncio.Task[Any]) -> str:
    coro = task.get_coro()
    return getattr(coro, "__qualname__", repr(coro))


async def fake_connections(url: str) -> int:
    timeout = aiohttp.ClientTimeout(total=5)
    async with aiohttp.ClientSession(timeout=timeout) as s, s.get(url.removesuffix("/v1") + "/_fake/stats") as r:
        return int((await r.json())["open_connections"]) - 1  # not counting this request's own


def pool(proxy: Proxy, tier: str) -> tuple[int, int]:
    """(idle keep-alive connections, acquired connections) of the proxy's pool for `tier`."""
    session = proxy.runtime.upstreams[tier]._session  # type: ignore[attr-defined]
    connector = session.connector
    idle = sum(len(conns) for conns in connector._conns.values())
    return idle, len(connector._acquired)


async def assert_no_leaks(proxy: Proxy, tiers: dict[str, Fake | None], before: set[asyncio.Task[Any]]) -> None:
    deadline = time.monotonic() + 5.0
    while True:  # bounded: 5 s for sockets to close and tasks to finish
        leftover = [
            t
            for t in asyncio.all_tasks()
            if t not in before and not t.done() and _name(t) != "RequestHandler.start"  # fakes' connections
        ]
        leftover = [t for t in leftover if t is not asyncio.current_task()]
        pools = {tier: pool(proxy, tier) for tier in tiers}
        opened = {tier: await fake_connections(f.url) for tier, f in tiers.items() if f is not None}
        balanced = all(opened[t] == pools[t][0] and pools[t][1] == 0 for t in opened)
        if proxy.runtime.inflight == 0 and not leftover and balanced:
            break
        if time.monotonic() > deadline:
            raise AssertionError(
                f"leak: inflight={proxy.runtime.inflight} tasks={[_name(t) for t in leftover]} "
                f"fake connections={opened} pools (idle, acquired)={pools}"
            )
        await asyncio.sleep(0.05)
    for tier, (idle, acquired) in pools.items():
        assert acquired == 0 and idle <= proxy.runtime.policy.current.models[tier].max_connections, (tier, idle)


# ------------------------------------------------------------------------------ the matrix


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
async def test_fault_matrix(row: Row, fakes, proxy_) -> None:
    fast = await fakes(row.fast) if row.fast is not None else None
    full = await fakes(row.full) if row.full is not None else None
    fast_url = fast.url if fast else f"http://127.0.0.1:{closed_port()}/v1"
    full_url = full.url if full else f"http://127.0.0.1:{closed_port()}/v1"
    proxy = await proxy_(policy(row, fast_url, full_url))
    before = asyncio.all_tasks()
    loop = asyncio.get_running_loop()

    async def bounded(transport: str) -> None:
        started = loop.time()
        try:
            async with asyncio.timeout(row.limit):
                await run_transport(proxy, row, transport)
        except TimeoutError:
            pytest.fail(f"{row.id} / {transport}: no answer within {row.limit} s (the call hung past its deadline)")
        elapsed = loop.time() - started
        assert elapsed <= row.limit, (transport, elapsed)

    # the five transports at once: the pools see concurrent calls, and a row costs one deadline
    await asyncio.gather(*(bounded(t) for t in TRANSPORTS))
    await assert_no_leaks(proxy, {"fast": fast, "full": full}, before)

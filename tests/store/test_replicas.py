"""Two real `agent-router serve` processes sharing one Redis behave as one router.

Both replicas sit in front of one fake upstream. Counters written by either replica are read by
both (`/v1/router/stats` agree and add up to the calls sent), and session state is shared: a tool
call routed by replica A, reported failed to replica B, is counted against A's tier and tool, and
makes the session sticky on A too.

`serve` takes the store URL only (the Redis key prefix is the default `agent-router:`), so the
replicas use a database of their own, flushed before and after.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import aiohttp
import openai
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

from router.fake import FakeServer
from router.store import open_store
from tests.conftest import policy_text
from tests.store.conftest import free_port

pytestmark = pytest.mark.redis

REPLICA_DB = 14  # `serve --store` cannot set a key prefix: a whole database, flushed around the test
PREFIX = "agent-router:"  # RedisStore's default
ROOT = Path(__file__).resolve().parents[2]
WEATHER = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
OPENING: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a weather agent."},
    {"role": "user", "content": "What is the weather in Paris?"},
]


def _log(path: Path) -> IO[bytes]:
    return path.open("wb")


@dataclass
class Replica:
    name: str
    port: int
    proc: asyncio.subprocess.Process
    log_path: Path
    log: IO[bytes]

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return self.base + "/v1"

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]

    async def wait_ready(self, seconds: float = 20.0) -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1)) as s:
            for _ in range(int(seconds / 0.05)):
                if self.proc.returncode is not None:
                    break
                try:
                    async with s.get(self.base + "/healthz") as r:
                        if r.status == 200 and (await r.json())["status"] == "ok":
                            return
                except (aiohttp.ClientError, TimeoutError):
                    pass
                await asyncio.sleep(0.05)
        raise AssertionError(f"replica {self.name} not ready (exit {self.proc.returncode}):\n{self.output()}")

    async def stop(self, seconds: float = 10.0) -> int:
        """SIGTERM, wait; SIGKILL if it does not exit in time. Returns the exit code."""
        if self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), seconds)
            except TimeoutError:
                self.proc.kill()
                await asyncio.wait_for(self.proc.wait(), seconds)
        self.log.close()
        assert self.proc.returncode is not None
        return self.proc.returncode


@pytest.fixture
async def replica_store_url(redis_base_url: str) -> AsyncIterator[str]:
    url = redis_base_url.rsplit("/", 1)[0] + f"/{REPLICA_DB}"
    client = Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    try:
        await client.flushdb()
        yield url
    finally:
        await client.flushdb()
        await client.aclose()


@pytest.fixture
async def replicas(fake: FakeServer, replica_store_url: str, tmp_path: Path) -> AsyncIterator[list[Replica]]:
    """Replicas A and B: `python -m router serve` on free ports, one policy, one Redis database."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(policy_text(fake.url, extra="escalation: {to: full, after_agent_error: {sticky_calls: 3}}\n"))
    started: list[Replica] = []
    try:
        for name in ("A", "B"):
            port = free_port()
            log_path = tmp_path / f"replica-{name}.log"
            log = _log(log_path)
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "router",
                "serve",
                "--policy",
                str(policy),
                "--port",
                str(port),
                "--store",
                replica_store_url,
                "--log-level",
                "info",
                cwd=ROOT,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
            started.append(Replica(name, port, proc, log_path, log))
        for r in started:
            await r.wait_ready()
        yield started
    finally:
        for r in started:
            await r.stop()


async def _stats(replica: Replica) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as s,
        s.get(replica.url + "/router/stats") as r,
    ):
        assert r.status == 200
        data: dict[str, Any] = await r.json()
        return data


async def _agreed_stats(replicas: list[Replica], done: Any, seconds: float = 10.0) -> dict[str, Any]:
    """Poll every replica's stats until `done(stats)` holds for all and they agree (store info aside)."""
    seen: list[dict[str, Any]] = []
    for _ in range(int(seconds / 0.1)):
        seen = [await _stats(r) for r in replicas]
        for s in seen:
            assert s["store"]["backend"] == "redis" and s["store"]["healthy"] is True
        counters = [{k: v for k, v in s.items() if k != "store"} for s in seen]
        if all(done(c) for c in counters) and all(c == counters[0] for c in counters):
            return counters[0]
        await asyncio.sleep(0.1)
    raise AssertionError(f"replicas did not agree in {seconds} s: {seen}")


def _metric(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return float(s.value)
    return 0.0


async def _metrics(replica: Replica) -> str:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as s,
        s.get(replica.base + "/metrics") as r,
    ):
        return await r.text()


async def _routed_in_redis(store_url: str, session: str, call_id: str, seconds: float = 5.0) -> None:
    """Wait until the routed call is in Redis (written off the request path by the replica)."""
    client = Redis.from_url(store_url, socket_timeout=2, socket_connect_timeout=2)
    try:
        for _ in range(int(seconds / 0.02)):
            if await client.hexists(f"{PREFIX}r:{session}", call_id):
                return
            await asyncio.sleep(0.02)
    finally:
        await client.aclose()
    raise AssertionError(f"routed call {call_id} of session {session} never reached Redis")


async def _ask(client: openai.AsyncOpenAI, messages: list[dict[str, Any]], session: str, tools: bool = True) -> Any:
    headers = {"x-session-id": session}
    kwargs: dict[str, Any] = {"tools": WEATHER} if tools else {}
    return await client.chat.completions.with_raw_response.create(
        model="auto", messages=messages, extra_headers=headers, **kwargs
    )


async def test_replicas_share_counters_and_sessions(replicas: list[Replica], replica_store_url: str) -> None:
    a, b = replicas
    async with (
        openai.AsyncOpenAI(base_url=a.url, api_key="x", max_retries=0) as ca,
        openai.AsyncOpenAI(base_url=b.url, api_key="x", max_retries=0) as cb,
    ):
        # -- counters: calls to either replica add up in both replicas' stats ------------------
        sent = {"fast": 0, "full": 0}
        for client, tool_calls, text_calls in ((ca, 5, 2), (cb, 3, 1)):
            for i in range(tool_calls):
                raw = await _ask(client, OPENING, f"tool-{id(client)}-{i}")
                assert (raw.headers["x-router-tier"], raw.headers["x-router-route"]) == ("fast", "simple-tool-call")
                assert raw.parse().choices[0].message.tool_calls
                sent["fast"] += 1
            for i in range(text_calls):  # no tools: the default route, full tier
                raw = await _ask(client, OPENING, f"text-{id(client)}-{i}", tools=False)
                assert (raw.headers["x-router-tier"], raw.headers["x-router-route"]) == ("full", "default")
                sent["full"] += 1
        assert sent == {"fast": 8, "full": 3}

        stats = await _agreed_stats(
            replicas, lambda s: sum(t["calls"] for t in s["tiers"].values()) >= sum(sent.values())
        )
        assert {t: c["calls"] for t, c in stats["tiers"].items()} == sent
        assert sum(c["calls"] for c in stats["tiers"].values()) == 11
        assert stats["routes"]["simple-tool-call"]["calls"] == 8
        assert stats["routes"]["default"]["calls"] == 3
        assert stats["tools"]["fast"]["get_weather"]["calls"] == 8
        assert all(c["mistakes"] == {} for c in stats["tiers"].values())

        # -- sessions: A routes a tool call, the agent reports its failure to B ---------------
        session = "replica-session-S"
        raw = await _ask(ca, OPENING, session)
        assert (raw.headers["x-router-tier"], raw.headers["x-router-route"]) == ("fast", "simple-tool-call")
        call = raw.parse().choices[0].message.tool_calls[0]
        await _routed_in_redis(replica_store_url, session, call.id)
        history = [
            *OPENING,
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": "Error: the weather service is down"},
        ]
        raw = await _ask(cb, history, session)  # B attributes the failure to A's call; sticky 1 of 3
        assert (raw.headers["x-router-tier"], raw.headers["x-router-route"]) == ("full", "sticky")
        retry = raw.parse().choices[0].message.tool_calls[0].model_dump()
        retry["function"]["arguments"] = '{"city": "Paris, FR"}'  # not a verbatim repeat of A's call
        history += [
            {"role": "assistant", "content": None, "tool_calls": [retry]},
            {"role": "tool", "tool_call_id": retry["id"], "content": "Sunny, 21 C"},
        ]
        raw = await _ask(ca, history, session)  # sticky 2 of 3, read from Redis by A
        assert (raw.headers["x-router-tier"], raw.headers["x-router-route"]) == ("full", "sticky")
        assert raw.headers["x-router-escalated"] == "false"

        def settled(s: dict[str, Any]) -> bool:  # B's report and both replicas' answers are written
            reported = s["tiers"]["fast"]["mistakes"].get("agent_reported_error", 0)
            return reported >= 1 and sum(t["calls"] for t in s["tiers"].values()) >= 14

        stats = await _agreed_stats(replicas, settled)
        # attributed to the tier, route and tool of A's call — once, although B and A both saw it
        assert stats["tiers"]["fast"]["mistakes"] == {"agent_reported_error": 1}
        assert stats["routes"]["simple-tool-call"]["mistakes"] == {"agent_reported_error": 1}
        assert stats["tools"]["fast"]["get_weather"]["mistakes"] == {"agent_reported_error": 1}
        assert stats["tiers"]["full"]["mistakes"] == {}
        assert stats["routes"]["sticky"]["calls"] == 2
        assert {t: c["calls"] for t, c in stats["tiers"].items()} == {"fast": 9, "full": 5}

        # metrics are per process: only B observed the report
        kind = {"tier": "fast", "route": "simple-tool-call", "kind": "agent_reported_error"}
        assert _metric(await _metrics(b), "router_mistakes_total", **kind) == 1.0
        assert _metric(await _metrics(a), "router_mistakes_total", **kind) == 0.0
        assert _metric(await _metrics(a), "router_calls_total", tier="full", route="sticky", escalated="false") == 1.0

    # -- shutdown: both exit cleanly, and what they wrote stays in Redis -----------------------
    codes = [await r.stop() for r in replicas]
    # uvicorn shuts down gracefully on SIGTERM, then re-raises it: -SIGTERM, never a SIGKILL
    assert codes == [-signal.SIGTERM, -signal.SIGTERM], [r.output() for r in replicas]
    for r in replicas:
        out = r.output()
        assert "Application shutdown complete" in out, out
        assert "Traceback" not in out and "not written" not in out, out
    reader = open_store(replica_store_url)
    await reader.start()
    try:
        after = await reader.stats()
    finally:
        await reader.close()
    assert {t: c["calls"] for t, c in after["tiers"].items()} == {"fast": 9, "full": 5}
    assert after["tiers"]["fast"]["mistakes"] == {"agent_reported_error": 1}
    assert orjson.dumps(after["tools"]) == orjson.dumps(stats["tools"])


async def test_a_console_on_either_replica_shows_every_replicas_calls(replicas: list[Replica]) -> None:
    """A call served by replica A is pushed to replica B's console (the store's live channel) within
    2 s, and both replicas list its session from the shared call log."""
    a, b = replicas
    async with aiohttp.ClientSession() as http, http.get(b.base + "/console/api/calls/live") as live:
        assert live.status == 200 and await live.content.readline() == b": watching\n"
        await live.content.readline()
        body = {"model": "auto", "messages": [{"role": "user", "content": "hi from A"}]}
        async with http.post(a.url + "/chat/completions", json=body, headers={"x-session-id": "across"}) as r:
            assert r.status == 200
            tier = r.headers["x-router-tier"]
        line = await asyncio.wait_for(live.content.readline(), 2)
        call = orjson.loads(line.removeprefix(b"data: "))
        assert call["session"] == "across" and call["tier"] == tier
    for replica in (a, b):
        async with aiohttp.ClientSession() as http, http.get(replica.base + "/v1/router/sessions") as r:
            assert "across" in [s["id"] for s in (await r.json())["sessions"]]

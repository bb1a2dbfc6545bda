"""Failures an agent can live with: real Claude Code and Codex sessions while every tier breaks 30% of
its tool calls, greedily.

20 `claude -p` and 20 `codex exec` sessions (10 over HTTP + SSE, 10 over WebSocket), a few at a time,
each in its own HOME and working directory, against the router (fast → full, three attempts) in front
of a fake whose answers with a tool call are broken three times in ten (every kind the fake knows)
and greedy: the same request gets the same answer, so an agent's retry of a request whose every
attempt failed would fail the same way if it were run the same way. Each session makes three tool
calls before its final text. What must hold:

- every session ends on its own, within its bound (`BOUND`: one that does not is killed, and fails
  the test);
- the retries the agents make are not futile: every retry of a request the router answered with
  `checks_failed` (its every attempt failed the checks) is run differently — resampled — or refused
  at once (router/core/live/repeats.py). Retries are found here from the requests as they came, not from
  the router's own memory: a later request asking the same question — its JSON, but for fields that
  do not change what a greedy model answers (`SAME_QUESTION`: Claude Code retries a failed stream
  unstreamed with a smaller `max_tokens`; Codex's metadata changes order and carries a timestamp) —
  or, over WebSocket, the next request of the same Codex session (on a new socket Codex sends the
  whole conversation again instead of continuing the chain of `previous_response_id`);
- the sessions get their work done (exit 0, a final text), and Codex over WebSocket never falls back
  to HTTP.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
from collections import Counter
from collections.abc import AsyncIterator, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from router.app import create_app
from router.fake import FakeConfig, FakeServer
from router.settings import Settings
from tests.agents.conftest import (
    PREFERRED,
    ASGIApp,
    clean_env,
    cli,
    run_cli,
    workdir,
)
from tests.agents.test_cli import TASK, codex_home
from tests.conftest import policy_text, start_uvicorn, stop_uvicorn

SESSIONS = 20  # of each CLI
AT_ONCE = 4  # sessions running together (the CI machine has 2 cores)
BOUND = 60.0  # s, per session (they take 2-7 s; before repeats were resampled, some never ended)

# every session killed at its bound, a few at a time, is the longest this can take
pytestmark = [pytest.mark.agents, pytest.mark.timeout(math.ceil(2 * SESSIONS / AT_ONCE) * BOUND + 60)]

RATE = 0.3
TOOL_CALLS = 3  # per session, before the fake answers the final text
CHECKS_FAILED = b"failed the router's checks"  # in every API's error (a 502 body, a stream's error event)
# what a request may change and still ask the same question
SAME_QUESTION = frozenset({"type", "stream", "stream_options", "max_tokens", "max_output_tokens", "client_metadata"})
MAX_BODY = 8 * 1024 * 1024  # the router's own limit: a request body kept here is never bigger


def question(payload: bytes) -> tuple[bytes, str | None]:
    """A digest of what a request asks (its JSON, keys sorted, without the `SAME_QUESTION` fields), and
    its Codex session (`client_metadata.session_id`), if any."""
    try:
        body = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return hashlib.blake2b(payload, digest_size=16).digest(), None
    session = None
    if isinstance(body, dict):
        metadata = body.get("client_metadata")
        session = metadata.get("session_id") if isinstance(metadata, dict) else None
        body = {k: v for k, v in body.items() if k not in SAME_QUESTION}
    return hashlib.blake2b(orjson.dumps(body, option=orjson.OPT_SORT_KEYS), digest_size=16).digest(), session


@dataclass
class Answer:
    """One request the router answered: a digest of what the client sent, and what it got."""

    transport: str  # "http" or "websocket"
    path: str
    key: bytes = b""
    session: str | None = None
    status: int = 0
    repeat: str | None = None  # x-router-repeat, or `repeat` of the WebSocket turn's routing
    checks_failed: bool = False


@dataclass
class Answers:
    """Every request in the order it came, as the router answered it (nothing changed on the way)."""

    all: list[Answer] = field(default_factory=list)

    def recording(self, app: ASGIApp) -> ASGIApp:
        async def wrapped(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                return await self._http(app, scope, receive, send)
            if scope["type"] == "websocket":
                return await self._websocket(app, scope, receive, send)
            return await app(scope, receive, send)

        return wrapped

    async def _http(self, app: ASGIApp, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        body = bytearray()
        answer = Answer("http", scope["path"])
        self.all.append(answer)

        async def reading() -> Any:
            message = await receive()
            if message["type"] == "http.request" and len(body) <= MAX_BODY:
                body.extend(message.get("body", b""))
                if not message.get("more_body"):
                    answer.key, answer.session = question(bytes(body))
            return message

        async def sending(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                answer.status = message["status"]
                headers = dict(message.get("headers") or ())
                answer.repeat = headers[b"x-router-repeat"].decode() if b"x-router-repeat" in headers else None
            elif message["type"] == "http.response.body" and CHECKS_FAILED in message.get("body", b""):
                answer.checks_failed = True
            await send(message)

        await app(scope, reading, sending)

    async def _websocket(self, app: ASGIApp, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        turns: list[Answer] = []  # a connection's turns run one at a time, in the order they came

        async def reading() -> Any:
            message = await receive()
            if message["type"] == "websocket.receive" and (text := message.get("text")) is not None:
                turn = Answer("websocket", scope["path"], *question(text.encode()))
                turns.append(turn)
                self.all.append(turn)
            return message

        async def sending(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "websocket.send" and isinstance(text := message.get("text"), str):
                event = orjson.loads(text)
                if event.get("type") in ("response.completed", "response.incomplete", "error"):
                    turn = next(t for t in turns if not t.status)
                    turn.status = int(event.get("status") or 200)
                    turn.repeat = (event.get("router") or {}).get("repeat")
                    turn.checks_failed = CHECKS_FAILED.decode() in str(event.get("message"))
            await send(message)

        await app(scope, reading, sending)

    def retries(self) -> list[tuple[Answer, Answer]]:
        """(an answer that failed the checks, a request that retried it): each later request asking the
        same question, and over WebSocket the next request of the same Codex session."""
        out = []
        for i, failed in enumerate(self.all):
            if not failed.checks_failed:
                continue
            later = self.all[i + 1 :]
            retried = [r for r in later if r.key == failed.key]
            if failed.transport == "websocket" and failed.session is not None:
                retried += [r for r in later if r.session == failed.session][:1]
            out += [(failed, r) for r in {id(r): r for r in retried}.values()]
        return out


@dataclass
class Router:
    base: str
    answers: Answers


@pytest.fixture
async def broken_fake(start_fake_: Any) -> FakeServer:
    config = FakeConfig(seed=24, bad_tool_rate=RATE, greedy=True, finish_after=TOOL_CALLS, prefer_tools=PREFERRED)
    return await start_fake_(config)  # type: ignore[no-any-return]


@pytest.fixture
async def routers(broken_fake: FakeServer, tmp_path: Path) -> AsyncIterator[dict[str, Router]]:
    """Two routers in front of the fake (both tiers on it, escalating fast → full): one for the HTTP
    sessions, one for Codex over WebSocket, whose every HTTP call would be a fallback."""
    path = tmp_path / "policy.yaml"
    path.write_text(policy_text(broken_fake.url, extra='aliases: {"*": auto}\nescalation: {to: full}\n'))
    made: dict[str, Router] = {}
    servers = []
    try:
        for name in ("http", "websocket"):
            answers = Answers()
            app = answers.recording(create_app(Settings(policy=path, reload_policy=False)))
            server, task, base = await start_uvicorn(app)
            servers.append((server, task))
            made[name] = Router(base, answers)
        yield made
    finally:
        for server, task in servers:
            await stop_uvicorn(server, task)


@dataclass
class Session:
    agent: str  # claude, codex-http, codex-websocket
    code: int  # KILLED: it did not end within its bound
    seconds: float
    final: str  # its final text answer
    stderr: str = ""  # the end of it, to show a failed session


KILLED = -9


async def claude_session(router: Router, tmp_path: Path) -> Session:
    home, work = workdir(tmp_path)
    env = clean_env(home, ANTHROPIC_BASE_URL=router.base, ANTHROPIC_API_KEY="sk-ant-dummy")
    started = time.monotonic()
    code, out, err = await run_cli([str(cli("claude")), "-p", TASK, "--output-format", "json"], work, env, BOUND)
    final = str(orjson.loads(out).get("result") or "") if code == 0 else ""
    return Session("claude", code, time.monotonic() - started, final, err[-500:])


async def codex_session(router: Router, tmp_path: Path, transport: str) -> Session:
    home, work = workdir(tmp_path)
    config = codex_home(tmp_path, router.base, websockets=transport == "websocket")
    last = tmp_path / "last-message.txt"
    env = clean_env(home, CODEX_HOME=str(config), ROUTER_API_KEY="dummy")
    argv = [str(cli("codex")), "exec", "--skip-git-repo-check", "--output-last-message", str(last), TASK]
    started = time.monotonic()
    code, _, err = await run_cli(argv, work, env, BOUND)
    final = last.read_text().strip() if last.exists() else ""
    return Session(f"codex-{transport}", code, time.monotonic() - started, final, err[-500:])


async def test_agents_live_with_tiers_that_break_three_calls_in_ten(routers: dict[str, Router], tmp_path: Path) -> None:
    for name in ("claude", "codex"):
        cli(name)  # skip, not fail, without them
    gate = asyncio.Semaphore(AT_ONCE)

    async def one(n: int, agent: str) -> Session:
        async with gate:
            where = tmp_path / f"{agent}-{n}"
            where.mkdir()
            started = time.monotonic()
            try:
                if agent == "claude":
                    return await claude_session(routers["http"], where)
                transport = agent.removeprefix("codex-")
                router = routers["websocket" if transport == "websocket" else "http"]
                return await codex_session(router, where, transport)
            except pytest.fail.Exception as killed:  # run_cli's: the bound passed, the session was killed
                return Session(agent, KILLED, time.monotonic() - started, "", str(killed)[-500:])

    agents = ["claude"] * SESSIONS + ["codex-http"] * (SESSIONS // 2) + ["codex-websocket"] * (SESSIONS // 2)
    started = time.monotonic()
    sessions = await asyncio.gather(*(one(n, agent) for n, agent in enumerate(agents)))
    wall = time.monotonic() - started
    answers = [a for r in routers.values() for a in r.answers.all]
    retries = [pair for r in routers.values() for pair in r.answers.retries()]
    how = Counter(f"{later.repeat or 'as it came'}: {'failed' if later.checks_failed else 'answered'}"
                  for later in {id(later): later for _, later in retries}.values())  # fmt: skip
    print(
        f"\n{len(sessions)} sessions in {wall:.0f} s (longest {max(s.seconds for s in sessions):.0f} s, "
        f"exit codes {sorted({s.code for s in sessions})}); {len(answers)} requests, "
        f"{sum(a.checks_failed for a in answers)} failed the checks; their retries: {dict(how)}"
    )  # shown with -s
    # every session ended on its own and got its work done
    assert [s for s in sessions if s.code != 0 or not s.final] == []
    # the run did what it tests: requests failed every attempt, and the agents retried each of them
    failures = [a for a in answers if a.checks_failed]
    assert failures and retries
    assert [f for f in failures if all(failed is not f for failed, _ in retries)] == []
    # not one retry of a request that failed the checks was run the same way
    assert [later for _, later in retries if later.repeat not in ("resampled", "refused")] == []
    # Codex kept to its WebSocket: not one of its calls fell back to HTTP
    websocket = routers["websocket"].answers.all
    assert any(a.transport == "websocket" for a in websocket)
    assert [a for a in websocket if a.transport == "http" and a.path == "/v1/responses"] == []

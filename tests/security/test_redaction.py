"""Upstream keys and key-bearing URLs never reach a client, a dashboard or a log line.

Canary secrets are put in the policy (a tier's `api_key`, the password of a tier's `api_base`), then
every output of the proxy is searched for them: response bodies and headers (JSON and SSE), the
admin endpoints (`/metrics`, `/v1/router/stats`, `/v1/models`, `/healthz`), and every log record of
every logger at DEBUG — on the happy path and on the error paths (upstream 401, unreachable
upstream, malformed upstream JSON, and an upstream that echoes the key back in its error messages).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import orjson
import pytest
from aiohttp import web

from router.fake import FakeConfig
from router.policy.loader import PolicyError, parse_policy
from tests.api.helpers import TOOLS, Raw, get, post, with_key
from tests.conftest import Proxy, policy_text, serve_app, upstream_app

FAST_KEY = "sk-canary-FASTKEY-5d41402abc4b2a76b9719d911017c592"
ECHO_KEY = "canaryKEY-no-known-shape-7f3e9c1d2b"  # only the policy's own secrets list can catch this one
URL_PASS = "urlcanary-PASS-3141592653"
CANARIES = (FAST_KEY, ECHO_KEY, URL_PASS)


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every record of every logger, at DEBUG (uvicorn's loggers do not propagate: attach to them)."""
    caplog.set_level(logging.DEBUG)
    yield caplog


def attach(caplog: pytest.LogCaptureFixture) -> None:
    # uvicorn's dictConfig (run when a proxy starts) replaces these loggers' handlers: attach afterwards
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi"):
        lg = logging.getLogger(name)
        lg.setLevel(logging.DEBUG)
        if caplog.handler not in lg.handlers:
            lg.addHandler(caplog.handler)


@pytest.fixture(autouse=True)
def _detach(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    yield
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi"):
        logging.getLogger(name).removeHandler(caplog.handler)


class Seen:
    """Everything the outside world got from the proxy."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, what: str, raw: Raw) -> Raw:
        self.items.append((f"{what} body", raw.body.decode("utf-8", "replace")))
        self.items.append((f"{what} headers", orjson.dumps(raw.headers).decode()))
        return raw

    async def admin(self, proxy: Proxy) -> None:
        for path in ("/metrics", "/v1/router/stats", "/v1/models", "/healthz"):
            raw = await get(proxy.base + path)
            assert raw.status == 200, path
            self.add(path, raw)

    def assert_clean(self, caplog: pytest.LogCaptureFixture) -> None:
        texts = [*self.items, ("logs", caplog.text)]
        texts += [(f"log {r.name}", f"{r.getMessage()} {r.exc_text or ''} {r.args!r}") for r in caplog.records]
        for where, text in texts:
            for canary in CANARIES:
                assert canary not in text, f"{canary!r} leaked in {where}: {text[:500]}"
                assert canary[-12:] not in text, f"part of {canary!r} leaked in {where}: {text[:500]}"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def keyed_url(url: str) -> str:
    return url.replace("http://", f"http://agent:{URL_PASS}@", 1)


def test_key_bearing_api_base_is_refused_without_echoing_it() -> None:
    """Credentials belong in api_key: a policy with a password in api_base does not load, and its
    error names the problem without showing the password."""
    with pytest.raises(PolicyError) as err:
        parse_policy(policy_text(keyed_url("http://127.0.0.1:9/v1")), "p.yaml")
    assert "must not carry credentials" in str(err.value)
    assert URL_PASS not in str(err.value)


async def calls(seen: Seen, proxy: Proxy, model: str = "auto", content: str = "hi") -> list[int]:
    statuses = []
    for tools in (None, TOOLS):
        for stream in (False, True):
            body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": content}]}
            if tools:
                body["tools"] = tools
            if stream:
                body["stream"] = True
            raw = seen.add(
                f"{model} {content} tools={bool(tools)} stream={stream}",
                await post(proxy.url + "/chat/completions", body),
            )
            statuses.append(raw.status)
    return statuses


ESCALATE = "escalation: {to: full, max_attempts: 2}\n"  # fast, then full: no same-tier retries with backoff


async def test_happy_path_keeps_keys_private(start_fake_, proxy_, logs) -> None:
    fast = await start_fake_(FakeConfig(seed=1, api_key=FAST_KEY))
    full = await start_fake_(FakeConfig(seed=2))
    policy = with_key(policy_text(fast.url, full.url, extra=ESCALATE), "fast", FAST_KEY)
    proxy = await proxy_(policy)
    attach(logs)
    seen = Seen()
    assert await calls(seen, proxy) == [200, 200, 200, 200]
    await seen.admin(proxy)
    seen.assert_clean(logs)


async def test_upstream_401_keeps_keys_private(start_fake_, proxy_, logs) -> None:
    fast = await start_fake_(FakeConfig(seed=1, api_key="sk-the-key-the-server-expects-000"))
    full = await start_fake_(FakeConfig(seed=2, api_key="sk-the-key-the-server-expects-000"))
    policy = with_key(policy_text(fast.url, full.url, extra=ESCALATE), "fast", FAST_KEY)
    proxy = await proxy_(policy)
    attach(logs)
    seen = Seen()
    statuses = await calls(seen, proxy)
    assert all(s >= 400 for s in statuses), statuses
    await seen.admin(proxy)
    seen.assert_clean(logs)


async def test_unreachable_upstream_keeps_key_bearing_url_private(start_fake_, proxy_, logs) -> None:
    dead = f"http://127.0.0.1:{closed_port()}/v1"
    policy = with_key(policy_text(dead, dead, extra=ESCALATE, breakers=False), "fast", FAST_KEY)
    proxy = await proxy_(policy)
    attach(logs)
    seen = Seen()
    assert await calls(seen, proxy) == [502, 502, 502, 502]
    await seen.admin(proxy)
    seen.assert_clean(logs)


async def test_malformed_upstream_answers_keep_keys_private(start_fake_, proxy_, logs) -> None:
    fast = await start_fake_(FakeConfig(seed=1, api_key=FAST_KEY, malformed_sse=1.0))
    full = await start_fake_(FakeConfig(seed=2, malformed_sse=1.0))
    policy = with_key(policy_text(fast.url, full.url, extra=ESCALATE), "fast", FAST_KEY)
    proxy = await proxy_(policy)
    attach(logs)
    seen = Seen()
    statuses = await calls(seen, proxy)
    assert statuses[0] == statuses[2] == 502  # JSON answers: invalid JSON from both tiers
    await seen.admin(proxy)
    seen.assert_clean(logs)


# ------------------------------------------------------------------------------ a hostile upstream


def echo_app() -> web.Application:
    """An OpenAI-style server that puts the key it was sent, and its URL with a password, into its errors.

    The last user message picks the failure: 401, 500, html-500, bad-json, sse-error, sse-midway.
    """

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        mode = body["messages"][-1]["content"]
        auth = request.headers.get("Authorization", "")
        leak = f"Incorrect API key provided: {auth.removeprefix('Bearer ')}; see http://agent:{URL_PASS}@upstream/v1"
        error = orjson.dumps({"error": {"message": leak, "type": "invalid_request_error", "code": "bad_key"}})
        if mode == "401":
            return web.Response(status=401, body=error, content_type="application/json")
        if mode == "500":
            return web.Response(status=500, body=error, content_type="application/json")
        if mode == "html-500":
            return web.Response(status=500, text=f"<html>{leak}</html>", content_type="text/html")
        if mode == "bad-json":
            return web.Response(status=200, text=f"not json {leak}", content_type="application/json")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if mode == "sse-midway":
            chunk = {
                "id": "chatcmpl-echo",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": "m",
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hello"}, "finish_reason": None}],
            }
            await resp.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
        await resp.write(b"data: " + error + b"\n\n")
        await resp.write_eof()
        return resp

    return upstream_app({"/v1/chat/completions": chat})


@pytest.fixture
async def echo() -> AsyncIterator[str]:
    async with serve_app(echo_app()) as url:
        yield url


ECHO_ROUTES = """
    aliases: {"*": fast}
    routes:
      - name: all
        use: fast
"""


async def test_upstream_echoing_the_key_is_redacted(echo, start_fake_, proxy_, logs) -> None:
    full = await start_fake_(FakeConfig(seed=2))
    # no escalation: the echo tier's errors go to the client as they are (after redaction)
    direct = await proxy_(
        with_key(
            policy_text(echo, full.url, routes=ECHO_ROUTES, extra="escalation: {max_attempts: 1}\n", breakers=False),
            "fast",
            ECHO_KEY,
        )
    )
    # escalation: the echo tier fails, the full tier answers
    escalating = await proxy_(with_key(policy_text(echo, full.url, extra=ESCALATE, breakers=False), "fast", ECHO_KEY))
    attach(logs)
    seen = Seen()
    expected = {  # statuses of (JSON, SSE) x (no tools, tools); None: not this test's business
        "401": [502, 502, 502, 502],  # the router's key was refused: its fault, not the client's
        "500": [502, 502, 502, 502],
        "html-500": [502, 502, 502, 502],
        "bad-json": [502, None, 502, None],
        "sse-error": [502, 502, 502, 502],
        "sse-midway": [502, 200, 502, 200],  # the stream started: an SSE error frame
    }
    for mode, want in expected.items():
        got = await calls(seen, direct, model="any", content=mode)
        assert [g if w is not None else None for g, w in zip(got, want, strict=True)] == want, mode
        await calls(seen, escalating, content=mode)
    midway = [text for where, text in seen.items if where.startswith("any sse-midway") and "stream=True body" in where]
    assert midway and all('"error"' in t and "[redacted]" in t for t in midway)
    for proxy in (direct, escalating):
        await seen.admin(proxy)
    seen.assert_clean(logs)

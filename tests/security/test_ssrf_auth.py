"""SSRF, client auth and secrets on every transport.

- Fields that would choose an upstream or a key (`api_base`, `base_url`, `api_key`, `api_version`,
  `custom_llm_provider`, `extra_headers`) are refused with a 400 naming the field, on chat,
  Responses and Messages (and count_tokens), JSON and SSE, and in a WebSocket `response.create`; no
  upstream sees anything.
- A tier served through litellm takes only the OpenAI request fields from a client: nothing a client
  sends becomes one of litellm's own arguments (an endpoint, credentials, headers, a mock answer).
  Regression: a bedrock tier's SigV4-signed request, with the router's AWS key id, went to whatever
  `aws_bedrock_runtime_endpoint` a client put in its body.
- With client keys configured, every route of the app except `/`, `/healthz`, `/readyz` and `/metrics` — enumerated
  from the app itself, so a new route cannot slip through — answers 401 without a key or with a wrong
  one, on every method (OpenAI's error shape; Anthropic's on the Messages routes, whose SDK sends the
  key as `x-api-key`), and the WebSocket upgrade is refused with 401.
- A canary upstream key (and the password of a key-bearing URL an upstream echoes) never appears in
  a Responses JSON body, SSE frame or WebSocket event, on the happy path or when the upstream fails
  (extends tests/security/test_redaction.py, which covers chat, admin endpoints and logs; the
  Messages transport, native `anthropic/*` tiers included: test_messages_upstream.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import orjson
import pytest
import websockets
from aiohttp import web
from starlette.routing import Route, WebSocketRoute

from router.app import create_app
from router.core.call import FORBIDDEN_FIELDS
from router.fake import FakeConfig
from router.settings import Settings
from tests.api.helpers import ERROR_KEYS, Raw, assert_error_body, fake_requests, get, post, sse, with_key
from tests.conftest import Proxy, policy_text, serve_app
from tests.security.test_redaction import CANARIES, ECHO_KEY, ECHO_ROUTES, FAST_KEY, Seen, attach, echo_app

ESCALATE = "escalation: {to: full, max_attempts: 2}\n"
CLIENT_KEY = "k-client-0123456789abcdef"
TERMINAL = {"response.completed", "response.incomplete", "response.failed", "error"}
USER = [{"role": "user", "content": "What is the weather in Paris?"}]


def ws_url(proxy: Proxy) -> str:
    return proxy.url.replace("http://", "ws://") + "/responses"


async def ws_turn(proxy: Proxy, event: dict[str, Any], headers: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The events answering one `response.create` on a fresh WebSocket connection."""
    out: list[dict[str, Any]] = []
    async with websockets.connect(ws_url(proxy), additional_headers=headers or {}, open_timeout=10) as ws:
        await ws.send(orjson.dumps(event).decode())
        for _ in range(5000):
            message = await asyncio.wait_for(ws.recv(), 10)
            out.append(orjson.loads(message))
            if out[-1]["type"] in TERMINAL:
                return out
    raise AssertionError("no terminal event")


# ------------------------------------------------------------------------------ forbidden fields


@pytest.mark.parametrize("field", FORBIDDEN_FIELDS)
async def test_fields_that_choose_an_upstream_are_refused_on_every_transport(start_fake_, proxy_, field: str) -> None:
    fast = await start_fake_(FakeConfig(seed=1))
    full = await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(policy_text(fast.url, full.url, extra=ESCALATE))
    value: Any = {"authorization": "Bearer x"} if field == "extra_headers" else "http://169.254.169.254/latest"
    chat = {"model": "auto", "messages": USER, field: value}
    resp = {"model": "auto", "input": "hi", field: value}
    for path, body in (("/chat/completions", chat), ("/responses", resp)):
        for stream in (False, True):
            raw = await post(proxy.url + path, {**body, "stream": stream})
            err = assert_error_body(raw, 400, type_="invalid_request_error", code="forbidden_field")
            assert err["param"] == field, (path, stream, err)
            assert "169.254" not in err["message"]
    [event] = await ws_turn(proxy, {"type": "response.create", **resp})
    assert (event["type"], event["status"], event["code"], event["param"]) == ("error", 400, "forbidden_field", field)
    message = {"model": "auto", "max_tokens": 8, "messages": USER, field: value}
    for path, stream in (("/v1/messages", False), ("/v1/messages", True), ("/v1/messages/count_tokens", False)):
        raw = await post(proxy.base + path, {**message, "stream": stream})
        err = anthropic_error(raw, 400, "invalid_request_error")
        assert repr(field) in err["message"] and "169.254" not in err["message"], (path, stream, err)
    # nothing reached an upstream (the fakes' logs hold only the warm-up GETs)
    assert await fake_requests(fast.url) == [] and await fake_requests(full.url) == []


def anthropic_error(raw: Raw, status: int, type_: str) -> dict[str, Any]:
    """The Messages routes' errors: Anthropic's shape `{"type": "error", "error": {"type", "message"}}`."""
    assert raw.status == status, (raw.status, raw.body)
    assert raw.headers["content-type"].startswith("application/json")
    body = raw.json()
    assert body["type"] == "error" and set(body) == {"type", "error"}, body
    assert set(body["error"]) == {"type", "message"} and body["error"]["type"] == type_, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"], body
    return body["error"]  # type: ignore[no-any-return]


# ------------------------------------------------------------------------------ litellm tiers


BEDROCK_KEY_ID = "AKIACANARYKEYID00042"
BEDROCK_SECRET = "bedrock-canary-secret-7d1f"
CONVERSE = {
    "output": {"message": {"role": "assistant", "content": [{"text": "Hello from the real tier."}]}},
    "stopReason": "end_turn",
    "usage": {"inputTokens": 3, "outputTokens": 5, "totalTokens": 8},
    "metrics": {"latencyMs": 1},
}


class Capture:
    """A local HTTP server recording every request; answers like Bedrock's Converse API."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> Capture:
        async def any_request(request: web.Request) -> web.Response:
            body = await request.read()
            self.seen.append({"path": request.path, "headers": dict(request.headers), "body": body})
            return web.json_response(CONVERSE)

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", any_request)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def capture() -> AsyncIterator[Any]:
    servers: list[Capture] = []

    async def start() -> Capture:
        servers.append(await Capture().start())
        return servers[-1]

    yield start
    for s in servers:
        await s.close()


def bedrock_policy(endpoint: str) -> str:
    return f"""
version: 1
models:
  fast:
    model: bedrock/anthropic.claude-3-haiku-20240307-v1:0
    api_base: {endpoint}
    warm_connections: 0
    params: {{aws_access_key_id: {BEDROCK_KEY_ID}, aws_secret_access_key: {BEDROCK_SECRET}, aws_region_name: us-east-1}}
aliases: {{"*": fast}}
routes:
  - name: all
    use: fast
escalation: {{max_attempts: 1}}
store: memory://
"""


def hostile_fields(evil: str) -> dict[str, Any]:
    return {
        "aws_bedrock_runtime_endpoint": evil,  # litellm's own argument: the endpoint it signs requests for
        "aws_sts_endpoint": evil,
        "aws_region_name": "evil-region",
        "headers": {"x-injected": "1"},  # litellm's own argument: extra request headers
        "model_list": [{"model_name": "x", "litellm_params": {"model": "bedrock/x", "api_base": evil}}],
        "mock_response": "MOCKED BY THE CLIENT",  # litellm's own argument: an answer without any upstream
        "litellm_credential_name": "default",
    }


@pytest.mark.parametrize("field", list(hostile_fields("")))
async def test_litellm_tier_takes_no_litellm_arguments_from_a_client(capture, proxy_, field: str) -> None:
    legit, evil = await capture(), await capture()
    proxy = await proxy_(bedrock_policy(legit.url))
    value = hostile_fields(evil.url)[field]
    raw = await post(proxy.url + "/chat/completions", {"model": "auto", "messages": USER, field: value})
    assert evil.seen == [], "a client's field sent the tier's signed request elsewhere"
    assert raw.status == 200, raw.body
    assert raw.json()["choices"][0]["message"]["content"] == "Hello from the real tier."
    [sent] = legit.seen
    assert "x-injected" not in {k.lower() for k in sent["headers"]}
    assert f"Credential={BEDROCK_KEY_ID}/" in sent["headers"]["Authorization"]
    assert "/us-east-1/" in sent["headers"]["Authorization"]
    assert BEDROCK_SECRET not in raw.body.decode() and BEDROCK_KEY_ID not in raw.body.decode()


# ------------------------------------------------------------------------------ client auth on every route

PUBLIC = {"/", "/healthz", "/readyz", "/metrics", "/openapi.json"}  # probes, health, scrapes, API description


def app_routes(proxy: Proxy) -> tuple[list[tuple[str, str]], list[str]]:
    """(method, path) of every HTTP route, and the path of every WebSocket route, of the app the
    proxy runs (built from the same settings: the route table does not depend on anything else)."""
    app = create_app(Settings(policy=proxy.policy_path, reload_policy=False))
    http = [(m, r.path) for r in app.routes if isinstance(r, Route) for m in sorted(r.methods or ())]
    ws = [r.path for r in app.routes if isinstance(r, WebSocketRoute)]
    assert {p for _, p in http} >= {
        "/v1/chat/completions",
        "/v1/responses",
        "/v1/models",
        "/v1/router/stats",
        *MESSAGES,
    }
    assert ws, "the WebSocket mode has a route"
    return http, ws


MESSAGES = {"/v1/messages", "/v1/messages/count_tokens"}  # Anthropic's API: its error shape


def body_for(path: str) -> Any:
    if path.endswith("chat/completions"):
        return {"model": "auto", "messages": USER}
    if path.endswith("responses"):
        return {"model": "auto", "input": "hi"}
    if path in MESSAGES:
        return {"model": "auto", "max_tokens": 8, "messages": USER}
    return None


async def request(method: str, url: str, headers: dict[str, str], body: Any) -> Raw:
    timeout = aiohttp.ClientTimeout(total=20)
    data = orjson.dumps(body) if body is not None else None
    hdrs = {"content-type": "application/json", **headers} if data is not None else headers
    async with aiohttp.ClientSession(timeout=timeout) as s, s.request(method, url, data=data, headers=hdrs) as r:
        return Raw(r.status, {k.lower(): v for k, v in r.headers.items()}, await r.read())


@pytest.mark.parametrize("where", ["policy", "settings"])
async def test_every_route_but_health_and_metrics_needs_a_client_key(start_fake_, proxy_, where: str) -> None:
    fake = await start_fake_(FakeConfig(seed=1))
    if where == "policy":
        proxy = await proxy_(policy_text(fake.url, extra=f'client_keys: ["{CLIENT_KEY}"]\n'))
    else:
        proxy = await proxy_(policy_text(fake.url), client_keys=[CLIENT_KEY])
    http, ws = app_routes(proxy)
    guarded = [(m, p) for m, p in http if p not in PUBLIC]
    assert {p for _, p in http} - {p for _, p in guarded} == PUBLIC, "an unexpected public route"
    wrong: tuple[dict[str, str], ...] = (
        {},
        {"authorization": "Bearer wrong-key"},
        {"x-api-key": "wrong"},
        {"authorization": CLIENT_KEY},  # no "Bearer "
        {"authorization": f"Bearer {CLIENT_KEY[:-1]}"},  # a prefix of the key
        {"authorization": f"Basic {CLIENT_KEY}"},
    )
    known = {"authorization": f"Bearer {CLIENT_KEY}", "x-session-id": "known"}  # a session the call log has
    called = await request("POST", proxy.url + "/chat/completions", known, body_for("/v1/chat/completions"))
    assert called.status == 200, called.body
    await proxy.runtime._flush_calls()
    for method, route in guarded:
        path = route.replace("{model_id}", "fast").replace("{session_id}", "known")  # a parameter: a value it has
        for headers in wrong:
            raw = await request(method, proxy.base + path, headers, body_for(path))
            assert raw.status == 401, (method, path, headers, raw.status)
            if path in MESSAGES:
                err = anthropic_error(raw, 401, "authentication_error")
                assert CLIENT_KEY not in err["message"]
            elif method != "HEAD":
                err = assert_error_body(raw, 401, type_="authentication_error", code="invalid_api_key")
                assert CLIENT_KEY not in err["message"]
        for headers in (
            {"authorization": f"Bearer {CLIENT_KEY}"},
            {"x-api-key": CLIENT_KEY},
        ):  # x-api-key: Anthropic's SDK
            raw = await request(method, proxy.base + path, headers, body_for(path))
            assert raw.status == 200, (method, path, raw.status, raw.body[:200])
    for method, path in http:
        if path in PUBLIC:
            assert (await request(method, proxy.base + path, {}, None)).status == 200, path
    for path in ws:
        url = proxy.base.replace("http://", "ws://") + path
        for headers in wrong:
            with pytest.raises(websockets.InvalidStatus) as refused:
                async with websockets.connect(url, additional_headers=headers, open_timeout=10):
                    pass
            assert refused.value.response.status_code == 401, (path, headers)
            body = orjson.loads(refused.value.response.body or b"{}")
            assert set(body.get("error", {})) == ERROR_KEYS, body
        async with websockets.connect(url, additional_headers={"x-api-key": CLIENT_KEY}, open_timeout=10) as conn:
            await conn.send(orjson.dumps({"type": "response.create", "model": "auto", "input": "hi"}).decode())
            for _ in range(1000):
                event = orjson.loads(await asyncio.wait_for(conn.recv(), 10))
                if event["type"] in TERMINAL:
                    break
            assert event["type"] == "response.completed", event
    # the refused calls never reached the upstream: one chat call per authorized POST (count_tokens calls
    # no model), one per WS turn, and the call that made the known session
    posts = sum(1 for m, p in guarded if m == "POST" and not p.endswith("count_tokens")) * 2 + len(ws) + 1
    assert len(await fake_requests(fake.url)) == posts
    metrics = (await get(proxy.base + "/metrics")).body.decode()
    assert 'router_refused_total{reason="unauthorized"}' in metrics


# ------------------------------------------------------------------------------ secrets on the Responses transport


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.DEBUG)
    yield caplog
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi"):
        logging.getLogger(name).removeHandler(caplog.handler)


@pytest.fixture
async def echo() -> AsyncIterator[str]:
    async with serve_app(echo_app()) as url:
        yield url


async def responses_everywhere(
    seen: Seen, proxy: Proxy, content: str, tools: bool = False, label: str = ""
) -> list[str]:
    """One Responses call per transport (JSON, SSE, WebSocket); everything the client got goes to
    `seen`. Returns an outcome per transport: the status, or the WebSocket's terminal event type."""
    body: dict[str, Any] = {"model": "any", "input": content}
    if tools:
        body["tools"] = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    outcomes = []
    for stream in (False, True):
        raw = seen.add(
            f"{label}responses {content} stream={stream}",
            await post(proxy.url + "/responses", {**body, "stream": stream}),
        )
        outcomes.append(str(raw.status))
        if stream and raw.status == 200:
            events, _, _ = sse(raw.body)
            assert events and events[-1]["type"] in TERMINAL, events[-1:]
    events = await ws_turn(proxy, {"type": "response.create", **body})
    seen.items.append((f"{label}ws {content}", "\n".join(orjson.dumps(e).decode() for e in events)))
    outcomes.append(events[-1]["type"] + (f":{events[-1]['status']}" if "status" in events[-1] else ""))
    return outcomes


async def test_responses_transport_keeps_keys_private(start_fake_, echo, proxy_, logs) -> None:
    # a keyed fast tier that works, and one whose server echoes the key (and a key-bearing URL) in errors
    fast = await start_fake_(FakeConfig(seed=1, api_key=FAST_KEY))
    full = await start_fake_(FakeConfig(seed=2))
    happy = await proxy_(
        with_key(policy_text(fast.url, full.url, routes=ECHO_ROUTES, extra=ESCALATE), "fast", FAST_KEY)
    )
    direct = await proxy_(
        with_key(
            policy_text(echo, full.url, routes=ECHO_ROUTES, extra="escalation: {max_attempts: 1}\n", breakers=False),
            "fast",
            ECHO_KEY,
        )
    )
    escalating = await proxy_(
        with_key(policy_text(echo, full.url, routes=ECHO_ROUTES, extra=ESCALATE, breakers=False), "fast", ECHO_KEY)
    )
    attach(logs)
    seen = Seen()
    assert await responses_everywhere(seen, happy, "hi") == ["200", "200", "response.completed"]
    assert await responses_everywhere(seen, happy, "weather?", tools=True) == ["200", "200", "response.completed"]
    expected = {  # (JSON, SSE, WebSocket) when the echoing tier is the only one
        "401": ["502", "502", "error:502"],
        "500": ["502", "502", "error:502"],
        "html-500": ["502", "502", "error:502"],
        "sse-error": ["502", "502", "error:502"],
        "sse-midway": ["502", "200", "error:502"],  # the stream had started: an `error` event
    }
    for mode, want in expected.items():
        assert await responses_everywhere(seen, direct, mode, label="direct ") == want, mode
        assert await responses_everywhere(seen, escalating, mode) == ["200", "200", "response.completed"], mode
    midway = [
        text
        for where, text in seen.items
        if where.startswith(("direct responses sse-midway stream=True body", "direct ws sse-midway"))
    ]
    assert len(midway) == 2 and all("[redacted]" in t for t in midway), midway  # the upstream's text, redacted
    for proxy in (happy, direct, escalating):
        await seen.admin(proxy)
    seen.assert_clean(logs)
    for where, text in seen.items:
        for canary in CANARIES:
            assert canary not in text, where

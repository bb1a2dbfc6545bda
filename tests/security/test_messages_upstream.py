"""The Messages transport (/v1/messages) when tiers fail or misbehave: keys stay private, answers
stay whole.

- A canary key of an `anthropic/*` tier (the request passed through natively) and of a chat tier,
  the password of a key-bearing URL an upstream echoes, and the client's own key never appear in a
  Messages JSON body, SSE frame, response header, admin endpoint or log record (every logger, at
  DEBUG) — on the happy path (escalations from the chat tier to the native one included), and when
  the native tier fails: 401 / 500 / 529 in Anthropic's error shape echoing its key, an HTML 500,
  invalid JSON, an `error` event before or after the first content, and the fake's fault knobs
  (a refused key, 500, resets before and during a stream, a malformed event). Extends
  tests/security/test_redaction.py (chat) and test_ssrf_auth.py (Responses).
- Answers that are JSON but not what the API promises (fields of the wrong type in an Anthropic
  message or stream event, non-numeric usage from a chat tier) are the tier's failure or are read
  leniently: a 200 with a whole message, a 502 in Anthropic's shape, or a stream that ends with
  `message_stop` or an `error` event — never a 500, a cut stream or a logged traceback.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from router.fake import FakeConfig
from tests.api.helpers import Raw, get, post, with_key
from tests.conftest import Proxy, policy_text, serve_app, upstream_app
from tests.security.test_redaction import ECHO_KEY, ECHO_ROUTES, FAST_KEY, URL_PASS, attach

ESCALATE = "escalation: {to: full, max_attempts: 2}\n"
DIRECT = "escalation: {max_attempts: 1}\n"
NATIVE_KEY = "sk-ant-canary-NATIVEKEY-9b74c9897bac770ffc029102a200c5de"
CLIENT_KEY = "client-canary-KEY-1f0e3dad99908345f7439f8ffabdffc4"
CANARIES = (FAST_KEY, ECHO_KEY, URL_PASS, NATIVE_KEY, CLIENT_KEY)
WEATHER = {"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}


def native(policy: str, tier: str, root: str, key: str) -> str:
    """`policy` (from policy_text) with `tier` made `anthropic/claude-test` on `root`/v1/messages."""
    head, rest = policy.split(f"  {tier}:\n    model: openai/{tier}-model\n    api_base: ", 1)
    _, rest = rest.split("\n", 1)
    return f"{head}  {tier}:\n    model: anthropic/claude-test\n    api_base: {root}\n    api_key: {key}\n{rest}"


def root(url: str) -> str:
    return url.removesuffix("/v1")


def frames(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    """(`event:` name, data) of every event of a Messages stream; comments left out."""
    out = []
    for frame in raw.split(b"\n\n"):
        lines = frame.split(b"\n")
        names = [line[7:].decode() for line in lines if line.startswith(b"event: ")]
        data = [orjson.loads(line[6:]) for line in lines if line.startswith(b"data: ")]
        if data:
            assert len(names) == len(data) == 1, frame
            out.append((names[0], data[0]))
    return out


def assert_whole(raw: Raw, stream: bool) -> str:
    """A Messages answer as the API promises it. Returns its outcome: the status, and for a stream
    the type of its last event."""
    assert raw.status != 500, raw.body[:300]
    if raw.status >= 400:
        assert raw.headers["content-type"].startswith("application/json"), raw.headers
        body = raw.json()
        assert body["type"] == "error" and set(body) == {"type", "error"}, body
        assert set(body["error"]) == {"type", "message"} and body["error"]["message"], body
        assert "unexpectedly" not in body["error"]["message"], body
        return str(raw.status)
    assert raw.status == 200, raw.status
    if not stream:
        message = raw.json()
        assert message["type"] == "message" and isinstance(message["content"], list), message
        return "200"
    events = frames(raw.body)
    assert all(name == data["type"] for name, data in events), events
    kinds = [name for name, _ in events]
    assert kinds[0] == "message_start" and kinds[-1] in ("message_stop", "error"), kinds
    if kinds[-1] == "error":
        assert set(events[-1][1]["error"]) == {"type", "message"}, events[-1]
    return f"200 {kinds[-1]}"


class Seen:
    """Everything the outside world got from the proxies, checked for canaries at the end."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, what: str, raw: Raw) -> Raw:
        self.items.append((f"{what} body", raw.body.decode("utf-8", "replace")))
        self.items.append((f"{what} headers", orjson.dumps(raw.headers).decode()))
        return raw

    async def admin(self, proxy: Proxy) -> None:
        for path in ("/metrics", "/v1/router/stats", "/v1/models", "/healthz"):
            raw = await get(proxy.base + path, headers={"x-api-key": CLIENT_KEY})
            assert raw.status == 200, path
            self.add(path, raw)

    def assert_clean(self, caplog: pytest.LogCaptureFixture) -> None:
        texts = [*self.items, ("logs", caplog.text)]
        texts += [(f"log {r.name}", f"{r.getMessage()} {r.exc_text or ''} {r.args!r}") for r in caplog.records]
        for where, text in texts:
            for canary in CANARIES:
                assert canary not in text, f"{canary!r} leaked in {where}: {text[:500]}"
                assert canary[-12:] not in text, f"part of {canary!r} leaked in {where}: {text[:500]}"


async def messages(seen: Seen, proxy: Proxy, content: str, label: str = "") -> list[str]:
    """One Messages call per (JSON, SSE) x (no tools, tools); outcomes as `assert_whole` gives them."""
    out = []
    for tools in (False, True):
        for stream in (False, True):
            body: dict[str, Any] = {"model": "auto", "max_tokens": 64, "stream": stream,
                                    "messages": [{"role": "user", "content": content}]}  # fmt: skip
            if tools:
                body["tools"] = [WEATHER]
            where = f"{label}{content} tools={tools} stream={stream}"
            raw = seen.add(where, await post(proxy.base + "/v1/messages", body, headers={"x-api-key": CLIENT_KEY}))
            out.append(assert_whole(raw, stream))
    return out


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level("DEBUG")
    yield caplog
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi"):
        logging.getLogger(name).removeHandler(caplog.handler)


def assert_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    for record in caplog.records:
        assert record.exc_info is None and not record.exc_text, (record.name, record.getMessage())
        assert "unexpected" not in record.getMessage(), (record.name, record.getMessage())


# ------------------------------------------------------------------------------ a native tier that echoes its key


def sse_event(data: dict[str, Any]) -> bytes:
    return b"event: " + str(data["type"]).encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


MESSAGE_START = {"type": "message_start", "message": {
    "id": "msg_echo", "type": "message", "role": "assistant", "model": "claude-test", "content": [],
    "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 3, "output_tokens": 1}}}  # fmt: skip
TEXT_START = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
HELLO = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}}


def anthropic_echo_app() -> web.Application:
    """A Messages server that puts the key it was sent, and its URL with a password, in its errors.
    The last user message picks the failure: 401, 500, 529, html-500, bad-json, sse-error, sse-midway."""

    async def create(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        mode = body["messages"][-1]["content"]
        leak = f"invalid x-api-key: {request.headers.get('x-api-key', '')}; see http://agent:{URL_PASS}@upstream/v1"
        error = {"type": "error", "error": {"type": "authentication_error", "message": leak}}
        if mode in ("401", "500", "529"):
            return web.Response(status=int(mode), body=orjson.dumps(error), content_type="application/json")
        if mode == "html-500":
            return web.Response(status=500, text=f"<html>{leak}</html>", content_type="text/html")
        if mode == "bad-json":
            return web.Response(status=200, text=f"not json {leak}", content_type="application/json")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if mode == "sse-midway":
            await resp.write(sse_event(MESSAGE_START) + sse_event(TEXT_START) + sse_event(HELLO))
        await resp.write(sse_event(error))
        await resp.write_eof()
        return resp

    return upstream_app({"/v1/messages": create})


@pytest.fixture
async def echo() -> AsyncIterator[str]:
    async with serve_app(anthropic_echo_app()) as url:
        yield url


async def test_messages_transport_keeps_keys_private(start_fake_, echo, proxy_, logs) -> None:
    keys = f'client_keys: ["{CLIENT_KEY}"]\n'
    # a keyed chat tier that breaks half its tool calls, escalating to a keyed native tier (in the kinds
    # that escalate: a call written as text, or one tool's sweep, is salvaged)
    kinds = ("invalid_json", "unknown_tool", "schema_violation", "missing_tool_call")
    chat = await start_fake_(FakeConfig(seed=1, api_key=FAST_KEY, bad_tool_rate=0.5, bad_kinds=kinds))
    claude = await start_fake_(FakeConfig(seed=2, api_key=NATIVE_KEY))
    policy = with_key(policy_text(chat.url, claude.url, extra=ESCALATE + keys), "fast", FAST_KEY)
    happy = await proxy_(native(policy, "full", root(claude.url), NATIVE_KEY))
    # the echoing native tier alone, and in front of a healthy chat tier
    healthy = await start_fake_(FakeConfig(seed=3))
    alone = policy_text(echo, routes=ECHO_ROUTES, extra=DIRECT + keys, breakers=False)
    direct = await proxy_(native(alone, "fast", root(echo), ECHO_KEY))
    ahead = policy_text(echo, healthy.url, routes=ECHO_ROUTES, extra=ESCALATE + keys, breakers=False)
    escalating = await proxy_(native(ahead, "fast", root(echo), ECHO_KEY))
    attach(logs)
    seen = Seen()
    for content in ("hi", "weather?", "Paris?"):
        outcomes = await messages(seen, happy, content)
        assert outcomes == ["200", "200 message_stop"] * 2, outcomes
    escalated = [where for where, text in seen.items if '"x-router-escalated":"true"' in text]
    assert escalated, "the chat tier's broken calls went to the native tier"
    expected = {  # (JSON, SSE) when the echoing tier is the only one, with and without tools
        "401": ["502", "502"],  # the router's key was refused: its fault, not the client's
        "500": ["502", "502"],
        "529": ["502", "502"],
        "html-500": ["502", "502"],
        "bad-json": ["502", "502"],
        "sse-error": ["502", "502"],
        "sse-midway": ["502", "200 error"],  # the stream had started: an `error` event ends it
    }
    for mode, want in expected.items():
        assert await messages(seen, direct, mode, label="direct ") == want * 2, mode
        assert await messages(seen, escalating, mode) == ["200", "200 message_stop"] * 2, mode
    midway = [
        text for where, text in seen.items if where.startswith("direct sse-midway") and "stream=True body" in where
    ]
    assert len(midway) == 2 and all("[redacted]" in t for t in midway), midway  # the tier's text, redacted
    for proxy in (happy, direct, escalating):
        await seen.admin(proxy)
    seen.assert_clean(logs)
    assert_no_traceback(logs)


FAULTS = {  # the fake's fault knobs, on a keyed native tier
    "refuses the key": FakeConfig(seed=4, api_key="sk-ant-the-key-the-server-expects"),
    "500": FakeConfig(seed=4, api_key=NATIVE_KEY, error_rate=1.0),
    "reset": FakeConfig(seed=4, api_key=NATIVE_KEY, reset_before_first_byte=1.0),
    "reset mid-stream": FakeConfig(seed=4, api_key=NATIVE_KEY, reset_mid_stream=1.0),
    "malformed": FakeConfig(seed=4, api_key=NATIVE_KEY, malformed_sse=1.0),
}


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_native_tier_failures_keep_keys_private(start_fake_, proxy_, logs, fault: str) -> None:
    claude = await start_fake_(FAULTS[fault])
    healthy = await start_fake_(FakeConfig(seed=5))
    keys = f'client_keys: ["{CLIENT_KEY}"]\n'
    alone = policy_text(claude.url, routes=ECHO_ROUTES, extra=DIRECT + keys, breakers=False)
    direct = await proxy_(native(alone, "fast", root(claude.url), NATIVE_KEY))
    ahead = policy_text(claude.url, healthy.url, routes=ECHO_ROUTES, extra=ESCALATE + keys, breakers=False)
    escalating = await proxy_(native(ahead, "fast", root(claude.url), NATIVE_KEY))
    attach(logs)
    seen = Seen()
    for content in ("hi", "Paris?"):
        outcomes = await messages(seen, direct, content, label="direct ")
        assert set(outcomes[0::2]) == {"502"}, outcomes  # JSON: the only tier failed
        assert set(outcomes[1::2]) <= {"502", "200 error"}, outcomes  # SSE: before or after the first byte
        assert await messages(seen, escalating, content) == ["200", "200 message_stop"] * 2
    for proxy in (direct, escalating):
        await seen.admin(proxy)
    seen.assert_clean(logs)
    assert_no_traceback(logs)


# ------------------------------------------------------------------------------ tiers answering malformed JSON


def hostile_app() -> web.Application:
    """A tier answering well-formed JSON of the wrong shape, on both APIs; the last user message
    names the defect."""

    def native_answer(mode: str, stream: bool) -> list[dict[str, Any]] | dict[str, Any]:
        message = {**MESSAGE_START["message"], "content": [{"type": "text", "text": "Hi"}], "stop_reason": "end_turn"}
        start, delta = MESSAGE_START, {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}}
        text_start, hello = TEXT_START, HELLO
        if mode == "usage-text":
            start = {**start, "message": {**start["message"], "usage": "many"}}
            message = {**message, "usage": "many"}
        elif mode == "usage-list":
            delta = {**delta, "usage": [1, 2]}
            message = {**message, "usage": [1, 2]}
        elif mode == "index-text":
            text_start, hello = {**TEXT_START, "index": "zero"}, {**HELLO, "index": "zero"}
        elif mode == "stop-list":
            delta = {**delta, "delta": {"stop_reason": ["end_turn"]}}
            message = {**message, "stop_reason": ["end_turn"]}
        elif mode == "block-text":
            text_start = {**TEXT_START, "content_block": "text"}
            message = {**message, "content": ["text", 5, None]}
        elif mode == "delta-text":
            hello = {**HELLO, "delta": "Hello"}
            delta = {**delta, "delta": "end_turn"}
        if not stream:
            return message
        return [start, text_start, hello, {"type": "content_block_stop", "index": text_start["index"]}, delta,
                {"type": "message_stop"}]  # fmt: skip

    def chat_answer(mode: str, stream: bool) -> list[dict[str, Any]] | dict[str, Any]:
        usage: Any = {"prompt_tokens": 3, "completion_tokens": 1}
        usage = {"prompt_tokens": "many", "completion_tokens": [1]} if mode == "usage-text" else usage
        usage = [1, 2] if mode == "usage-list" else usage
        head = {"id": "chatcmpl-h", "object": "chat.completion.chunk", "created": 0, "model": "m"}
        message: Any = "Hi" if mode == "message-text" else {"role": "assistant", "content": "Hi"}
        delta: Any = "Hi" if mode == "delta-text" else {"role": "assistant", "content": "Hi"}
        choice: Any = "Hi" if mode == "choices-text" else {"index": 0, "message": message, "finish_reason": "stop"}
        if not stream:
            return {**head, "object": "chat.completion", "choices": [choice], "usage": usage}
        first = "Hi" if mode == "choices-text" else {"index": 0, "delta": delta, "finish_reason": None}
        return [
            {**head, "choices": [first]},
            {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            {**head, "choices": [], "usage": usage},
        ]

    async def answer(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        mode, stream, anthropic = (
            body["messages"][-1]["content"],
            body.get("stream") is True,
            "messages" in request.path,
        )
        out = (native_answer if anthropic else chat_answer)(mode, stream)
        if isinstance(out, dict):
            return web.json_response(out)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if anthropic:
            await resp.write(b"".join(sse_event(e) for e in out))
        else:
            await resp.write(b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in out) + b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    return upstream_app({"/v1/messages": answer, "/v1/chat/completions": answer})


NATIVE_DEFECTS = ("usage-text", "usage-list", "index-text", "stop-list", "block-text", "delta-text")
CHAT_DEFECTS = ("usage-text", "usage-list", "choices-text", "delta-text", "message-text")


@pytest.mark.parametrize("tier", ["native", "chat"])
async def test_malformed_answers_are_never_a_500_or_a_cut_stream(proxy_, logs, tier: str) -> None:
    async with serve_app(hostile_app()) as url:
        policy = policy_text(url, routes=ECHO_ROUTES, extra=DIRECT)
        proxy = await proxy_(native(policy, "fast", root(url), "k") if tier == "native" else policy)
        attach(logs)
        failed = []
        for mode in NATIVE_DEFECTS if tier == "native" else CHAT_DEFECTS:
            for stream in (False, True):
                body = {
                    "model": "auto",
                    "max_tokens": 8,
                    "stream": stream,
                    "messages": [{"role": "user", "content": mode}],
                }
                try:
                    assert_whole(await post(proxy.base + "/v1/messages", body), stream)
                except aiohttp.ClientPayloadError:
                    failed.append(f"{mode} stream={stream}: the stream was cut")
                except AssertionError as exc:
                    failed.append(f"{mode} stream={stream}: {exc}")
        assert not failed, "\n".join(failed)
        assert_no_traceback(logs)

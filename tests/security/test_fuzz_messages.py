"""Bad input on the Messages transport (/v1/messages, /v1/messages/count_tokens), property-based.

Hypothesis generates Messages request bodies: plausible ones (conversations with text, image,
document, thinking, tool_use and tool_result blocks, tools of every kind, tool_choice, system,
stop sequences, metadata, `speed` and `service_tier`) and wild ones (any JSON at all in any field, at
every level: non-string ids, objects where strings belong, odd block types, unknown fields), sent as
JSON or SSE, with or without an `x-router-lane` header. One proxy serves every example of the
module: `fast` is a chat tier (translated; it breaks 30% of its tool calls, so escalation runs too),
`full` an `anthropic/*` tier on the other fake's Messages API (the request passed through natively),
and a `fast` lane swaps `full` for its variant `full-fast`; other lanes forward their fields, refuse,
or cap calls in flight.

Properties, for every example (the fakes are healthy, so any 5xx or `error` event is the router's):
- no 5xx, ever;
- every error has Anthropic's shape `{"type": "error", "error": {"type", "message"}}` with a message,
  and never the catch-all "failed unexpectedly";
- a 200 is a whole answer: a `message` with content blocks, `{"input_tokens": N}` from count_tokens,
  or a stream of well-formed events: each frame's `event:` line is its data's type, `message_start`
  first and `message_stop` last, content blocks opened, filled and closed in index order;
- afterwards the proxy still answers /healthz, has no call in flight and no lane holds a place.
Limits: a body over the cap is 413 and a body nested deeper than MAX_DEPTH is 400 (and reaches no
upstream), both in Anthropic's shape; a body at the limit works; too many calls in flight is 529
(Anthropic's overloaded status).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from router.core.call import MAX_DEPTH
from router.fake import FakeConfig
from tests.security.messages_bodies import NATIVE_KEY, lane_headers, messages_bodies, messages_policy
from tests.security.stack import Stack
from tests.security.test_fuzz import FUZZ, deep_lists, depth_of, encoded, encodings

BODY_CAP = 64 * 1024
ROUTES = ("/v1/messages", "/v1/messages/count_tokens")


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    full = FakeConfig(seed=2, api_key=NATIVE_KEY)
    with Stack(full=full, policy=messages_policy, settings={"max_body_bytes": BODY_CAP}) as s:
        yield s


@pytest.fixture(scope="module")
def http(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.base, timeout=httpx.Timeout(20.0)) as client:
        yield client


@pytest.fixture(autouse=True)
def still_alive(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test: the proxy answers /healthz, no call is in flight, every lane is free."""
    yield
    if "stack" not in request.fixturenames:
        return
    stack: Stack = request.getfixturevalue("stack")
    stack.assert_settled()

    async def lanes(runtime: Any) -> dict[str, int]:
        return dict(runtime.lanes.inflight)

    assert all(n == 0 for n in stack.call(lanes).values()), stack.call(lanes)


# ------------------------------------------------------------------------------ checks


def note(what: str) -> None:
    with contextlib.suppress(InvalidArgument):  # outside a hypothesis test (the parametrized ones)
        event(what)


def check_answer(resp: httpx.Response, path: str) -> None:
    assert resp.status_code < 500, (resp.status_code, resp.content[:500])
    ctype = resp.headers.get("content-type", "")
    if resp.status_code >= 400:
        assert ctype.startswith("application/json"), ctype
        body = orjson.loads(resp.content)
        assert body["type"] == "error" and set(body) == {"type", "error"}, body
        err = body["error"]
        assert set(err) == {"type", "message"}, body
        assert isinstance(err["type"], str) and err["type"] and isinstance(err["message"], str) and err["message"], body
        assert "unexpectedly" not in err["message"], body
        note(f"{path} {resp.status_code} {err['type']}")
        return
    assert resp.status_code == 200, resp.status_code
    note(f"{path} 200 {ctype.split(';')[0]}")
    if path.endswith("count_tokens"):
        body = orjson.loads(resp.content)
        assert set(body) == {"input_tokens"} and isinstance(body["input_tokens"], int) and body["input_tokens"] >= 0
        return
    if ctype.startswith("text/event-stream"):
        check_stream(resp.content)
        return
    message = orjson.loads(resp.content)
    assert message["type"] == "message" and message["role"] == "assistant", message
    assert isinstance(message["content"], list) and all(isinstance(b.get("type"), str) for b in message["content"])
    assert isinstance(message["stop_reason"], str), message


def check_stream(raw: bytes) -> None:
    """Anthropic's event grammar: message_start, then blocks opened, filled and closed in order, then
    message_delta and message_stop; `event:` names each data's type; comments (`: router ...`) aside."""
    assert raw.endswith(b"\n\n"), raw[-200:]
    events = []
    for frame in raw.split(b"\n\n")[:-1]:
        lines = [line for line in frame.split(b"\n") if not line.startswith(b":")]
        if not lines:
            continue
        assert len(lines) == 2 and lines[0].startswith(b"event: ") and lines[1].startswith(b"data: "), frame
        data = orjson.loads(lines[1][6:])
        assert lines[0][7:].decode() == data["type"], frame
        events.append(data)
    kinds = [e["type"] for e in events]
    assert "error" not in kinds, events[-1]  # the upstreams are healthy: a failure mid-stream is the router's
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"], kinds
    assert kinds.count("message_start") == kinds.count("message_stop") == 1, kinds
    opened, open_ = 0, None
    for e in events[1:-2]:
        if e["type"] == "content_block_start":
            assert open_ is None and e["index"] == opened, (kinds, e)
            open_, opened = opened, opened + 1
        elif e["type"] in ("content_block_delta", "content_block_stop"):
            assert e["index"] == open_, (kinds, e)
            open_ = None if e["type"] == "content_block_stop" else open_
        else:
            assert e["type"] == "ping", e
    assert open_ is None, kinds


def post(http: httpx.Client, path: str, raw: bytes, lane: str | None = None) -> httpx.Response:
    headers = {"content-type": "application/json"}
    if lane is not None:
        headers["x-router-lane"] = lane
    return http.post(path, content=raw, headers=headers)


# ------------------------------------------------------------------------------ bodies


@settings(FUZZ, max_examples=400)
@given(body=messages_bodies, how=encodings, lane=lane_headers, path=st.sampled_from([*ROUTES, ROUTES[0], ROUTES[0]]))
def test_messages_bodies(
    stack: Stack, http: httpx.Client, body: dict[str, Any], how: str, lane: str | None, path: str
) -> None:
    check_answer(post(http, path, encoded(body, how), lane), path)


@settings(FUZZ, max_examples=60)
@given(
    path=st.sampled_from(ROUTES),
    raw=st.one_of(st.binary(max_size=2000), st.text(max_size=500).map(str.encode)),
    ctype=st.sampled_from(["application/json", "text/plain", ""]),
)
def test_raw_bytes(stack: Stack, http: httpx.Client, path: str, raw: bytes, ctype: str) -> None:
    resp = http.post(path, content=raw, headers={"content-type": ctype} if ctype else {})
    check_answer(resp, path)


USER = {"role": "user", "content": "What is the weather in Paris?"}
WEATHER = {"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
# Shapes the proxy checks itself (everything else goes upstream untouched), refused on both routes.
REFUSED = {  # (the field the error names, the fields)
    "tools-object": ("tools", {"tools": {}}),
    "tools-number": ("tools", {"tools": 0}),
    "tools-string": ("tools", {"tools": "get_weather"}),
    "tools-false": ("tools", {"tools": False}),
    "tool-choice-number": ("tool_choice", {"tool_choice": 5}),
    "tool-choice-string": ("tool_choice", {"tool_choice": "auto"}),
    "tool-choice-without-type": ("tool_choice", {"tool_choice": {}}),
    "tool-choice-unknown-type": ("tool_choice", {"tool_choice": {"type": "function"}}),
    "tool-choice-string-with-tools": ("tool_choice", {"tools": [WEATHER], "tool_choice": "auto"}),
}


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize("case", list(REFUSED))
def test_what_the_proxy_checks_is_refused(stack: Stack, http: httpx.Client, case: str, path: str) -> None:
    """Regression: `tools` was checked only when truthy and `tool_choice` only beside tools, so
    `tools: {}` or a tool_choice of the wrong shape was dropped for a chat tier and sent as it was to
    an `anthropic/*` tier (the chat transport refuses both). Now a 400 on both routes."""
    param, fields = REFUSED[case]
    resp = http.post(path, json={"model": "auto", "max_tokens": 8, "messages": [USER], **fields})
    check_answer(resp, path)
    assert resp.status_code == 400, resp.content
    message = resp.json()["error"]["message"]  # OpenAI's wording quotes the field, Anthropic's starts with it
    assert message.startswith(f"{param}:") or f"'{param}" in message, resp.json()


# ------------------------------------------------------------------------------ limits


def nested_body(where: str, total: int, stream: bool) -> bytes:
    """A Messages body whose nesting depth is exactly `total`, the deep part (lists in lists) at `where`."""
    marker = "@@deep@@"

    def build(nested: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"model": "auto", "max_tokens": 16, "messages": [dict(USER)], "stream": stream}
        if where == "extra":
            body["x_extra"] = nested
        elif where == "content":
            body["messages"][0]["content"] = [{"type": "text", "text": "hi", "x": nested}]
        elif where == "metadata":
            body["metadata"] = {"m": nested}
        elif where == "tool":
            body["tools"] = [{**WEATHER, "input_schema": {"type": "object", "x": nested}}]
        else:  # the input of an earlier tool call
            call = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"x": nested}}
            result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}
            body["messages"] += [{"role": "assistant", "content": [call]}, {"role": "user", "content": [result]}]
        return body

    above = depth_of(build(deep_lists(50))) - 50  # containers around the deep part (50: deeper than the rest)
    k = total - above
    raw = json.dumps(build(marker)).replace(f'"{marker}"', "[" * k + "]" * k).encode()
    if total <= MAX_DEPTH + 5:
        assert depth_of(json.loads(raw)) == total
    return raw


def upstream_requests(stack: Stack, http: httpx.Client) -> int:
    n = 0
    for url in (stack.fast_url, stack.full_url):
        log = http.get(url.removesuffix("/v1") + "/_fake/requests").json()
        n += sum(1 for e in log if e["method"] == "POST")
    return n


@pytest.mark.parametrize("where", ["extra", "content", "metadata", "tool", "tool-input"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_nesting_limit_is_a_400_and_anything_under_it_works(
    stack: Stack, http: httpx.Client, where: str, stream: bool
) -> None:
    for total, accepted in ((MAX_DEPTH, True), (MAX_DEPTH + 1, False), (600, False)):
        raw = nested_body(where, total, stream)
        for path in ROUTES:
            before = upstream_requests(stack, http)
            resp = post(http, path, raw)
            check_answer(resp, path)
            if accepted:
                assert resp.status_code == 200, (total, path, resp.content[:300])
                continue
            assert resp.status_code == 400, (total, path, resp.content[:300])
            assert "nests deeper" in resp.json()["error"]["message"]
            assert upstream_requests(stack, http) == before, "a refused body never reaches an upstream"


@settings(FUZZ, max_examples=40)
@given(
    where=st.sampled_from(["extra", "content", "metadata", "tool", "tool-input"]),
    depth=st.integers(min_value=200, max_value=1100),
    stream=st.booleans(),
    path=st.sampled_from(ROUTES),
)
def test_deep_nesting(stack: Stack, http: httpx.Client, where: str, depth: int, stream: bool, path: str) -> None:
    """Nesting within what the JSON parser takes, and past it: served or a 400, never a 5xx."""
    check_answer(post(http, path, nested_body(where, depth, stream)), path)


def big(kind: str) -> dict[str, Any]:
    """Bodies near the cap, wide rather than deep."""
    body: dict[str, Any] = {"model": "auto", "max_tokens": 16, "messages": [USER]}
    if kind == "long-text":
        body["messages"] = [{"role": "user", "content": "word " * 12_000}]
    elif kind == "many-blocks":
        body["messages"] = [{"role": "user", "content": [{"type": "text", "text": "a"}] * 2_000}]
    elif kind == "many-messages":
        turns = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}] * 700
        body["messages"] = [*turns, USER]
    elif kind == "many-tools":
        body["tools"] = [{**WEATHER, "name": f"tool_{i}"} for i in range(400)]
    elif kind == "many-calls":
        calls = [{"type": "tool_use", "id": f"toolu_{i}", "name": "get_weather", "input": {}} for i in range(300)]
        results = [{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": "ok"} for i in range(300)]
        body["messages"] += [{"role": "assistant", "content": calls}, {"role": "user", "content": results}]
        body["tools"] = [WEATHER]
    else:  # a wide tool input
        body["messages"] += [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "get_weather",
                                               "input": {f"k{i}": i for i in range(4_000)}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]},
        ]  # fmt: skip
    return body


@pytest.mark.parametrize(
    "kind", ["long-text", "many-blocks", "many-messages", "many-tools", "many-calls", "wide-input"]
)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_big_bodies_under_the_cap_are_served(stack: Stack, http: httpx.Client, kind: str, stream: bool) -> None:
    raw = orjson.dumps({**big(kind), "stream": stream})
    assert len(raw) <= BODY_CAP, len(raw)
    for path in ROUTES:
        resp = post(http, path, raw)
        check_answer(resp, path)
        assert resp.status_code == 200, (kind, path, resp.content[:300])


@settings(FUZZ, max_examples=10)
@given(path=st.sampled_from(ROUTES), size=st.integers(BODY_CAP + 1, 4 * BODY_CAP), chunked=st.booleans())
def test_body_over_cap_is_413(stack: Stack, http: httpx.Client, path: str, size: int, chunked: bool) -> None:
    raw = orjson.dumps({"model": "auto", "max_tokens": 8, "messages": [{"role": "user", "content": "x" * size}]})

    def pieces() -> Iterator[bytes]:  # no content-length: the cap applies while reading
        for i in range(0, len(raw), 8192):
            yield raw[i : i + 8192]

    resp = http.post(path, content=pieces() if chunked else raw, headers={"content-type": "application/json"})
    assert resp.status_code == 413, resp.status_code
    assert resp.json() == {
        "type": "error",
        "error": {"type": "request_too_large", "message": resp.json()["error"]["message"]},
    }
    assert str(BODY_CAP) in resp.json()["error"]["message"]


def test_concurrency_cap_is_529_with_retry_after() -> None:
    """One slot: while a slow call holds it, /v1/messages (JSON and SSE) gets 529 + Retry-After in
    Anthropic's shape (`overloaded_error`); count_tokens calls no model and still answers."""
    slow = FakeConfig(seed=1, delay_ms=800)
    ask = {"model": "auto", "max_tokens": 8, "messages": [USER]}
    with Stack(fast=slow, full=slow, settings={"max_concurrency": 1}) as stack, httpx.Client(timeout=20) as client:
        holder = threading.Thread(target=lambda: client.post(stack.base + "/v1/messages", json=ask), daemon=True)
        holder.start()
        for _ in range(300):  # bounded: 3 s for the slot to be taken
            if stack.inflight() == 1:
                break
            time.sleep(0.01)
        assert stack.inflight() == 1
        for stream in (False, True):
            resp = client.post(stack.base + "/v1/messages", json={**ask, "stream": stream})
            assert resp.status_code == 529, (stream, resp.status_code)
            assert resp.headers["retry-after"] == "1" and resp.headers["x-should-retry"] == "true"
            assert resp.json()["type"] == "error" and resp.json()["error"]["type"] == "overloaded_error"
        assert client.post(stack.base + "/v1/messages/count_tokens", json=ask).status_code == 200
        holder.join(10)
        assert not holder.is_alive()
        assert stack.inflight() == 0
        assert client.post(stack.base + "/v1/messages", json=ask).status_code == 200

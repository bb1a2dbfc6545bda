"""Bad input, property-based: whatever a client sends, the router answers clearly and stays up.

Hypothesis generates chat-completions bodies and Responses bodies (the known fields, each either a
plausible value or any JSON at all: random types, unicode, deep nesting, huge and non-finite
numbers, nulls, unknown fields), raw bytes, and WebSocket frames (text and binary, bad JSON, wrong
event types, oversize). One proxy in front of two fake upstreams (the fast one breaks 30% of its
tool calls, so escalation runs too) serves every example of the module, from a background thread.

Properties, for every example:
- no 5xx, ever: the router's own failures would show as 500 and upstream failures cannot happen
  here (the fakes are healthy), so any 5xx is a router bug;
- every 4xx is the OpenAI error shape `{"error": {"message", "type", "param", "code"}}` with a
  message, and never the catch-all "failed unexpectedly";
- a 200 is a whole answer: JSON with `choices`/`output`, or an SSE stream that ends properly;
- a WebSocket answers every frame with events (a response, or one `error` event with a 4xx
  status) and is closed only with 1009 (a frame over the cap), never 1011;
- afterwards the proxy still answers /healthz and has no call in flight.
Limits: a body over the cap is 413 on both HTTP routes, a WebSocket frame over its cap closes the
socket with 1009 (text and binary), more calls in flight than the cap is 503 with `Retry-After`
(chat, Responses) or an `error` event with status 503 (WebSocket).

Regressions found by this fuzzing, pinned as plain tests: bodies nested deeper than the router can
re-encode (a 502 blamed on the upstream, a 500, or a cut stream; now a 400 at parse time), and
tools / tool_choice / history with a non-object where an object belongs (a 500; now served).
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
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from router.core.call import MAX_DEPTH
from router.fake import FakeConfig
from tests.security.stack import Stack

BODY_CAP = 64 * 1024
FRAME_CAP = 16 * 1024
ERROR_KEYS = {"message", "type", "param", "code"}
TERMINAL = {"response.completed", "response.incomplete", "response.failed", "error"}
FUZZ = settings(
    max_examples=250,
    deadline=None,
    database=None,  # nothing written into the work tree; failures print their reproduction
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with Stack(settings={"max_body_bytes": BODY_CAP, "ws_max_message_bytes": FRAME_CAP}) as s:
        yield s


@pytest.fixture(scope="module")
def http(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.base, timeout=httpx.Timeout(20.0)) as client:
        yield client


@pytest.fixture(autouse=True)
def still_alive(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test: the proxy answers /healthz and no call is left in flight."""
    yield
    if "stack" not in request.fixturenames:
        return
    stack: Stack = request.getfixturevalue("stack")
    stack.assert_settled()


# ------------------------------------------------------------------------------ strategies

# Any JSON: every type, unicode (including surrogates' neighbours and NUL), big ints, floats.
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
    st.sampled_from(["", "\x00", "\u202e", "\ud7ff\ue000", "🦜" * 20, "{", '"}', "</s>", "```json\n{"]),
)
any_json = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)


def family(wild: bool) -> tuple[st.SearchStrategy[dict[str, Any]], st.SearchStrategy[dict[str, Any]]]:
    """(chat bodies, Responses bodies). Plausible ones are well-formed requests with random content
    (text, unicode, numbers, odd but JSON tool schemas) that mostly reach an upstream; wild ones put
    any JSON at all in any field, at every level."""

    def either(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.one_of(good, good, any_json) if wild else good

    roles = st.sampled_from(
        ["user", "assistant", "system", "developer", "tool", "function", "", "USER"]
        if wild
        else ["user", "assistant", "system", "developer"]
    )
    names = st.one_of(st.sampled_from(["get_weather", "read_file", "x"]), st.text(min_size=1, max_size=20))
    schemas = st.one_of(
        st.just({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        st.just({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}}),
        st.just({"type": "nope"}),
        st.just({"$ref": "#/definitions/missing"}),
        st.just({"$ref": "http://127.0.0.1:9/schema.json"}),  # never fetched
        st.just({"type": "object", "properties": {"a": {"$ref": "#"}}}),
        st.just({"type": "object", "properties": {"s": {"type": "string", "pattern": "(a+)+$"}}}),
        any_json,
    )
    function = st.fixed_dictionaries(
        {"name": names},
        optional={"parameters": schemas, "description": st.text(max_size=30), "strict": st.booleans()},
    )
    chat_tools = st.lists(
        either(st.fixed_dictionaries({"type": either(st.just("function")), "function": either(function)})),
        max_size=3,
    )
    tool_choices = st.one_of(
        st.sampled_from(["auto", "none", "required"]),
        st.fixed_dictionaries({"type": st.just("function"), "function": st.fixed_dictionaries({"name": names})}),
        *([any_json] if wild else []),
    )
    part_types = ["text", "image_url", "input_text", "x"] if wild else ["text"]
    parts = st.lists(
        either(st.fixed_dictionaries({"type": st.sampled_from(part_types), "text": st.text(max_size=30)})),
        min_size=1,
        max_size=3,
    )
    contents = st.one_of(st.text(max_size=80), parts, *([any_json] if wild else []))
    tool_call = st.fixed_dictionaries(
        {
            "id": either(st.one_of(st.sampled_from(["call_1", "call_2"]), st.text(min_size=1, max_size=12))),
            "type": either(st.just("function")),
            "function": either(st.fixed_dictionaries({"name": names, "arguments": either(st.text(max_size=40))})),
        }
    )
    message = st.fixed_dictionaries(
        {"role": either(roles), "content": contents},
        optional={"tool_calls": either(st.lists(tool_call, min_size=1, max_size=2)), "name": either(names)}
        if wild
        else {},
    )
    user_last = st.fixed_dictionaries({"role": st.just("user"), "content": contents})
    asking = st.tuples(st.lists(message, max_size=3), user_last).map(lambda t: [*t[0], t[1]])
    # an agent's tool loop: assistant calls, then a tool result last (what agent feedback inspects)
    calling = st.fixed_dictionaries(
        {"role": st.just("assistant"), "content": st.none(), "tool_calls": either(st.lists(tool_call, max_size=2))}
    )
    result = st.fixed_dictionaries(
        {
            "role": st.just("tool"),
            "tool_call_id": either(st.sampled_from(["call_1", "call_2"])),
            "content": st.one_of(contents, st.sampled_from(["Error: failed", "ok"])),
        }
    )
    looping = st.tuples(st.lists(message, max_size=2), st.lists(calling, min_size=1, max_size=2), result).map(
        lambda t: [*t[0], *t[1], t[2]]
    )
    messages = st.one_of(asking, looping)
    models = st.sampled_from(["auto", "fast", "full", "gpt-4o", "", "*", "fast-model"] if wild else ["auto", "x"])
    common = {
        "temperature": either(st.floats(0, 2)),
        "max_tokens": either(st.integers(-5, 10**6)),
        "n": either(st.integers(-1, 3)),
        "user": either(st.text(max_size=20)),
        "parallel_tool_calls": either(st.booleans()),
        "metadata": any_json,
        "seed": st.integers(min_value=-(2**63), max_value=2**64),
    }
    chat = st.fixed_dictionaries(
        {"model": either(models), "messages": either(messages), "stream": either(st.booleans())},
        optional={
            **common,
            "tools": either(chat_tools),
            "tool_choice": either(tool_choices),
            "stream_options": either(st.fixed_dictionaries({"include_usage": either(st.booleans())})),
            "response_format": either(st.fixed_dictionaries({"type": st.sampled_from(["text", "json_object", "x"])})),
        },
    )
    resp_tool_types = ["function", "web_search", "custom", "file_search"] if wild else ["function"]
    resp_tools = st.lists(
        either(
            st.fixed_dictionaries(
                {"type": either(st.sampled_from(resp_tool_types)), "name": names},
                optional={"parameters": schemas, "description": st.text(max_size=20)},
            )
        ),
        max_size=3,
    )
    item_kinds = [
        st.fixed_dictionaries({"role": either(roles), "content": contents}),
        st.fixed_dictionaries(
            {
                "type": st.just("function_call"),
                "call_id": either(st.text(min_size=1, max_size=10)),
                "name": names,
                "arguments": either(st.text(max_size=30)),
            }
        ),
        st.fixed_dictionaries(
            {
                "type": st.just("function_call_output"),
                "call_id": either(st.text(min_size=1, max_size=10)),
                "output": either(st.text(max_size=30)),
            }
        ),
    ]
    if wild:
        item_kinds.append(
            st.fixed_dictionaries(
                {"type": st.sampled_from(["message", "item_reference", "reasoning", "x"]), "id": st.text(max_size=8)}
            )
        )
    items = st.lists(either(st.one_of(*item_kinds)), max_size=3).map(
        lambda xs: [*xs, {"role": "user", "content": "go"}]
    )
    resp = st.fixed_dictionaries(
        {
            "model": either(models),
            "input": st.one_of(st.text(max_size=60), items, *([any_json] if wild else [])),
            "stream": either(st.booleans()),
        },
        optional={
            **common,
            "instructions": either(st.text(max_size=40)),
            "tools": either(resp_tools),
            "tool_choice": either(tool_choices),
            "store": either(st.booleans()),
            "max_output_tokens": either(st.integers(-5, 10**6)),
            "text": any_json if wild else st.just({"format": {"type": "text"}}),
            "reasoning": any_json if wild else st.just({"effort": "low"}),
            "include": any_json if wild else st.just([]),
            **({"previous_response_id": st.text(max_size=20), "background": st.booleans()} if wild else {}),
        },
    )
    return chat, resp


def with_unknown_fields(bodies: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """Fields the router does not know: passed upstream untouched (or refused, for api_base & co)."""
    forbidden = st.sampled_from(["api_base", "base_url", "api_key", "extra_headers"])
    names = st.one_of(st.text(max_size=10), st.text(max_size=10), st.text(max_size=10), forbidden)
    extra = st.dictionaries(names, any_json, max_size=2)
    return st.tuples(bodies, extra).map(lambda pair: {**pair[1], **pair[0]})


_plausible, _wild = family(wild=False), family(wild=True)
chat_bodies = st.one_of(with_unknown_fields(_plausible[0]), with_unknown_fields(_wild[0]))
resp_bodies = st.one_of(with_unknown_fields(_plausible[1]), with_unknown_fields(_wild[1]))


def deep(depth: int) -> Any:
    value: Any = "bottom"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


# Bodies that stress the parser itself: nesting, numbers JSON cannot hold, odd encodings.
def encoded(body: Any, how: str) -> bytes:
    if how == "nan":  # Python's json writes NaN/Infinity, which is not JSON
        return json.dumps(body, allow_nan=True).encode()
    if how == "utf16":
        return json.dumps(body).encode("utf-16")
    if how == "latin1":
        return json.dumps(body, ensure_ascii=False).encode("utf-8", "replace").replace(b"a", b"\xe9")
    if how == "truncated":
        raw = json.dumps(body).encode()
        return raw[: max(1, len(raw) // 2)]
    return json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")


encodings = st.sampled_from(["plain"] * 8 + ["nan", "utf16", "latin1", "truncated"])


# ------------------------------------------------------------------------------ checks


def check_answer(resp: httpx.Response, path: str) -> None:
    assert resp.status_code < 500, (resp.status_code, resp.content[:500])
    ctype = resp.headers.get("content-type", "")
    code = orjson.loads(resp.content)["error"]["code"] if resp.status_code >= 400 else ctype.split(";")[0]
    with contextlib.suppress(InvalidArgument):  # outside a hypothesis test (parametrized ones)
        event(f"{resp.status_code} {code}")
    if resp.status_code >= 400:
        assert ctype.startswith("application/json"), ctype
        body = orjson.loads(resp.content)
        assert set(body) == {"error"} and set(body["error"]) == ERROR_KEYS, body
        err = body["error"]
        assert isinstance(err["message"], str) and err["message"], body
        assert isinstance(err["type"], str) and err["type"], body
        assert "unexpectedly" not in err["message"], body
        return
    assert resp.status_code == 200, resp.status_code
    if ctype.startswith("text/event-stream"):
        check_sse(resp.content, path)
        return
    body = orjson.loads(resp.content)
    assert ("choices" in body) if path == "/v1/chat/completions" else (body.get("object") == "response"), body


def check_sse(raw: bytes, path: str) -> None:
    assert raw.endswith(b"\n\n"), raw[-200:]
    events: list[Any] = []
    for frame in raw.split(b"\n\n")[:-1]:
        for line in frame.split(b"\n"):
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                events.append(orjson.loads(line[6:]))
    errors = [
        e for e in events if isinstance(e, dict) and (e.get("type") == "error" or ("choices" not in e and "error" in e))
    ]
    for e in errors:  # upstreams are healthy: a failure mid-stream is the router's
        pytest.fail(f"error frame in a stream: {e}")
    if path == "/v1/chat/completions":
        assert raw.endswith(b"data: [DONE]\n\n")
        assert len({e["id"] for e in events}) == 1
    else:
        assert events and events[-1]["type"] in ("response.completed", "response.incomplete"), events[-1:]


# ------------------------------------------------------------------------------ HTTP bodies


@FUZZ
@given(body=chat_bodies, how=encodings)
def test_chat_bodies(stack: Stack, http: httpx.Client, body: dict[str, Any], how: str) -> None:
    raw = encoded(body, how)
    resp = http.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
    check_answer(resp, "/v1/chat/completions")


@FUZZ
@given(body=resp_bodies, how=encodings)
def test_responses_bodies(stack: Stack, http: httpx.Client, body: dict[str, Any], how: str) -> None:
    raw = encoded(body, how)
    resp = http.post("/v1/responses", content=raw, headers={"content-type": "application/json"})
    check_answer(resp, "/v1/responses")


@settings(FUZZ, max_examples=60)
@given(
    path=st.sampled_from(["/v1/chat/completions", "/v1/responses", "/chat/completions", "/responses"]),
    raw=st.one_of(st.binary(max_size=2000), st.text(max_size=500).map(str.encode)),
    ctype=st.sampled_from(["application/json", "text/plain", "", "application/x-www-form-urlencoded"]),
)
def test_raw_bytes(stack: Stack, http: httpx.Client, path: str, raw: bytes, ctype: str) -> None:
    resp = http.post(path, content=raw, headers={"content-type": ctype} if ctype else {})
    check_answer(resp, "/v1" + path.removeprefix("/v1"))


@settings(FUZZ, max_examples=40)
@given(
    path=st.sampled_from(["/v1/chat/completions", "/v1/responses"]),
    depth=st.integers(min_value=200, max_value=1100),
    where=st.sampled_from(["extra", "content", "tool", "metadata"]),
    stream=st.booleans(),
)
def test_deep_nesting(stack: Stack, http: httpx.Client, path: str, depth: int, where: str, stream: bool) -> None:
    """Nesting within what the JSON parser takes, and past it: a 400 either way, never a 5xx."""
    nested = deep(depth)
    if path == "/v1/chat/completions":
        body: dict[str, Any] = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
        target = body["messages"][0]
    else:
        body = {"model": "auto", "input": [{"role": "user", "content": "hi"}], "stream": stream}
        target = body["input"][0]
    if where == "extra":
        body["x_extra"] = nested
    elif where == "content":
        target["content"] = nested
    elif where == "metadata":
        body["metadata"] = {"m": nested}
    else:
        fn = {"name": "get_weather", "parameters": nested}
        body["tools"] = [
            {"type": "function", "function": fn} if path.endswith("completions") else {"type": "function", **fn}
        ]
    resp = http.post(path, content=json.dumps(body).encode(), headers={"content-type": "application/json"})
    check_answer(resp, path)


def depth_of(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    return 0


def nested_body(path: str, where: str, total: int, stream: bool) -> bytes:
    """A body whose nesting depth is exactly `total`, the deep part (lists in lists) at `where`."""
    marker = "@@deep@@"

    def build(nested: Any) -> dict[str, Any]:
        if path.endswith("completions"):
            body: dict[str, Any] = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}
            target = body["messages"][0]
        else:
            body = {"model": "auto", "input": [{"role": "user", "content": "hi"}]}
            target = body["input"][0]
        if stream:
            body["stream"] = True
        if where == "extra":
            body["x_extra"] = nested
        elif where == "content":
            target["content"] = [{"type": "text", "text": "hi", "x": nested}]
        elif where == "metadata":
            body["metadata"] = {"m": nested}
        else:
            fn = {"name": "get_weather", "parameters": {"type": "object", "x": nested}}
            tool = {"type": "function", "function": fn} if path.endswith("completions") else {"type": "function", **fn}
            body["tools"] = [tool]
        return body

    above = depth_of(build(deep_lists(50))) - 50  # containers around the deep part (50: deeper than the rest)
    k = total - above
    raw = json.dumps(build(marker)).replace(f'"{marker}"', "[" * k + "]" * k).encode()
    if total <= MAX_DEPTH + 5:
        assert depth_of(json.loads(raw)) == total
    return raw


def deep_lists(k: int) -> Any:
    value: list[Any] = []
    for _ in range(k - 1):
        value = [value]
    return value


@pytest.mark.parametrize("where", ["extra", "content", "tool", "metadata"])
@pytest.mark.parametrize("transport", ["chat-json", "chat-sse", "resp-json", "resp-sse", "ws"])
def test_nesting_limit_is_a_400_and_anything_under_it_works(
    stack: Stack, http: httpx.Client, transport: str, where: str
) -> None:
    """Regression: orjson parses 1024 levels but encodes 254, so a body nested 255+ deep was parsed,
    then failed when re-encoded — a 502 blamed on the upstream (and counted against its tier), a 500,
    or a stream cut without an end. Now the router refuses it (400) before anything is sent upstream,
    and a body at the limit works on every transport."""
    path = "/v1/chat/completions" if transport.startswith("chat") else "/v1/responses"
    for total, accepted in ((MAX_DEPTH, True), (MAX_DEPTH + 1, False), (600, False)):
        raw = nested_body(path, where, total, stream=transport.endswith("sse"))
        if transport == "ws":
            with connect(ws_url(stack), open_timeout=10, close_timeout=5, max_size=None) as ws:
                ws.send('{"type": "response.create", ' + raw[1:].decode())
                events = answers(ws)
            if accepted:
                assert events[-1]["type"] == "response.completed", events[-1]
            else:
                assert events[-1]["type"] == "error" and events[-1]["status"] == 400, events[-1]
                assert "nests deeper" in events[-1]["message"]
            continue
        before = len(fake_chat_requests(stack, http))
        resp = http.post(path, content=raw, headers={"content-type": "application/json"})
        check_answer(resp, path)
        if accepted:
            assert resp.status_code == 200, (total, resp.content[:300])
        else:
            assert resp.status_code == 400, (total, resp.content[:300])
            assert "nests deeper" in resp.json()["error"]["message"]
            assert len(fake_chat_requests(stack, http)) == before, "a refused body never reaches an upstream"


def fake_chat_requests(stack: Stack, http: httpx.Client) -> list[Any]:
    out = []
    for url in (stack.fast_url, stack.full_url):
        log = http.get(url.removesuffix("/v1") + "/_fake/requests").json()
        out += [e for e in log if e["path"] == "/v1/chat/completions"]
    return out


USER_MSG = {"role": "user", "content": "What is the weather in Paris?"}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
GOOD_CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}


def loop(*assistant_calls: Any) -> list[dict[str, Any]]:
    """A history ending in a tool result (the shape agent feedback inspects), with these tool_calls on
    the assistant messages, oldest first."""
    messages: list[dict[str, Any]] = [USER_MSG]
    for calls in assistant_calls:
        messages += [{"role": "assistant", "content": None, "tool_calls": calls}, USER_MSG]
    messages[-1] = {"role": "tool", "tool_call_id": "call_1", "content": "Error: failed"}
    return messages


# Regression: each of these was a 500 ("the router failed unexpectedly"): routing features and agent
# feedback read client-sent tools, tool_choice and history with `.get` on whatever they found there.
MALFORMED = {
    "tool-function-list": {"tools": [{"type": "function", "function": [1]}]},
    "tool-function-string": {"tools": [{"type": "function", "function": "get_weather"}]},
    "tool-choice-function-string": {"tools": [WEATHER], "tool_choice": {"type": "function", "function": "x"}},
    "tool-choice-function-list": {"tools": [WEATHER], "tool_choice": {"type": "function", "function": ["x"]}},
    "history-tool-calls-string": {"messages": loop("abc")},
    "history-tool-calls-object": {"messages": loop({"a": 1})},
    "history-tool-calls-number": {"messages": loop(5)},
    "history-tool-call-string": {"messages": loop(["abc"])},
    "history-tool-call-function-string": {"messages": loop([{"id": "call_1", "function": "x"}])},
    "earlier-tool-calls-string": {"messages": loop("zz", [GOOD_CALL])},
    "earlier-tool-call-function-list": {"messages": loop([{"id": "c0", "function": [1]}], [GOOD_CALL])},
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_tools_and_history_are_never_a_500(stack: Stack, http: httpx.Client, case: str, stream: bool) -> None:
    body = {"model": "auto", "messages": [USER_MSG], "stream": stream, **MALFORMED[case]}
    resp = http.post("/v1/chat/completions", json=body)
    check_answer(resp, "/v1/chat/completions")


@pytest.mark.parametrize("value", ["1e400", "-1e400", "NaN", "Infinity", "123456789012345678901234567890", "1e-400"])
def test_numbers_json_cannot_hold(stack: Stack, http: httpx.Client, value: str) -> None:
    for path, head in (
        ("/v1/chat/completions", b'"messages": [{"role": "user", "content": "hi"}]'),
        ("/v1/responses", b'"input": "hi"'),
    ):
        raw = b'{"model": "auto", %s, "temperature": %s}' % (head, value.encode())
        check_answer(http.post(path, content=raw, headers={"content-type": "application/json"}), path)


# ------------------------------------------------------------------------------ WebSocket frames


def ws_url(stack: Stack) -> str:
    return stack.url.replace("http://", "ws://") + "/responses"


def answers(ws: ClientConnection) -> list[dict[str, Any]]:
    """The events answering one frame: a response up to its terminal event, or one error."""
    out: list[dict[str, Any]] = []
    for _ in range(5000):
        event = orjson.loads(ws.recv(timeout=15))
        out.append(event)
        if event["type"] in TERMINAL:
            return out
    raise AssertionError("no terminal event")


def check_events(events: list[dict[str, Any]]) -> None:
    last = events[-1]
    event(f"ws {last['type']} {last.get('status', '')}".strip())
    assert [e["sequence_number"] for e in events] == list(range(len(events))) or last["type"] == "error", events
    if last["type"] == "error":
        assert 400 <= last["status"] < 500, last
        assert set(last["error"]) == ERROR_KEYS and last["message"], last
        assert "unexpectedly" not in last["message"], last
    else:
        assert last["type"] in ("response.completed", "response.incomplete"), last


ws_events = st.one_of(
    resp_bodies.map(lambda b: {"type": "response.create", **b}),
    resp_bodies.map(lambda b: {"type": "response.create", **b, "generate": False}),
    st.fixed_dictionaries(
        {"type": st.one_of(st.sampled_from(["response.cancel", "session.update", "", "response.create "]), any_json)}
    ),
    any_json,
)
frames = st.one_of(
    ws_events.map(lambda e: ("text", json.dumps(e))),
    ws_events.map(lambda e: ("binary", json.dumps(e).encode())),
    st.text(max_size=200).map(lambda t: ("text", t)),
    st.binary(max_size=200).map(lambda b: ("binary", b)),
)


@settings(FUZZ, max_examples=100)
@given(sent=st.lists(frames, min_size=1, max_size=4))
def test_websocket_frames(stack: Stack, sent: list[tuple[str, str | bytes]]) -> None:
    with connect(ws_url(stack), open_timeout=10, close_timeout=5, max_size=None) as ws:
        for _kind, frame in sent:
            ws.send(frame)
            try:
                events = answers(ws)
            except ConnectionClosed as closed:
                pytest.fail(f"socket closed ({closed.rcvd}) after a frame within the cap: {frame!r:.200}")
            check_events(events)


@settings(FUZZ, max_examples=10)
@given(kind=st.sampled_from(["text", "binary"]), size=st.integers(FRAME_CAP + 1, 4 * FRAME_CAP))
def test_websocket_frame_over_cap_closes_1009(stack: Stack, kind: str, size: int) -> None:
    payload = json.dumps({"type": "response.create", "model": "auto", "input": "x" * size})
    with connect(ws_url(stack), open_timeout=10, close_timeout=5, max_size=None) as ws:
        ws.send(payload if kind == "text" else payload.encode())
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009, closed.value


# ------------------------------------------------------------------------------ caps


@settings(FUZZ, max_examples=10)
@given(
    path=st.sampled_from(["/v1/chat/completions", "/v1/responses"]),
    size=st.integers(BODY_CAP + 1, 4 * BODY_CAP),
    chunked=st.booleans(),
)
def test_body_over_cap_is_413(stack: Stack, http: httpx.Client, path: str, size: int, chunked: bool) -> None:
    key = "messages" if path.endswith("completions") else "input"
    raw = orjson.dumps({"model": "auto", key: [{"role": "user", "content": "x" * size}]})

    def pieces() -> Iterator[bytes]:  # no content-length: the cap applies while reading
        for i in range(0, len(raw), 8192):
            yield raw[i : i + 8192]

    resp = http.post(path, content=pieces() if chunked else raw, headers={"content-type": "application/json"})
    assert resp.status_code == 413, resp.status_code
    err = orjson.loads(resp.content)["error"]
    assert set(err) == ERROR_KEYS and err["code"] == "body_too_large"


def test_concurrency_cap_is_503_with_retry_after_on_every_transport() -> None:
    """One slot: while a slow call holds it, chat and Responses (HTTP) get 503 + Retry-After and a
    WebSocket `response.create` gets an `error` event with status 503; the slot frees afterwards."""
    slow = FakeConfig(seed=1, delay_ms=800)
    with Stack(fast=slow, full=slow, settings={"max_concurrency": 1}) as stack, httpx.Client(timeout=20) as client:
        holder = threading.Thread(
            target=lambda: client.post(
                stack.url + "/chat/completions",
                json={"model": "auto", "messages": [{"role": "user", "content": "hold"}]},
            ),
            daemon=True,
        )
        holder.start()
        for _ in range(300):  # bounded: 3 s for the slot to be taken
            if stack.inflight() == 1:
                break
            time.sleep(0.01)
        assert stack.inflight() == 1
        for path, body in (
            ("/chat/completions", {"model": "auto", "messages": [{"role": "user", "content": "x"}]}),
            ("/chat/completions", {"model": "auto", "messages": [{"role": "user", "content": "x"}], "stream": True}),
            ("/responses", {"model": "auto", "input": "x"}),
            ("/responses", {"model": "auto", "input": "x", "stream": True}),
        ):
            resp = client.post(stack.url + path, json=body)
            assert resp.status_code == 503, (path, resp.status_code)
            assert resp.headers["retry-after"] == "1" and resp.headers["x-should-retry"] == "true"
            err = resp.json()["error"]
            assert set(err) == ERROR_KEYS and err["type"] == "overloaded_error" and err["code"] == "overloaded"
        with connect(ws_url(stack), open_timeout=10, close_timeout=5) as ws:
            ws.send(json.dumps({"type": "response.create", "model": "auto", "input": "x"}))
            [event] = answers(ws)
            assert event["type"] == "error" and event["status"] == 503 and event["code"] == "overloaded", event
        holder.join(10)
        assert not holder.is_alive()
        assert stack.inflight() == 0
        assert client.post(stack.url + "/responses", json={"model": "auto", "input": "x"}).status_code == 200

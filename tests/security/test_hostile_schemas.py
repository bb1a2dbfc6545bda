"""Client tool schemas can never stall the proxy.

catastrophic pattern   `^(a+)+$` against "aaa…a!" runs in linear time: the answer is judged and
                       the proxy stays responsive (a backtracking engine needs minutes)
lookaround pattern     accepted and checked (bounded backtracking)
pattern too large      a regex the linear engine refuses within `max_pattern_bytes`: 400
                       `schema_too_costly` when the request arrives; no upstream is called
schema too large       over `max_schema_bytes`: the same 400
remote `$ref`          never fetched
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp import web

from tests.api.helpers import assert_error_body, get, post
from tests.conftest import policy_text, serve_app, upstream_app
from tests.fault.test_hostile_upstream import tripped


def tool(parameters: dict[str, Any], name: str = "lookup") -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


def string_arg(**keywords: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"q": {"type": "string", **keywords}}, "required": ["q"]}


@pytest.fixture
async def answering() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A tier that calls the first offered tool with `{"q": <the user's message>}`; the requests it got."""
    seen: list[dict[str, Any]] = []

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        name = body["tools"][0]["function"]["name"]
        args = orjson.dumps({"q": body["messages"][-1]["content"]}).decode()
        call = {"id": "call_1", "type": "function", "function": {"name": name, "arguments": args}}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
        return web.json_response({"id": "c1", "object": "chat.completion", "model": "m", "choices": [choice]})

    async with serve_app(upstream_app({"/v1/chat/completions": chat})) as url:
        yield url, seen


def ask(text: str, tools: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "auto", "messages": [{"role": "user", "content": text}], "tools": tools}


@pytest.mark.timeout(60)
async def test_a_catastrophic_pattern_is_checked_in_linear_time(answering, proxy_) -> None:
    url, _ = answering
    proxy = await proxy_(policy_text(url, extra="escalation: {to: full, max_attempts: 2}\n"))
    body = ask("a" * 40 + "!", [tool(string_arg(pattern="^(a+)+$"))])
    call = asyncio.create_task(post(proxy.url + "/chat/completions", body))
    health = await get(proxy.base + "/healthz")  # answered while the call is judged
    assert health.status == 200
    async with asyncio.timeout(10):
        raw = await call
    # "aaa…a!" does not match ^(a+)+$, on every attempt: a retryable error, nothing delivered
    error = assert_error_body(raw, 502, code="checks_failed")
    assert "schema_violation" in error["message"]


async def test_a_lookaround_pattern_is_accepted_and_checked(answering, proxy_) -> None:
    url, _ = answering
    proxy = await proxy_(policy_text(url, extra="escalation: {to: full, max_attempts: 2}\n"))
    schema = string_arg(pattern=r"^(?!\.)(?!.*\.\.)[a-z.]+$")  # as zod writes e-mail-like checks
    ok = await post(proxy.url + "/chat/completions", ask("ab.cd", [tool(schema)]))
    assert ok.status == 200 and ok.headers["x-router-mistakes"] == ""
    bad = await post(proxy.url + "/chat/completions", ask(".ab", [tool(schema)]))
    assert "schema_violation" in assert_error_body(bad, 502, code="checks_failed")["message"]


@pytest.mark.parametrize(
    "parameters",
    [
        string_arg(pattern=r"[\w\W]{50000}"),  # Python reads it; too large for the linear engine
        {"type": "object", "patternProperties": {r"^x[\w\W]{50000}$": {"type": "string"}}},
        {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "d" * 100} for i in range(400)}},
    ],
    ids=["pattern", "pattern-properties", "schema-size"],
)
async def test_a_schema_too_costly_is_a_400_at_request_time(answering, proxy_, parameters) -> None:
    url, seen = answering
    proxy = await proxy_(policy_text(url), max_schema_bytes=32 * 1024)
    raw = await post(proxy.url + "/chat/completions", ask("hi", [tool(string_arg()), tool(parameters, "costly")]))
    error = assert_error_body(raw, 400, code="schema_too_costly")
    assert error["param"] == "tools" and "'costly'" in error["message"]
    assert seen == []  # refused before any tier was called
    assert await tripped(proxy.base, "schema_too_costly") == 1
    again = await post(proxy.url + "/chat/completions", ask("hi", [tool(parameters, "costly")]))
    assert again.status == 400  # from the cache of compiled schemas
    assert proxy.runtime.validator.compiled == 2


async def test_an_invalid_pattern_is_not_checked_rather_than_refused(answering, proxy_) -> None:
    url, _ = answering
    proxy = await proxy_(policy_text(url))
    raw = await post(proxy.url + "/chat/completions", ask("x", [tool(string_arg(pattern="(("))]))
    assert raw.status == 200 and raw.headers["x-router-mistakes"] == ""


async def test_a_remote_ref_is_never_fetched(answering, proxy_) -> None:
    url, _ = answering
    fetched: list[str] = []

    async def schema(request: web.Request) -> web.Response:
        fetched.append(request.path)
        return web.json_response({"type": "integer"})

    app = web.Application()
    app.router.add_get("/schema.json", schema)
    async with serve_app(app) as other:
        proxy = await proxy_(policy_text(url))
        ref = other.removesuffix("/v1") + "/schema.json"
        parameters = {"type": "object", "properties": {"q": {"$ref": ref}}}
        raw = await post(proxy.url + "/chat/completions", ask("x", [tool(parameters)]))
        assert raw.status == 200
    assert fetched == []

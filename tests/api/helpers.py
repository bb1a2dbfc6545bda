"""Helpers shared by the integration tests: tools, clients, raw HTTP/SSE, fake request logs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import openai
import orjson
import pytest

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
READ_FILE = {
    "type": "function",
    "function": {
        "name": "read_file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
}
TOOLS = [WEATHER]
TOOL_NAMES = {"get_weather"}
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
ERROR_KEYS = {"message", "type", "param", "code"}
BAD_KINDS = ("invalid_json", "unknown_tool", "schema_violation", "missing_tool_call", "text_tool_call")


def client(url: str, api_key: str = "x", **kwargs: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url, api_key=api_key, max_retries=0, **kwargs)


def with_key(policy: str, tier: str, key: str) -> str:
    """Add `api_key: key` to a tier of a `policy_text()` policy."""
    marker = f"    model: openai/{tier}-model\n"
    assert marker in policy
    return policy.replace(marker, f"{marker}    api_key: {key}\n", 1)


def root(fake_url: str) -> str:
    return fake_url.removesuffix("/v1")


async def fake_requests(fake_url: str, path: str = "/v1/chat/completions") -> list[dict[str, Any]]:
    """The chat requests a fake upstream received (its warm-up GETs left out)."""
    async with aiohttp.ClientSession() as s, s.get(root(fake_url) + "/_fake/requests") as r:
        log = await r.json()
    return [e for e in log if e["path"] == path and e["method"] == "POST"]


@dataclass
class Raw:
    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


async def post(url: str, body: Any = None, *, data: bytes | None = None, headers: dict[str, str] | None = None) -> Raw:
    payload = data if data is not None else orjson.dumps(body)
    hdrs = {"content-type": "application/json", **(headers or {})}
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout) as s, s.post(url, data=payload, headers=hdrs) as r:
        return Raw(r.status, {k.lower(): v for k, v in r.headers.items()}, await r.read())


async def get(url: str, headers: dict[str, str] | None = None) -> Raw:
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout) as s, s.get(url, headers=headers or {}) as r:
        return Raw(r.status, {k.lower(): v for k, v in r.headers.items()}, await r.read())


def sse(raw: bytes) -> tuple[list[Any], list[bytes], bool]:
    """(data payloads as JSON, comment lines after ':', saw [DONE]) of an SSE body."""
    data: list[Any] = []
    comments: list[bytes] = []
    done = False
    for event in raw.split(b"\n\n"):
        for line in event.split(b"\n"):
            if line.startswith(b"data: "):
                payload = line[6:]
                if payload == b"[DONE]":
                    done = True
                else:
                    data.append(orjson.loads(payload))
            elif line.startswith(b":"):
                comments.append(line[1:].strip())
    return data, comments, done


def trailer(raw: bytes) -> dict[str, Any]:
    """The `: router {json}` comment of a proxied stream."""
    _, comments, _ = sse(raw)
    found = [c for c in comments if c.startswith(b"router ")]
    assert len(found) == 1, comments
    return orjson.loads(found[0][len(b"router ") :])  # type: ignore[no-any-return]


def assert_error_body(raw: Raw, status: int, *, type_: str | None = None, code: str | None = None) -> dict[str, Any]:
    assert raw.status == status, (raw.status, raw.body)
    assert raw.headers["content-type"].startswith("application/json")
    body = raw.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == ERROR_KEYS, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    if type_ is not None:
        assert body["error"]["type"] == type_, body
    if code is not None:
        assert body["error"]["code"] == code, body
    return body["error"]  # type: ignore[no-any-return]


def assert_valid_weather_call(name: str, arguments: str) -> None:
    assert name in TOOL_NAMES
    args = orjson.loads(arguments)
    assert isinstance(args, dict) and isinstance(args.get("city"), str)


async def stream_reassembled(stream: Any) -> dict[str, Any]:
    """Consume an SDK AsyncStream; return ids, finish reasons, content and assembled tool calls."""
    ids: set[str] = set()
    finishes: list[str] = []
    content = ""
    calls: dict[int, dict[str, str]] = {}
    usage = None
    n = 0
    async for chunk in stream:
        n += 1
        assert n < 10_000
        ids.add(chunk.id)
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.finish_reason:
                finishes.append(choice.finish_reason)
            delta = choice.delta
            content += delta.content or ""
            for tc in delta.tool_calls or []:
                call = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                if tc.id:
                    assert not call["id"], "a tool call's id sent twice"
                    call["id"] = tc.id
                if tc.function is not None:
                    call["name"] += tc.function.name or ""
                    call["arguments"] += tc.function.arguments or ""
    return {"ids": ids, "finishes": finishes, "content": content, "calls": calls, "usage": usage}


@pytest.fixture
async def sdk() -> AsyncIterator[Callable[..., openai.AsyncOpenAI]]:
    """Factory of openai SDK clients (`sdk(url, api_key=...)`), closed after the test."""
    made: list[openai.AsyncOpenAI] = []

    def make(url: str, api_key: str = "x", **kwargs: Any) -> openai.AsyncOpenAI:
        c = client(url, api_key, **kwargs)
        made.append(c)
        return c

    yield make
    for c in made:
        await c.close()

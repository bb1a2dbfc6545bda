"""OpenAI-compatible tiers (llama.cpp, vLLM, Ollama, SGLang, OpenAI): a pooled aiohttp pass-through.

One `aiohttp.ClientSession` per tier, keep-alive connections opened at start-up, bodies encoded
once with orjson. Timeouts: `connect` for the TCP connection, `first_token` until the headers
(JSON) or the first SSE event (stream), `total` — and the pipeline's deadline — for everything.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, NoReturn

import aiohttp
import orjson

from router.errors import UpstreamError, UpstreamStatus, UpstreamTimeout, upstream_text
from router.policy.model import Tier
from router.upstream.base import Chunk, Reply

log = logging.getLogger("router.upstream")

_DONE = b"[DONE]"


class OpenAICompatUpstream:
    def __init__(self, tier: str, config: Tier) -> None:
        self.tier = tier
        self.config = config
        self.url = config.api_base.rstrip("/") + "/chat/completions" if config.api_base else ""
        key = config.api_key.get_secret_value() if config.api_key else ""
        self._secrets = (key,) if key else ()
        self._headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
        if key and key != "none":
            self._headers["authorization"] = f"Bearer {key}"
        self._session: aiohttp.ClientSession | None = None

    async def start(self, warm: bool = True) -> None:
        connector = aiohttp.TCPConnector(
            limit=self.config.max_connections, limit_per_host=0, keepalive_timeout=75, ttl_dns_cache=300
        )
        self._session = aiohttp.ClientSession(
            connector=connector, headers=self._headers, json_serialize=lambda o: orjson.dumps(o).decode()
        )
        if warm and self.config.warm_connections:
            await self.warm()

    async def warm(self) -> int:
        """Open `warm_connections` keep-alive connections (GET /models). Returns how many answered."""
        assert self._session is not None
        url = self.config.api_base.rstrip("/") + "/models" if self.config.api_base else ""
        timeout = aiohttp.ClientTimeout(total=self.config.timeouts.connect + 2)

        async def one() -> bool:
            try:
                async with self._session.get(url, timeout=timeout) as resp:  # type: ignore[union-attr]
                    await resp.read()
                    return resp.status < 500
            except (aiohttp.ClientError, TimeoutError, ValueError):
                return False

        ok = sum(await asyncio.gather(*(one() for _ in range(self.config.warm_connections))))
        if not ok:
            log.warning("tier %s: no answer from its server at start-up; will retry on first call", self.tier)
        return ok

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _payload(self, body: dict[str, Any], stream: bool) -> bytes:
        out = {**self.config.defaults, **body, **self.config.params, "model": self.config.upstream_model}
        if "tool_choice" not in body and not body.get("tools"):
            out.pop("tool_choice", None)  # a default tool_choice means nothing, and is an error, without tools
        if stream:
            out["stream"] = True
        else:
            out.pop("stream", None)
            out.pop("stream_options", None)
        return orjson.dumps(out)

    def _timeout(self, deadline: float) -> aiohttp.ClientTimeout:
        t = self.config.timeouts
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            raise UpstreamTimeout(f"tier {self.tier!r}: no time left before the call's deadline", tier=self.tier)
        return aiohttp.ClientTimeout(total=min(t.total, remaining), sock_connect=t.connect)

    def _fail(self, exc: BaseException) -> NoReturn:
        if isinstance(exc, UpstreamError):
            raise exc
        if isinstance(exc, TimeoutError | aiohttp.ServerTimeoutError):
            raise UpstreamTimeout(f"tier {self.tier!r} timed out", tier=self.tier) from None
        if isinstance(exc, aiohttp.ClientConnectorError):
            raise UpstreamError(f"tier {self.tier!r} is unreachable", tier=self.tier) from None
        if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
            raise UpstreamError(f"tier {self.tier!r} closed the connection", tier=self.tier) from None
        raise UpstreamError(f"tier {self.tier!r} failed ({type(exc).__name__})", tier=self.tier) from None

    async def _error_status(self, resp: aiohttp.ClientResponse) -> NoReturn:
        raw = await resp.content.read(4096)
        try:
            message = str(orjson.loads(raw)["error"]["message"])
        except (orjson.JSONDecodeError, KeyError, TypeError, IndexError):
            message = raw.decode("utf-8", "replace")
        message = upstream_text(message, self._secrets)
        raise UpstreamStatus(
            f"tier {self.tier!r} answered HTTP {resp.status}: {message}",
            tier=self.tier,
            upstream_status=resp.status,
        )

    async def complete(self, body: dict[str, Any], deadline: float) -> Reply:
        assert self._session is not None, "start() first"
        try:
            async with asyncio.timeout(self.config.timeouts.first_token):
                resp = await self._session.post(
                    self.url, data=self._payload(body, False), timeout=self._timeout(deadline)
                )
            async with resp:
                if resp.status >= 400:
                    await self._error_status(resp)
                raw = await resp.read()
        except Exception as exc:  # every failure becomes an UpstreamError without secrets
            self._fail(exc)
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise UpstreamError(f"tier {self.tier!r} answered with invalid JSON", tier=self.tier) from None
        if not isinstance(data, dict):
            raise UpstreamError(f"tier {self.tier!r} answered with a non-object", tier=self.tier)
        if problem := _malformed(data, "message"):
            raise UpstreamError(f"tier {self.tier!r} answered with a malformed completion ({problem})", tier=self.tier)
        return Reply(data, raw)

    async def stream(self, body: dict[str, Any], deadline: float) -> AsyncIterator[Chunk]:
        assert self._session is not None, "start() first"
        resp: aiohttp.ClientResponse | None = None
        try:
            async with asyncio.timeout(self.config.timeouts.first_token):
                resp = await self._session.post(
                    self.url, data=self._payload(body, True), timeout=self._timeout(deadline)
                )
                if resp.status >= 400:
                    await self._error_status(resp)
                events = _sse_events(resp.content)
                first = await anext(events, None)
        except BaseException as exc:
            if resp is not None:
                resp.close()
            if not isinstance(exc, Exception):
                raise
            self._fail(exc)
        heads: dict[int, str] = {}  # tool-call index → id, to drop repeated call heads
        try:
            async with resp:
                item = first
                while item is not None:
                    event, more = item
                    if event == _DONE:
                        return
                    chunk = _without_repeated_heads(self._chunk(event), heads)
                    chunk.more = more
                    yield chunk
                    item = await anext(events, None)
        except Exception as exc:
            self._fail(exc)
        finally:
            await events.aclose()

    def _chunk(self, raw: bytes) -> Chunk:
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise UpstreamError(f"tier {self.tier!r} sent a malformed SSE event", tier=self.tier) from None
        if not isinstance(data, dict):
            raise UpstreamError(f"tier {self.tier!r} sent a non-object SSE event", tier=self.tier)
        if "error" in data and "choices" not in data:
            message = upstream_text(str((data.get("error") or {}).get("message", "")), self._secrets)
            raise UpstreamError(f"tier {self.tier!r} sent an error event: {message}", tier=self.tier)
        if problem := _malformed(data, "delta"):
            raise UpstreamError(f"tier {self.tier!r} sent a malformed SSE event ({problem})", tier=self.tier)
        return Chunk(data, raw)


def _malformed(data: dict[str, Any], part: str) -> str | None:
    """What makes an answer (`part` "message") or a chunk ("delta") unusable: a field the router reads
    with the wrong type. Missing fields are not malformed (the checks judge what is missing)."""
    choices = data.get("choices")
    if choices is None:
        return None
    if not isinstance(choices, list):
        return "'choices' is not an array"
    for choice in choices:
        if not isinstance(choice, dict):
            return "a choice is not an object"
        inner = choice.get(part)
        if inner is None:
            continue
        if not isinstance(inner, dict):
            return f"'{part}' is not an object"
        calls = inner.get("tool_calls")
        if calls is None:
            continue
        if not isinstance(calls, list) or not all(
            isinstance(c, dict) and isinstance(c.get("function") or {}, dict) for c in calls
        ):
            return "'tool_calls' is not an array of call objects"
    return None


def _without_repeated_heads(chunk: Chunk, heads: dict[int, str]) -> Chunk:
    """OpenAI sends a tool call's id and name once, in its first delta; some servers (llama.cpp's
    Python server) repeat them in every delta, which clients would concatenate into `namename…`.
    Drop the repeats so that everything downstream sees standard deltas."""
    choices = chunk.data.get("choices")
    if not choices or not isinstance(choices[0], dict):
        return chunk
    calls = (choices[0].get("delta") or {}).get("tool_calls")
    if not calls:
        return chunk
    changed = False
    for tc in calls:
        if not isinstance(tc, dict) or not (call_id := tc.get("id")):
            continue
        index = tc.get("index", 0)
        if heads.get(index) == call_id:
            tc.pop("id")
            tc.pop("type", None)
            if isinstance(fn := tc.get("function"), dict):
                fn.pop("name", None)
            changed = True
        else:
            heads[index] = call_id
    return Chunk(chunk.data, None) if changed else chunk


async def _sse_events(content: aiohttp.StreamReader) -> AsyncGenerator[tuple[bytes, bool], None]:
    """(`data:` payload, more already received) per SSE event, reading whatever has arrived at once."""
    lines: list[bytes] = []
    rest = b""
    while True:
        block = await content.readany()
        if not block:
            break
        parts = (rest + block).split(b"\n")
        rest = parts.pop()
        ready: list[bytes] = []
        for line in parts:
            line = line.rstrip(b"\r")
            if not line:
                if lines:
                    ready.append(b"\n".join(lines))
                    lines = []
            elif line.startswith(b"data:"):
                lines.append(line[5:].lstrip(b" "))
        last = len(ready) - 1
        for i, event in enumerate(ready):
            yield event, i < last
    if rest.startswith(b"data:"):
        lines.append(rest[5:].lstrip(b" "))
    if lines:
        yield b"\n".join(lines), False

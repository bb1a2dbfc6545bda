"""What the pooled aiohttp tiers share: one keep-alive pool per tier, warmed at start-up, deadlines,
failures turned into `UpstreamError`s without secrets, and an SSE reader.

    PooledHTTP         base of OpenAICompatUpstream (openai_compat.py) and AnthropicUpstream (anthropic.py):
                       post_json (a whole answer), post_events (an SSE stream), each with the
                       tier's own `convert` of what came back; a refused request the tier's
                       `again` can change is sent once more so (router/upstream/resend.py)
    (the SSE reader, `sse_events`, and the `Oversized` bound: router/upstream/sse.py)

Bounds (`Limits`, from router/settings.py): a JSON answer or one SSE event over `max_body_bytes`, and
a stream whose text and tool-call arguments add up to more than `max_answer_chars`, are an
`UpstreamError` (which escalates) — a tier that never stops sending costs a bounded amount of memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping
from typing import Any, NoReturn, TypeVar

import aiohttp
import orjson
from yarl import URL

from router.errors import ContextExceeded, UpstreamError, UpstreamStatus, UpstreamTimeout, upstream_text
from router.policy.model import Tier
from router.upstream.base import Chunk, Limits, Reply, Speed
from router.upstream.context import exceeded
from router.upstream.sse import Oversized, sse_events

log = logging.getLogger("router.upstream")

_DONE = b"[DONE]"
T = TypeVar("T")


class _Connector(aiohttp.TCPConnector):
    """aiohttp's connector, but a plain (no TLS) connection to one IPv4 address is the event loop's
    own `create_connection`: aiohttp's way (happy eyeballs, then `sock_connect`) makes uvloop resolve
    even a numeric address in libuv's thread pool, about twice the CPU per new connection — paid
    again whenever a call is cut off (a client that leaves, an endless answer). Hooks aiohttp's
    (pinned) connector; tests/upstream/test_connections.py checks the path and its failures."""

    # private API: aiohttp-connector, see docs/architecture.md
    async def _wrap_create_connection(self, *args: Any, addr_infos: list[Any], **kwargs: Any) -> Any:
        family, _, proto, _, address = addr_infos[0]
        if len(addr_infos) != 1 or family != socket.AF_INET or kwargs.get("ssl") or self._local_addr_infos:
            return await super()._wrap_create_connection(*args, addr_infos=addr_infos, **kwargs)
        host, port = address
        return await self._wrap_existing_connection(*args, host=host, port=port, family=family, proto=proto, **kwargs)


class PooledHTTP:
    """A tier's aiohttp session. Subclasses set `url` (where calls go), `warm_urls` (one per server)
    and `_headers`."""

    url = ""
    warm_urls: tuple[str, ...] = ()

    def __init__(self, tier: str, config: Tier, limits: Limits | None = None) -> None:
        self.tier = tier
        self.config = config
        self.limits = limits or Limits()
        key = config.api_key.get_secret_value() if config.api_key else ""
        self._key = key if key != "none" else ""
        self._secrets = (key,) if key else ()
        self._headers: dict[str, str] = {"content-type": "application/json"}
        self._session: aiohttp.ClientSession | None = None
        self._urls: dict[str, URL] = {}  # parsed once, not on every call
        self._connect_timeout = aiohttp.ClientTimeout(total=None, sock_connect=config.timeouts.connect)
        self.last_used = 0.0  # event-loop time a call (or warm-up) last started or ended
        self.busy = 0  # calls in flight

    async def start(self, warm: bool = True) -> None:
        """Open the pool; `warm`: open `warm_connections` now (a server that does not answer yet is
        logged, and tried again by the first call)."""
        connector = _Connector(
            limit=self.config.max_connections, limit_per_host=0, keepalive_timeout=75, ttl_dns_cache=300
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            headers=self._headers,
            json_serialize=lambda o: orjson.dumps(o).decode(),
            cookie_jar=aiohttp.DummyCookieJar(),  # an upstream's cookies must never reach another client's call
        )
        if warm and self.config.warm_connections and not await self.warm():
            log.warning("tier %s: no answer from its server at start-up; will retry on the first call", self.tier)

    async def warm(self) -> int:
        """Open `warm_connections` keep-alive connections to each server (GET its `warm_urls` entry).
        Returns how many answered."""
        assert self._session is not None
        timeout = aiohttp.ClientTimeout(total=self.config.timeouts.connect + 2)

        async def one(url: str) -> bool:
            try:
                async with self._session.get(url, timeout=timeout) as resp:  # type: ignore[union-attr]
                    body = await self._body(resp)  # bounded as an answer is: a server's list of models may not be
                    if resp.status == 200:
                        self._warmed(body)
                    return resp.status < 500
            except Oversized as exc:
                self.limits.tripped(exc.limit)
                return False
            except (aiohttp.ClientError, TimeoutError, ValueError):
                return False

        self.last_used = asyncio.get_running_loop().time()
        return sum(
            await asyncio.gather(*(one(url) for url in self.warm_urls for _ in range(self.config.warm_connections)))
        )

    def _warmed(self, body: bytes) -> None:
        """What a server answered to a warm-up (its model list), for a subclass to learn from."""

    async def keep_warm(self) -> None:
        """Use the warm connections again whenever the tier has been idle — no call in flight, none
        started — for `keep_warm` seconds: servers (and aiohttp, after 75 s) close idle keep-alive
        connections, and the next call would pay TCP (and TLS) set-up again. A server that stops
        answering is logged once, and once more when it answers again. Runs until cancelled."""
        every = self.config.keep_warm
        if every <= 0 or self.config.warm_connections <= 0:
            return
        loop = asyncio.get_running_loop()
        answering = True
        while True:
            wait = every - (loop.time() - self.last_used)
            if self.busy:  # a call is in flight (and keeps a connection warm): look again later
                wait = max(wait, min(every, 1.0))
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            if bool(await self.warm()) != answering:
                answering = not answering
                state = "answers again" if answering else "does not answer keep-warm requests"
                (log.info if answering else log.warning)("tier %s: its server %s", self.tier, state)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def again(self, refused: UpstreamStatus, data: bytes) -> tuple[bytes, str | None] | None:
        """A refused request's body, changed so the upstream takes it, and why the answer's speed
        then fell back (None: it did not); None (here, always): nothing to change. post_json and
        post_events send the changed body once, before anything was read (router/upstream/resend.py)."""
        return None

    async def post_json(
        self,
        url: str,
        data: bytes,
        deadline: float,
        convert: Callable[[bytes, dict[str, Any]], Reply],
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        """POST, read a whole JSON object and `convert(raw, parsed)` it. `first_token` bounds the
        wait for the headers, `total` (or the call's deadline, if sooner) the whole: one timer,
        moved once the headers are in unless the whole body came with them (reading it then cannot
        wait); every failure, a conversion that fails included, is an `UpstreamError` without secrets.
        Refused, sent once more as `again` changes it."""
        try:
            return await self._post_json(url, data, deadline, convert, headers)
        except UpstreamStatus as exc:
            if (changed := self.again(exc, data)) is None:
                raise
        reply = await self._post_json(url, changed[0], deadline, convert, headers)
        if (reason := changed[1]) is not None:
            reply.speed = Speed(reply.speed.served if reply.speed is not None else "default", reason)
        return reply

    async def _post_json(
        self,
        url: str,
        data: bytes,
        deadline: float,
        convert: Callable[[bytes, dict[str, Any]], Reply],
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        assert self._session is not None, "start() first"
        now = asyncio.get_running_loop().time()
        end = min(now + self.config.timeouts.total, deadline)
        if end <= now:
            raise UpstreamTimeout(f"tier {self.tier!r}: no time left before the call's deadline", tier=self.tier)
        try:
            with self._in_flight():
                async with asyncio.timeout_at(min(now + self.config.timeouts.first_token, end)) as limit:
                    resp = await self._session.post(self._url(url), data=data, headers=headers,
                                                    timeout=self._connect_timeout)  # fmt: skip
                    if not resp.content.is_eof():
                        limit.reschedule(end)
                    async with resp:
                        if resp.status >= 400:
                            await self._error_status(resp)
                        raw = await self._body(resp)
        except Exception as exc:
            raise self._failure(exc) from None
        try:
            parsed = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise UpstreamError(f"tier {self.tier!r} answered with invalid JSON", tier=self.tier) from None
        if not isinstance(parsed, dict):
            raise UpstreamError(f"tier {self.tier!r} answered with a non-object", tier=self.tier)
        return self._converted(convert, raw, parsed)

    async def post_events(
        self,
        url: str,
        data: bytes,
        deadline: float,
        convert: Callable[[bytes], Chunk],
        headers: Mapping[str, str] | None = None,
    ) -> AsyncGenerator[Chunk, None]:
        """POST, read an SSE stream up to `[DONE]` or its end, and `convert` each event's `data:`
        payload to a chunk (`more` set when the next event was already received). `first_token`
        bounds the wait for the first event; failures are `UpstreamError`s; closing the iterator
        closes the connection. Refused, sent once more as `again` changes it."""
        assert self._session is not None, "start() first"
        with self._in_flight():
            reason: str | None = None  # why the answer's speed fell back, when `again` changed the request
            for sent in range(2):
                resp: aiohttp.ClientResponse | None = None
                try:
                    async with asyncio.timeout(self.config.timeouts.first_token):
                        resp = await self._session.post(self._url(url), data=data, headers=headers,
                                                        timeout=self._timeout(deadline))  # fmt: skip
                        if resp.status >= 400:
                            await self._error_status(resp)
                        events = sse_events(resp.content, self.limits.max_body_bytes)
                        first = await anext(events, None)
                    break
                except BaseException as exc:
                    if resp is not None:
                        resp.close()
                    if not isinstance(exc, Exception):
                        raise
                    if sent or not isinstance(exc, UpstreamStatus) or (changed := self.again(exc, data)) is None:
                        raise self._failure(exc) from None
                data, reason = changed
            assert resp is not None
            try:
                async with resp:
                    item = first
                    chars, limit = 0, self.limits.max_answer_chars
                    while item is not None and item[0] != _DONE:
                        chunk = self._converted(convert, item[0])
                        chunk.more = item[1]
                        if reason is not None:
                            chunk.speed = Speed(chunk.speed.served if chunk.speed is not None else "default", reason)
                        chars += answer_chars(chunk.data)
                        if chars > limit:
                            raise Oversized("upstream_answer", limit)
                        yield chunk
                        item = await anext(events, None)
            except Exception as exc:
                raise self._failure(exc) from None
            finally:
                await events.aclose()

    async def _body(self, resp: aiohttp.ClientResponse) -> bytes:
        """The whole body, refused once it passes `max_body_bytes` (a body that never ends included)."""
        limit = self.limits.max_body_bytes
        if resp.content_length is not None and resp.content_length > limit:
            raise Oversized("upstream_body", limit)
        parts: list[bytes] = []
        size = 0
        async for block in resp.content.iter_any():
            size += len(block)
            if size > limit:
                raise Oversized("upstream_body", limit)
            parts.append(block)
        return b"".join(parts)

    @contextlib.contextmanager
    def _in_flight(self) -> Iterator[None]:
        """A call is in flight (keep-warm waits) from now until the block ends; idleness counts
        from its end."""
        loop = asyncio.get_running_loop()
        self.last_used = loop.time()
        self.busy += 1
        try:
            yield
        finally:
            self.busy -= 1
            self.last_used = loop.time()

    def _converted(self, convert: Callable[..., T], *args: Any) -> T:
        """What a tier sent, read by `convert`: whatever it cannot read is the tier's failure."""
        try:
            return convert(*args)
        except UpstreamError:
            raise
        except Exception as exc:
            kind = type(exc).__name__
            raise UpstreamError(f"tier {self.tier!r} sent a malformed answer ({kind})", tier=self.tier) from None

    def _url(self, url: str) -> URL:
        if (parsed := self._urls.get(url)) is None:
            parsed = self._urls[url] = URL(url)
        return parsed

    def _timeout(self, deadline: float) -> aiohttp.ClientTimeout:
        t = self.config.timeouts
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            raise UpstreamTimeout(f"tier {self.tier!r}: no time left before the call's deadline", tier=self.tier)
        return aiohttp.ClientTimeout(total=min(t.total, remaining), sock_connect=t.connect)

    def _failure(self, exc: BaseException) -> UpstreamError:
        """What a failed call raises (`raise self._failure(exc) from None`): an `UpstreamError` as
        it is, anything else as the `UpstreamError` it means. Returned rather than raised here: a
        frame that raises an exception it holds in a local sits in that exception's traceback, a
        reference cycle that leaves the call's objects to the garbage collector."""
        if isinstance(exc, UpstreamError):
            return exc
        exc.__traceback__ = None  # never shown; its frames (aiohttp's reader holds `exc`) would be a cycle
        if isinstance(exc, Oversized):
            self.limits.tripped(exc.limit)
            what = "an answer" if exc.limit == "upstream_body" else "a stream"
            return UpstreamError(f"tier {self.tier!r} sent {what} over the limit of {exc.size}", tier=self.tier)
        if isinstance(exc, TimeoutError | aiohttp.ServerTimeoutError):
            return UpstreamTimeout(f"tier {self.tier!r} timed out", tier=self.tier)
        if isinstance(exc, aiohttp.ClientConnectorError):
            return UpstreamError(f"tier {self.tier!r} is unreachable", tier=self.tier)
        if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
            return UpstreamError(f"tier {self.tier!r} closed the connection", tier=self.tier)
        return UpstreamError(f"tier {self.tier!r} failed ({type(exc).__name__})", tier=self.tier)

    async def get_json(self, url: str, deadline: float) -> Any:
        """GET `url` and parse its JSON body, bounded as an answer is, within `connect` + 2 s and the
        deadline; None for whatever fails (a server that does not have it, or is not up)."""
        assert self._session is not None, "start() first"
        remaining = deadline - asyncio.get_running_loop().time()
        timeout = aiohttp.ClientTimeout(total=min(self.config.timeouts.connect + 2, max(remaining, 0.001)))
        try:
            with self._in_flight():
                async with self._session.get(self._url(url), timeout=timeout) as resp:
                    raw = await self._body(resp)
                    return orjson.loads(raw) if resp.status == 200 else None
        except Oversized as exc:
            self.limits.tripped(exc.limit)
        except (aiohttp.ClientError, TimeoutError, ValueError):
            pass
        return None

    async def _error_status(self, resp: aiohttp.ClientResponse) -> NoReturn:
        raw = await resp.content.read(4096)
        text = raw.decode("utf-8", "replace")
        try:
            error = orjson.loads(raw)["error"]
            message = str(error["message"])
        except (orjson.JSONDecodeError, KeyError, TypeError, IndexError):
            error = message = text
        if resp.status == 400 and (too_long := exceeded(error)) is not None:  # not the tier's fault
            raise ContextExceeded(tier=self.tier, prompt_tokens=too_long[0], window=too_long[1])
        message = upstream_text(message, self._secrets)
        raise UpstreamStatus(
            f"tier {self.tier!r} answered HTTP {resp.status}: {message}",
            tier=self.tier,
            upstream_status=resp.status,
            detail=message,
        )


def answer_chars(data: dict[str, Any]) -> int:
    """Characters of text and tool-call names and arguments in one chat chunk."""
    choices = data.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    delta = choice.get("delta") if isinstance(choice, dict) else None
    if not isinstance(delta, dict):
        return 0
    content = delta.get("content")
    n = len(content) if isinstance(content, str) else 0
    for call in delta.get("tool_calls") or ():
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            n += sum(len(v) for k in ("name", "arguments") if isinstance(v := fn.get(k), str))
    return n

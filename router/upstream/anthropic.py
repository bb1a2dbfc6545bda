"""`anthropic/*` tiers: Messages requests passed through, everything else through litellm.

A client of /v1/messages routed to an `anthropic/*` tier has its request sent as it came (the tier's
model, `defaults` and `params` applied; `anthropic-version` and `anthropic-beta` forwarded) to
`{api_base}/v1/messages` (default https://api.anthropic.com) over this tier's pooled connections,
and the answer comes back as sent: every stream event is forwarded as it arrives, with nothing
lost in translation (thinking, signatures, cache usage, server tools). Each reply and chunk also
carries its chat-completions equivalent, which is what the checks read.

But for reasoning state (router/sessions/provenance.py): the signatures and redacted data of the
thinking blocks this tier's model writes reach the client marked with that model, and of those a
request replays this tier sends only its own model's, as the model wrote them — none of another
model's, which Anthropic would refuse (a 400 that ends the session). Where that leaves a tool loop's
final assistant turn without its leading thinking block, the call is made without thinking.

Fast mode (router/upstream/speed.py): a request with `speed: "fast"` — the tier's `speed: fast`, or
the client's own — goes with the fast-mode beta among its `anthropic-beta` values; refused as not
available or over the fast-mode rate limit, it is sent once more at standard speed before anything
reached the client. Each answer says its speed (`Reply.speed`, the `Chunk.speed` of `message_start`).

Chat-completions and Responses clients routed here go through litellm (litellm_adapter.py), which
translates to and from Messages (and is not sent `speed`: they are answered at standard speed). It
is imported on the first such call, so a tier that serves only Messages clients needs no litellm;
without it, such a call fails with `ExtraMissing`, which names the extra to install.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, NamedTuple

import orjson

from router.errors import ExtraMissing, UpstreamError, UpstreamStatus, upstream_text
from router.policy.model import Tier
from router.sessions import Session
from router.sessions.provenance import MessagesMarks, mark_message, messages_request, model_tag
from router.upstream import effort
from router.upstream.base import Chunk, Limits, Native, Reply, Speed, chat_usage, native_event, token_count
from router.upstream.http import PooledHTTP
from router.upstream.litellm_adapter import LitellmUpstream
from router.upstream.messages_view import chat_message, finish_reason, messages_usage
from router.upstream.speed import fallback, messages_speed, with_fast_beta

ANTHROPIC_API = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
_STANDARD = Speed("standard")
FORWARDED_HEADERS = ("anthropic-version", "anthropic-beta")
_EFFORTS_KEPT = 8  # refused effort levels remembered per tier, at most

log = logging.getLogger("router.upstream")


class _Sent(NamedTuple):
    data: bytes
    headers: dict[str, str]
    fast: bool  # it asks for fast mode
    effort: str | None  # the effort level it sets beside thinking off


class AnthropicUpstream(PooledHTTP):
    dialects = frozenset({"messages"})

    def __init__(self, tier: str, config: Tier, limits: Limits | None = None) -> None:
        super().__init__(tier, config, limits)
        base = self.base = (config.api_bases[0] if config.api_bases else ANTHROPIC_API).rstrip("/")
        self.url, self.warm_urls = base + "/v1/messages", (base + "/v1/models",)
        self._headers.update({"accept": "application/json, text/event-stream", "anthropic-version": ANTHROPIC_VERSION})
        if self._key:
            self._headers["x-api-key"] = self._key
        self.model = config.model.split("/", 1)[1]
        self.tag = model_tag(config.model)  # the provenance of this model's thinking blocks
        self._chat = LitellmUpstream(tier, config)  # chat and Responses clients: litellm, loaded on first use
        self._refused_efforts: set[str] = set()  # effort levels this tier refused beside thinking off

    async def _translating(self) -> LitellmUpstream:
        if not await self._chat.load():
            raise ExtraMissing(
                f"tier {self.tier!r} ({self.config.model}) takes chat-completions and Responses calls through "
                "litellm, which is not installed: pip install 'agent-router[litellm]'",
                tier=self.tier,
            )
        return self._chat

    async def complete(self, body: dict[str, Any], deadline: float, session: Session | None = None) -> Reply:
        reply = await (await self._translating()).complete(body, deadline)
        reply.speed = _STANDARD  # litellm is not sent `speed`
        return reply

    async def stream(
        self, body: dict[str, Any], deadline: float, session: Session | None = None
    ) -> AsyncIterator[Chunk]:
        chunks = (await self._translating()).stream(body, deadline)
        first = True
        try:
            async for chunk in chunks:
                if first:
                    chunk.speed, first = _STANDARD, False
                yield chunk
        finally:
            await chunks.aclose()

    def _request(self, native: Native, stream: bool, plain: frozenset[str] = frozenset()) -> _Sent:
        """The request as this tier sends it; `plain` names what a refused request is sent again
        without: "speed" (at standard speed), "effort" (no effort level beside thinking off)."""
        merged = {**self.config.defaults, **native.body, **self.config.params, "model": self.model}
        if self.config.speed is not None:
            merged["speed"] = self.config.speed
        if "speed" in plain:
            merged.pop("speed", None)
        body = effort.tidy(messages_request(merged, self.tag))  # only this model's reasoning state
        level = effort.level(body)
        if level is not None and ("effort" in plain or level in self._refused_efforts):
            body, level = effort.without(body), None
        if stream:
            body["stream"] = True
        else:
            body.pop("stream", None)
        headers = {k: v for k, v in native.headers.items() if k in FORWARDED_HEADERS}
        if fast := body.get("speed") == "fast":
            headers = with_fast_beta(headers)
        return _Sent(orjson.dumps(body), headers, fast, level)

    def _again(self, exc: UpstreamStatus, sent: _Sent) -> tuple[frozenset[str], str | None] | None:
        """What a refused request is sent again without, and why (the speed's fallback); None: the
        refusal is the call's failure as any other."""
        if sent.fast and (reason := fallback(exc)) is not None:
            return frozenset({"speed"}), reason
        if sent.effort is not None and effort.refused(exc):
            if sent.effort not in self._refused_efforts and len(self._refused_efforts) < _EFFORTS_KEPT:
                self._refused_efforts.add(sent.effort)  # sent without it from now on
                log.info("tier %r takes no effort %r with thinking off: sent without it", self.tier, sent.effort[:20])
            return frozenset({"effort"}), None
        return None

    async def complete_native(self, native: Native, deadline: float, session: Session | None = None) -> Reply:
        sent = self._request(native, False)
        try:
            reply = await self.post_json(self.url, sent.data, deadline, self._message, sent.headers)
        except UpstreamStatus as exc:
            if (again := self._again(exc, sent)) is None:
                raise
        else:
            reply.speed = messages_speed((reply.native or {}).get("usage"), sent.fast)
            return reply
        plain, reason = again
        sent = self._request(native, False, plain)  # once
        reply = await self.post_json(self.url, sent.data, deadline, self._message, sent.headers)
        reply.speed = messages_speed((reply.native or {}).get("usage"), sent.fast, reason)
        return reply

    def _message(self, raw: bytes, message: dict[str, Any]) -> Reply:
        if _malformed(message, _MESSAGE_FIELDS) or not isinstance(message.get("content"), list):
            raise UpstreamError(f"tier {self.tier!r} answered with a malformed message", tier=self.tier)
        if mark_message(message, self.tag):  # its thinking blocks, marked with this model
            raw = orjson.dumps(message)
        return Reply(_completion(message), raw, native=message, usage=messages_usage(message.get("usage")))

    def stream_native(self, native: Native, deadline: float, session: Session | None = None) -> AsyncIterator[Chunk]:
        sent = self._request(native, True)
        view = MessagesEvents(self.tier, self._secrets, MessagesMarks(self.tag), sent.fast)
        events = self.post_events(self.url, sent.data, deadline, view.chunk, sent.headers)
        return self._falling_back(native, deadline, sent, events) if sent.fast or sent.effort else events

    async def _falling_back(
        self, native: Native, deadline: float, sent: _Sent, events: AsyncGenerator[Chunk, None]
    ) -> AsyncIterator[Chunk]:
        """A stream that may be refused before its first event; then the request once more, without
        what was refused (`_again`)."""
        try:
            try:
                first = await anext(events, None)
            except UpstreamStatus as exc:
                if (again := self._again(exc, sent)) is None:
                    raise
            else:
                if first is not None:
                    yield first
                async for chunk in events:
                    yield chunk
                return
        finally:
            await events.aclose()
        plain, reason = again
        sent = self._request(native, True, plain)
        view = MessagesEvents(self.tier, self._secrets, MessagesMarks(self.tag), sent.fast, reason)
        standard = self.post_events(self.url, sent.data, deadline, view.chunk, sent.headers)
        try:
            async for chunk in standard:
                yield chunk
        finally:
            await standard.aclose()

    async def context_window(self, deadline: float) -> int | None:
        """The model's `max_input_tokens` (GET /v1/models/{model}), else what litellm knows of it
        (if a chat or Responses call has loaded it: it is not imported for this)."""
        info = await self.get_json(f"{self.base}/v1/models/{self.model}", deadline)
        window = token_count(info.get("max_input_tokens")) if isinstance(info, dict) else 0
        return window or (await self._chat.context_window(deadline) if self._chat.loaded else None)

    async def count_tokens(self, body: dict[str, Any], deadline: float, native: Native | None = None) -> int | None:
        """A Messages request counted by Anthropic (POST /v1/messages/count_tokens, which calls no
        model); a chat request is not (None)."""
        if native is None or native.dialect != "messages":
            return None
        counted = messages_request({k: v for k, v in native.body.items() if k in _COUNTED}, self.tag)
        counted = {**counted, "model": self.model}
        headers = {k: v for k, v in native.headers.items() if k in FORWARDED_HEADERS}
        try:
            reply = await self.post_json(self.url + "/count_tokens", orjson.dumps(counted), deadline, _counted, headers)
        except UpstreamError:
            return None
        return token_count(reply.data.get("input_tokens")) or None


# The fields of a Messages request that count_tokens takes (the others, max_tokens among them, it refuses).
_COUNTED = frozenset({"messages", "system", "tools", "tool_choice", "thinking", "mcp_servers"})


def _counted(raw: bytes, data: dict[str, Any]) -> Reply:
    return Reply(data, raw)


# Fields the checks and the stream's framing (router/messages/events.py) read, and their types: an
# answer or an event with anything else there is malformed (the tier failed), not something to guess at.
_MESSAGE_FIELDS: dict[str, type | tuple[type, ...]] = {"content": list, "usage": dict, "stop_reason": (str, type(None))}
_EVENT_FIELDS: dict[str, type | tuple[type, ...]] = {
    "message": dict, "content_block": dict, "delta": dict, "usage": dict, "error": dict, "index": int,
}  # fmt: skip


def _malformed(data: Any, fields: dict[str, type | tuple[type, ...]]) -> bool:
    return not isinstance(data, dict) or any(k in data and not isinstance(data[k], t) for k, t in fields.items())


def _completion(message: dict[str, Any]) -> dict[str, Any]:
    """A Messages answer as the chat.completion the pipeline reads."""
    usage = message["usage"] if isinstance(message.get("usage"), dict) else {}
    return {
        "id": str(message.get("id", "")),
        "object": "chat.completion",
        "model": str(message.get("model", "")),
        "choices": [
            {"index": 0, "message": chat_message(message), "finish_reason": finish_reason(message.get("stop_reason"))}
        ],
        "usage": chat_usage(usage.get("input_tokens"), usage.get("output_tokens")),
    }


class MessagesEvents:
    """Messages stream events → the chat.completion.chunk each one amounts to (for the Gate and the
    validator), kept with the event itself in `Chunk.native`."""

    def __init__(
        self,
        tier: str,
        secrets: tuple[str, ...],
        marks: MessagesMarks | None = None,
        fast: bool = False,
        fallback: str | None = None,
    ) -> None:
        self.tier = tier
        self.secrets = secrets
        self.marks = marks  # marks the thinking blocks' signatures with the tier's model
        self.fast, self.fallback = fast, fallback  # what the request asked for, and why it is at standard speed
        self.id = ""
        self.model = ""
        self._calls: dict[int, int] = {}  # tool_use block index → tool-call index
        self._args: set[int] = set()  # tool calls whose arguments have started

    def chunk(self, raw: bytes) -> Chunk:
        event = native_event(raw, self.tier)
        if (
            _malformed(event, _EVENT_FIELDS)
            or ("message" in event and _malformed(event["message"], _MESSAGE_FIELDS))
            or ("delta" in event and _malformed(event["delta"], {"stop_reason": (str, type(None))}))
        ):
            kind = upstream_text(event["type"], self.secrets, limit=40)
            raise UpstreamError(f"tier {self.tier!r} sent a malformed {kind!r} event", tier=self.tier)
        if event["type"] == "error":
            message = upstream_text(str((event.get("error") or {}).get("message", "")), self.secrets)
            raise UpstreamError(f"tier {self.tier!r} sent an error event: {message}", tier=self.tier)
        if self.marks is not None:
            self.marks.event(event)
        delta, finish = self._delta(event)
        choices = [] if event["type"] == "message_stop" else [{"index": 0, "delta": delta, "finish_reason": finish}]
        data = {"id": self.id, "object": "chat.completion.chunk", "model": self.model, "choices": choices}
        if event["type"] == "message_start":  # its usage says the speed the answer is served at, and the prompt
            usage = (event.get("message") or {}).get("usage")
            speed = messages_speed(usage, self.fast, self.fallback)
            return Chunk(data, None, native=event, speed=speed, usage=messages_usage(usage))
        if event["type"] == "message_delta":  # the answer's output tokens
            return Chunk(data, None, native=event, usage=messages_usage(event.get("usage")))
        return Chunk(data, None, native=event)

    def _delta(self, event: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        kind = event["type"]
        if kind == "message_start":
            message = event["message"] if isinstance(event.get("message"), dict) else {}
            self.id, self.model = str(message.get("id", "")), str(message.get("model", ""))
            return {"role": "assistant"}, None
        if kind == "message_delta":
            return {}, finish_reason((event.get("delta") or {}).get("stop_reason")) or "stop"
        index = event.get("index")
        block = event.get("content_block") or {}
        if kind == "content_block_start" and block.get("type") == "tool_use" and isinstance(index, int):
            n = self._calls[index] = len(self._calls)
            function = {"name": str(block.get("name", "")), "arguments": ""}
            return {
                "tool_calls": [{"index": n, "id": str(block.get("id", "")), "type": "function", "function": function}]
            }, None
        if kind == "content_block_start" and block.get("type") == "text" and block.get("text"):
            return {"content": str(block["text"])}, None
        delta = event.get("delta") or {}
        if kind == "content_block_delta" and delta.get("type") == "text_delta":
            return {"content": str(delta.get("text", ""))}, None
        if kind == "content_block_delta" and delta.get("type") == "input_json_delta" and index in self._calls:
            if text := str(delta.get("partial_json") or ""):
                self._args.add(self._calls[index])
            return _arguments(self._calls[index], text), None
        if kind == "content_block_stop" and index in self._calls and self._calls[index] not in self._args:
            return _arguments(self._calls[index], "{}"), None  # a call without input: an empty object
        return {}, None


def _arguments(n: int, text: str) -> dict[str, Any]:
    return {"tool_calls": [{"index": n, "function": {"arguments": text}}]}

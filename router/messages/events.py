"""A pipeline stream → Anthropic Messages stream events, in the order Anthropic sends them.

    message_start, ping
    per block:   content_block_start, content_block_delta ... (text_delta | input_json_delta | the
                 native tier's own deltas), content_block_stop
    message_delta (stop_reason, usage), message_stop

Chunks from chat tiers are framed here. Chunks that carry a native tier's own event (`Chunk.native`)
keep their content as sent — thinking, signatures, citations, server tools — and only their block
`index` is renumbered, so one stream can hold the blocks of several attempts. Failures become one
`error` event, the last of the stream.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from router.errors import ContextExceeded, RouterError
from router.messages.translate import new_tool_id, usage_of
from router.upstream.base import Chunk
from router.upstream.messages_view import stop_reason

Event = dict[str, Any]

_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                503: "overloaded_error", 529: "overloaded_error"}  # fmt: skip


def error_body(exc: RouterError) -> dict[str, Any]:
    """Anthropic's error shape: `{"type": "error", "error": {"type", "message"}}` (a prompt too long
    for every tier in Anthropic's words, which Claude Code answers by compacting)."""
    kind = _ERROR_TYPES.get(exc.http_status, "invalid_request_error" if exc.http_status < 500 else "api_error")
    message = exc.anthropic_message if isinstance(exc, ContextExceeded) else exc.message
    return {"type": "error", "error": {"type": kind, "message": message}}


class MessageEvents:
    def __init__(self, message_id: str, model: str) -> None:
        self.id = message_id
        self.model = model
        self.started = False
        self.blocks = 0  # blocks opened so far: the next one's index
        self.open: int | None = None  # index of the open block
        self.stop_reason: str | None = None
        self.stop_sequence: str | None = None
        self.usage: dict[str, Any] = {"input_tokens": 0, "output_tokens": 0}
        self._text_open = False
        self._calls: dict[int, int] = {}  # chat tool-call index → block index
        self._native: dict[int, int] = {}  # the native attempt's block index → block index
        self._has_calls = False

    def feed(self, chunk: Chunk) -> list[Event]:
        if chunk.beat:  # no answer yet: the stream starts, and Anthropic's keep-alive is `ping`
            return self._start(chunk) if not self.started else [{"type": "ping"}]
        out = [] if self.started else self._start(chunk)
        if chunk.native is not None:
            return out + self._native_event(chunk.native)
        data = chunk.data
        if isinstance(data.get("usage"), dict):
            self.usage.update(usage_of(data["usage"]))
        choices = data.get("choices")
        if not choices:
            return out
        choice = choices[0]
        delta = choice.get("delta") or {}
        if text := delta.get("content"):
            if not self._text_open:
                out += self._open_block({"type": "text", "text": ""})
                self._text_open = True
            out.append(self._delta({"type": "text_delta", "text": text}))
        for i, call in enumerate(delta.get("tool_calls") or ()):
            out += self._call_delta(call.get("index", i), call)
        if fr := choice.get("finish_reason"):
            self.stop_reason = stop_reason(fr, self._has_calls)
        return out

    def _start(self, chunk: Chunk) -> list[Event]:
        self.started = True
        native = chunk.native or {}
        if native.get("type") == "message_start" and isinstance(native.get("message"), dict):
            message = {**native["message"], "id": self.id, "content": []}
            self.usage.update(message.get("usage") or {})
        else:
            model = str(chunk.data.get("model") or self.model)
            message = {"id": self.id, "type": "message", "role": "assistant", "model": model, "content": [],
                       "stop_reason": None, "stop_sequence": None, "usage": dict(self.usage)}  # fmt: skip
        return [{"type": "message_start", "message": message}, {"type": "ping"}]

    def _open_block(self, block: dict[str, Any]) -> list[Event]:
        out = self._close_block()
        self.open = self.blocks
        self.blocks += 1
        return [*out, {"type": "content_block_start", "index": self.open, "content_block": block}]

    def _close_block(self) -> list[Event]:
        if self.open is None:
            return []
        index, self.open, self._text_open = self.open, None, False
        return [{"type": "content_block_stop", "index": index}]

    def _delta(self, delta: dict[str, Any]) -> Event:
        return {"type": "content_block_delta", "index": self.open, "delta": delta}

    def _call_delta(self, index: int, call: Mapping[str, Any]) -> list[Event]:
        fn = call.get("function") or {}
        out: list[Event] = []
        if index not in self._calls:
            block = {"type": "tool_use", "id": str(call.get("id") or new_tool_id()), "name": str(fn.get("name", "")),
                     "input": {}}  # fmt: skip
            out += self._open_block(block)
            self._calls[index] = self.blocks - 1
            self._has_calls = True
        elif self.open != self._calls[index]:
            return out  # a late delta of a call whose block is closed: nothing can carry it
        if arguments := fn.get("arguments"):
            out.append(self._delta({"type": "input_json_delta", "partial_json": arguments}))
        return out

    def _native_event(self, event: Mapping[str, Any]) -> list[Event]:
        kind = event.get("type")
        if kind == "content_block_start":
            out = self._close_block()
            self.open = self._native[int(event.get("index", 0))] = self.blocks
            self.blocks += 1
            kind = (event.get("content_block") or {}).get("type")
            self._has_calls = self._has_calls or kind == "tool_use"
            self._text_open = kind == "text"  # a text delta the Joiner rewrote goes on in this block
            return [*out, {**event, "index": self.open}]
        if kind in ("content_block_delta", "content_block_stop"):
            index = self._native.get(int(event.get("index", 0)))
            if index is None:
                return []
            if kind == "content_block_stop" and self.open == index:
                self.open, self._text_open = None, False
            return [{**event, "index": index}]
        if kind == "message_delta":
            delta = event.get("delta") or {}
            self.stop_reason = delta.get("stop_reason") or self.stop_reason
            self.stop_sequence = delta.get("stop_sequence")
            self.usage.update(event.get("usage") or {})
        elif kind == "ping":
            return [{"type": "ping"}]
        elif kind == "message_start" and isinstance(event.get("message"), dict):  # a later attempt's
            self.usage.update(event["message"].get("usage") or {})
        return []  # message_start (sent already), message_stop (sent by close)

    def close(self) -> list[Event]:
        out = self._close_block()
        if self.stop_reason is None:
            self.stop_reason = "tool_use" if self._has_calls else "end_turn"
        delta = {"stop_reason": self.stop_reason, "stop_sequence": self.stop_sequence}
        out.append({"type": "message_delta", "delta": delta, "usage": self.usage})
        out.append({"type": "message_stop"})
        return out

    @staticmethod
    def error(exc: RouterError) -> Event:
        return error_body(exc)

"""Streaming without leaking mistakes.

`Gate` sits on one attempt's chunks, on every tier: content deltas pass as they arrive while
tool-call deltas, the finish chunk and usage are held; `message()` assembles the answer for the
validator, and `release()` gives back the held part once it passed. Text that opens like a call
written as text (`{`, `[`, a fence or a tag, when tools are offered) is held too, so such a leak
never reaches the client. A chunk that carries a tier's native event (`Chunk.native`) is one whole
thing of that tier's API: once one of them holds a call or the finish, it and every later one are
held whole and released as they came.

`Joiner` turns chunks from any number of attempts into one stream: one `id`, one role delta, a
blank line between the text of two attempts. Transports frame the result (SSE, WebSocket events).
A chunk it changes loses its `raw` bytes, and its native event when its text changed.
"""

from __future__ import annotations

from typing import Any

from router.upstream.base import Chunk

_SUSPECT_OPENERS = ("{", "[", "`", "<")
_KEEP = ("id", "object", "created", "model", "system_fingerprint")


class Gate:
    def __init__(self, tools_offered: bool) -> None:
        self.hold_text = tools_offered
        self.text: list[str] = []
        self.calls: dict[int, _Call] = {}  # by tool-call index
        self.finish_reason: str | None = None
        self._held: list[Chunk] = []  # role-only and suspect-text chunks, in order
        self._tail: list[Chunk] = []  # finish and usage chunks
        self._template: dict[str, Any] | None = None
        self._suspect: bool | None = None  # decided on the first non-blank text
        self._native_tail = False  # native events are being held in order, from a call or finish on

    def feed(self, chunk: Chunk) -> list[Chunk]:
        """Take one upstream chunk; return what may be sent now."""
        d = chunk.data
        if self._template is None:
            self._template = {k: d[k] for k in _KEEP if k in d}
        choices = d.get("choices")
        if not choices:  # usage-only chunk (stream_options.include_usage)
            self._tail.append(chunk)
            return []
        choice = choices[0]
        delta = choice.get("delta") or {}
        if fr := choice.get("finish_reason"):
            self.finish_reason = fr
        if delta.get("tool_calls"):
            self._add_calls(delta["tool_calls"])
        if text := delta.get("content"):
            self.text.append(text)
        if chunk.native is not None and (self._native_tail or delta.get("tool_calls") or fr):
            self._native_tail = True
            chunk.more = False
            self._tail.append(chunk)
            return []
        if delta.get("tool_calls") or fr:  # hold the call and the finish; keep this chunk's role and text
            if fr:
                self._tail.append(_with(chunk, delta={}, finish_reason=fr))
            kept = {k: delta[k] for k in ("role", "content") if delta.get(k)}
            if not kept:
                return []
            chunk = _with(chunk, delta=kept, finish_reason=None)
        chunk.more = False  # what follows may be held: never make the transport wait for it
        self._held.append(chunk)  # role-only openers wait for the first text that may be sent
        if text and self._suspect is None and text.strip():
            self._suspect = self.hold_text and text.lstrip().startswith(_SUSPECT_OPENERS)
        return self._flush() if text and self._suspect is False else []

    def _flush(self) -> list[Chunk]:
        out, self._held = self._held, []
        return out

    def _add_calls(self, deltas: list[dict[str, Any]]) -> None:
        for i, tc in enumerate(deltas):
            idx = tc.get("index", i)
            call = self.calls.get(idx)
            if call is None:
                call = self.calls[idx] = _Call()
            if tc.get("id"):
                call.id = tc["id"]
            fn = tc.get("function") or {}
            if fn.get("name"):
                call.name.append(fn["name"])
            if fn.get("arguments"):
                call.arguments.append(fn["arguments"])

    def tool_calls(self) -> list[dict[str, Any]]:
        """The calls so far, each one's name and arguments joined once."""
        return [self.calls[i].whole() for i in sorted(self.calls)]

    def message(self) -> dict[str, Any]:
        msg: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) or None}
        if self.calls:
            msg["tool_calls"] = self.tool_calls()
        return msg

    def text_held(self) -> bool:
        """Is all the text so far held back (it opened like a call), with no call nor native event?"""
        return self.hold_text and self._suspect is True and not self.calls and not self._native_tail

    def replace_text(self, content: str | None, calls: list[dict[str, Any]]) -> None:
        """Salvage (router/flow/salvage.py): the held text becomes `content` and these calls, finish tool_calls."""
        self._held = [c for c in self._held if not (c.data.get("choices") or [{}])[0].get("delta", {}).get("content")]
        if content:
            self._held.append(self._synth({"content": content}))
        self.text = [content] if content else []
        self.calls = {}
        self._add_calls([{"index": i, **call} for i, call in enumerate(calls)])
        self.finish_reason = "tool_calls"
        self._tail = [_with(c, {}, "tool_calls") if c.data.get("choices") else c for c in self._tail]

    def release(self) -> list[Chunk]:
        """After the answer passed: held text, the tool calls (whole), then finish and usage."""
        out = self._flush()
        if self.calls and not self._native_tail:
            calls = [{"index": n, **call} for n, call in enumerate(self.tool_calls())]
            out.append(self._synth({"tool_calls": calls}))
        out += self._tail
        self._tail = []
        for i, chunk in enumerate(out):  # released together: one write
            chunk.more = i < len(out) - 1
        return out

    def _synth(self, delta: dict[str, Any]) -> Chunk:
        data = {**(self._template or {}), "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        return Chunk(data)


class _Call:
    """A streamed tool call: its name and arguments as the parts that came (joined once, in `whole`)."""

    __slots__ = ("arguments", "id", "name")

    def __init__(self) -> None:
        self.id = ""
        self.name: list[str] = []
        self.arguments: list[str] = []

    def whole(self) -> dict[str, Any]:
        function = {"name": "".join(self.name), "arguments": "".join(self.arguments)}
        return {"id": self.id, "type": "function", "function": function}


def _with(chunk: Chunk, delta: dict[str, Any], finish_reason: str | None) -> Chunk:
    choice = {**chunk.data["choices"][0], "delta": delta, "finish_reason": finish_reason}
    return Chunk({**chunk.data, "choices": [choice]})


class Joiner:
    """Chunks from successive attempts → one stream: one `id`, one role delta, and a blank line
    between the text of two attempts."""

    def __init__(self) -> None:
        self.id: str | None = None
        self.sent = False
        self._role_sent = False
        self._text_sent = False
        self._separate = False

    def next_attempt(self) -> None:
        self._separate = self._text_sent

    def __call__(self, chunk: Chunk) -> Chunk:
        d = chunk.data
        changed = text_changed = False
        if self.id is None:
            self.id = d.get("id")
        elif d.get("id") != self.id:
            d = {**d, "id": self.id}
            changed = True
        choices = d.get("choices")
        if choices:
            delta = choices[0].get("delta") or {}
            if "role" in delta:
                if self._role_sent:
                    delta = {k: v for k, v in delta.items() if k != "role"}
                    changed = True
                self._role_sent = True
            if delta.get("content"):
                if self._separate:
                    delta = {**delta, "content": "\n\n" + delta["content"]}
                    self._separate = False
                    changed = text_changed = True
                self._text_sent = True
            if changed:
                d = {**d, "choices": [{**choices[0], "delta": delta}, *choices[1:]]}
        self.sent = True
        if not changed:
            return chunk
        return Chunk(d, None, more=chunk.more, native=None if text_changed else chunk.native)

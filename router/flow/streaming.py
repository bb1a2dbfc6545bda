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

from router.upstream.answer import Answer
from router.upstream.base import Chunk

_SUSPECT_OPENERS = ("{", "[", "`", "<")


class Gate:
    def __init__(self, tools_offered: bool) -> None:
        self.hold_text = tools_offered
        self.answer = Answer()  # what came so far: text, calls, finish (router/upstream/answer.py)
        self._held: list[Chunk] = []  # role-only and suspect-text chunks, in order
        self._tail: list[Chunk] = []  # finish and usage chunks
        self._suspect: bool | None = None  # decided on the first non-blank text
        self._native_tail = False  # native events are being held in order, from a call or finish on

    @property
    def finish_reason(self) -> str | None:
        return self.answer.finish_reason

    def feed(self, chunk: Chunk) -> list[Chunk]:
        """Take one upstream chunk; return what may be sent now."""
        d = chunk.data
        self.answer.add(d)
        choices = d.get("choices")
        if not choices:  # usage-only chunk (stream_options.include_usage)
            self._tail.append(chunk)
            return []
        choice = choices[0]
        delta = choice.get("delta") or {}
        fr = choice.get("finish_reason")
        text = delta.get("content")
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

    def message(self) -> dict[str, Any]:
        return self.answer.message()

    def text_held(self) -> bool:
        """Is all the text so far held back (it opened like a call), with no call nor native event?"""
        return self.hold_text and self._suspect is True and not self.answer.calls and not self._native_tail

    def replace_text(self, content: str | None, calls: list[dict[str, Any]]) -> None:
        """Salvage (router/flow/salvage.py): the held text becomes `content` and these calls, finish tool_calls."""
        self._held = [c for c in self._held if not (c.data.get("choices") or [{}])[0].get("delta", {}).get("content")]
        if content:
            self._held.append(self._synth({"content": content}))
        answer = self.answer
        answer.text = [content] if content else []
        answer.calls = {}
        answer.add_calls([{"index": i, **call} for i, call in enumerate(calls)])
        answer.finish_reason = "tool_calls"
        self._tail = [_with(c, {}, "tool_calls") if c.data.get("choices") else c for c in self._tail]

    def release(self) -> list[Chunk]:
        """After the answer passed: held text, the tool calls (whole), then finish and usage."""
        out = self._flush()
        if self.answer.calls and not self._native_tail:
            calls = [{"index": n, **call} for n, call in enumerate(self.answer.tool_calls())]
            out.append(self._synth({"tool_calls": calls}))
        out += self._tail
        self._tail = []
        for i, chunk in enumerate(out):  # released together: one write
            chunk.more = i < len(out) - 1
        return out

    def _synth(self, delta: dict[str, Any]) -> Chunk:
        data = {**(self.answer.template or {}), "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        return Chunk(data)


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

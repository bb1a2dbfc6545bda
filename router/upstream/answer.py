"""A streamed answer put together: its text, tool calls, finish and usage.

`Answer.add(data)` takes each `chat.completion.chunk` in order; `message()` is the assistant message
so far and `completion()` the whole answer as a `chat.completion`, as a call that was not streamed
would have had it. The pipeline's `Gate` (router/flow/streaming.py) judges streams with it, and a
tier read as a stream for a whole answer (`cut_loops`, router/upstream/loops.py) answers with it.
"""

from __future__ import annotations

from typing import Any

_KEEP = ("id", "object", "created", "model", "system_fingerprint")


class Answer:
    __slots__ = ("calls", "finish_reason", "template", "text", "timings", "usage")

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, Call] = {}  # by tool-call index
        self.finish_reason: str | None = None
        self.template: dict[str, Any] | None = None  # the first chunk's id, model, ...
        self.usage: dict[str, Any] | None = None
        self.timings: dict[str, Any] | None = None  # llama-server's, on its last chunk

    def add(self, data: dict[str, Any]) -> None:
        if self.template is None:
            self.template = {k: data[k] for k in _KEEP if k in data}
        if isinstance(usage := data.get("usage"), dict):
            self.usage = usage
        if isinstance(timings := data.get("timings"), dict):
            self.timings = timings
        choices = data.get("choices")
        if not choices:
            return
        choice = choices[0]
        delta = choice.get("delta") or {}
        if fr := choice.get("finish_reason"):
            self.finish_reason = fr
        if delta.get("tool_calls"):
            self.add_calls(delta["tool_calls"])
        if text := delta.get("content"):
            self.text.append(text)

    def add_calls(self, deltas: list[dict[str, Any]]) -> None:
        for i, tc in enumerate(deltas):
            idx = tc.get("index", i)
            call = self.calls.get(idx)
            if call is None:
                call = self.calls[idx] = Call()
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

    def drop_repeated_calls(self) -> None:
        """Each call once, after a loop (router/upstream/loops.py): a call of the same name whose
        arguments are an earlier one's — or the start of them, cut off mid-copy — is dropped."""
        kept: list[Call] = []
        for call in (self.calls[i] for i in sorted(self.calls)):
            name, args = "".join(call.name), "".join(call.arguments)
            if not any("".join(k.name) == name and "".join(k.arguments).startswith(args) for k in kept):
                kept.append(call)
        self.calls = dict(enumerate(kept))

    def completion(self) -> dict[str, Any]:
        """The answer as a `chat.completion`: one choice, the usage and timings the stream gave."""
        choice = {"index": 0, "message": self.message(), "finish_reason": self.finish_reason}
        out = {**(self.template or {}), "object": "chat.completion", "choices": [choice]}
        if self.usage is not None:
            out["usage"] = self.usage
        if self.timings is not None:
            out["timings"] = self.timings
        return out


class Call:
    """A streamed tool call: its name and arguments as the parts that came (joined once, in `whole`)."""

    __slots__ = ("arguments", "id", "name")

    def __init__(self) -> None:
        self.id = ""
        self.name: list[str] = []
        self.arguments: list[str] = []

    def whole(self) -> dict[str, Any]:
        function = {"name": "".join(self.name), "arguments": "".join(self.arguments)}
        return {"id": self.id, "type": "function", "function": function}

"""An in-process tier for socket-free tests: it satisfies the `Upstream` protocol
(router/upstream/base.py) and answers from a script, one entry per call.

    fast = Scripted("fast", [call("get_weather", "{bad"), text("hi")])
    async with started(policy_text(UNUSED), tmp_path, fast=fast, full=full) as router: ...

An entry is an assistant message (`text(...)`, `call(...)`) or an exception to raise (an
`UpstreamError`). Each tier records the bodies it was sent. It is a seam the app offers
(`create_app(settings, upstreams=...)`), not a stand-in for the router's own code.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from router.app import create_app, lifespan_of
from router.runtime import Runtime
from router.sessions import Session
from router.settings import Settings
from router.upstream.base import Chunk, Native, Reply

UNUSED = "http://127.0.0.1:9/v1"  # the policy names an api_base; the scripted objects never use it

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


def text(content: str) -> dict[str, Any]:
    return {"role": "assistant", "content": content}


def call(name: str, arguments: str, call_id: str = "call_1") -> dict[str, Any]:
    tool_call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    return {"role": "assistant", "content": None, "tool_calls": [tool_call]}


class Scripted:
    dialects: frozenset[str] = frozenset()  # chat completions only

    def __init__(self, tier: str, script: list[dict[str, Any] | Exception], window: int | None = None) -> None:
        self.tier = tier
        self.script = list(script)
        self.window = window  # the context window it reports
        self.bodies: list[dict[str, Any]] = []
        self.started = self.closed = False

    async def start(self, warm: bool = True) -> None:
        self.started = True

    async def close(self) -> None:
        self.closed = True

    async def context_window(self, deadline: float) -> int | None:
        return self.window

    async def count_tokens(self, body: dict[str, Any], deadline: float, native: Native | None = None) -> int | None:
        return None  # no tokenizer: the router estimates

    def _next(self, body: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append(body)
        entry = self.script.pop(0)
        if isinstance(entry, Exception):
            raise entry
        return entry

    async def complete(self, body: dict[str, Any], deadline: float, session: Session | None = None) -> Reply:
        message = self._next(body)
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        choice = {"index": 0, "message": message, "finish_reason": finish}
        data = {"id": f"chatcmpl-{self.tier}", "object": "chat.completion", "model": self.tier, "choices": [choice]}
        return Reply(data)

    async def stream(
        self, body: dict[str, Any], deadline: float, session: Session | None = None
    ) -> AsyncIterator[Chunk]:
        message = self._next(body)
        base = {"id": f"chatcmpl-{self.tier}-{len(self.bodies)}", "object": "chat.completion.chunk", "model": self.tier}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> Chunk:
            return Chunk({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

        yield chunk({"role": "assistant"})
        for word in (message.get("content") or "").split(" ") if message.get("content") else ():
            yield chunk({"content": word + " "})
        for i, tc in enumerate(message.get("tool_calls") or ()):
            fn = tc["function"]
            opening = {"index": i, "id": tc["id"], "type": "function", "function": {"name": fn["name"]}}
            yield chunk({"tool_calls": [opening]})
            yield chunk({"tool_calls": [{"index": i, "function": {"arguments": fn["arguments"]}}]})
        yield chunk({}, "tool_calls" if message.get("tool_calls") else "stop")


@contextlib.asynccontextmanager
async def started(policy_yaml: str, tmp_path: Path, **tiers: Scripted) -> AsyncIterator[Runtime]:
    """A started router (its lifespan, no server) whose named tiers are the scripted objects."""
    path = tmp_path / "policy.yaml"
    path.write_text(policy_yaml)
    app = create_app(Settings(policy=path, reload_policy=False, warm_up=False), upstreams=tiers)
    async with lifespan_of(app)(app):
        yield app.state.runtime

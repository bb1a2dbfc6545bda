"""A scripted reference + judge tier for the shadow-mode and qa tests (a real aiohttp server).

The fake upstream cannot judge, so this small server answers as a pure function of the request:

* a judge question (`response_format` set): by `judge` — "json": `{"score", "pass", "reason",
  "difference"}` passing when answer A calls `good`; "garbage": prose without a verdict;
* any other call: the reference answer — a call of `good` with `{"ref": true}` when tools are
  offered (never the same as the fake's answer, so the judge is always asked), else text. It waits
  for `gate` when one is set, and answers HTTP 500 while `fail` is true.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

import orjson
from aiohttp import web

from tests.conftest import serve_app, upstream_app


class Reference:
    def __init__(self) -> None:
        self.url = ""
        self.judge = "json"
        self.fail = False
        self.gate: asyncio.Event | None = None
        self.answers: list[dict[str, Any]] = []  # reference requests
        self.questions: list[dict[str, Any]] = []  # judge requests

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        if "response_format" in body:
            self.questions.append(body)
            return _reply({"role": "assistant", "content": self._verdict(body["messages"][-1]["content"])})
        self.answers.append(body)
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            return web.json_response({"error": {"message": "reference down"}}, status=500)
        if body.get("tools"):
            call = {"id": "r1", "type": "function", "function": {"name": "good", "arguments": '{"ref": true}'}}
            return _reply({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls")
        return _reply({"role": "assistant", "content": "the reference answer"})

    def _verdict(self, prompt: str) -> str:
        if self.judge == "garbage":
            return "Both answers look fine to me."
        found = re.search(r"Answer A \(fast model\):\n(.*?)\n\nAnswer B", prompt, re.S)
        good = bool(found) and "call good(" in found.group(1)  # type: ignore[union-attr]
        verdict = {
            "score": 90 if good else 20,
            "pass": good,
            "reason": "same tool" if good else "wrong tool",
            "difference": "" if good else "A calls another tool than B",
        }
        return orjson.dumps(verdict).decode()


def _reply(message: dict[str, Any], finish: str = "stop") -> web.Response:
    return web.json_response({"choices": [{"index": 0, "message": message, "finish_reason": finish}]})


@contextlib.asynccontextmanager
async def reference_tier() -> AsyncIterator[Reference]:
    ref = Reference()
    async with serve_app(upstream_app({"/v1/chat/completions": ref.handle})) as url:
        ref.url = url
        try:
            yield ref
        finally:
            if ref.gate is not None:
                ref.gate.set()  # no handler left waiting when the server stops

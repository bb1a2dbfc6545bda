"""An upstream that plays each task's scripted run (OpenAI chat completions, JSON and SSE): the
harness's own check that a correct run is scored a success — and a near miss a failure — through
every loop, the router's translations (Responses, Messages → chat) and the report.

The task is found by its prompt (the conversation's last user message); the answer is the next
step of its scripted run: step k once k tool results follow the prompt, then the final answer. A
recovery task's failing step is played too, so the router sees the agent report a failed call.
Calls that offer no tools (a judge verifier's question) get `{"accept": true}`. Nothing else is
served (no /completion: a score verifier is unsure and accepts).

    app = oracle_app(wrong=False)         an aiohttp app; or `python -m bench.agentic oracle --port P`
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import orjson
from aiohttp import web

from bench.agentic.tasks import TASKS, Run

_PROMPTS = {t.prompt: t for t in TASKS}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def next_message(messages: list[dict[str, Any]], wrong: bool = False) -> dict[str, Any]:
    """The assistant message the scripted run says next, for a chat conversation."""
    last_user = max((n for n, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    task = _PROMPTS.get(_text(messages[last_user].get("content")).strip()) if last_user >= 0 else None
    if task is None:
        return {"role": "assistant", "content": "I do not know this task."}
    script: Run = task.wrong if wrong else task.solution
    k = sum(1 for m in messages[last_user + 1 :] if m.get("role") == "tool")
    if k >= len(script.steps):
        return {"role": "assistant", "content": script.answer}
    step = script.steps[k]
    call = {"id": f"call_{k}_{uuid.uuid4().hex[:8]}", "type": "function",
            "function": {"name": step.tool, "arguments": orjson.dumps(step.args).decode()}}  # fmt: skip
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def _chunks(message: dict[str, Any], cid: str, model: str) -> list[bytes]:
    def frame(delta: dict[str, Any], finish: str | None = None) -> bytes:
        chunk = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                 "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
        return b"data: " + orjson.dumps(chunk) + b"\n\n"

    out = [frame({"role": "assistant", "content": ""})]
    if message.get("tool_calls"):
        call = message["tool_calls"][0]
        out.append(frame({"tool_calls": [{"index": 0, **call}]}))
        out.append(frame({}, "tool_calls"))
    else:
        out.append(frame({"content": message["content"]}))
        out.append(frame({}, "stop"))
    return [*out, b"data: [DONE]\n\n"]


def oracle_app(wrong: bool = False) -> web.Application:
    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        model = str(body.get("model") or "oracle")
        if body.get("tools"):
            message = next_message(body.get("messages") or [], wrong)
        else:
            message = {"role": "assistant", "content": '{"accept": true}'}
        cid = f"chatcmpl-{uuid.uuid4().hex[:16]}"
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        usage = {"prompt_tokens": len(orjson.dumps(body)) // 4, "completion_tokens": 8,
                 "total_tokens": len(orjson.dumps(body)) // 4 + 8}  # fmt: skip
        if body.get("stream"):
            response = web.StreamResponse(headers={"content-type": "text/event-stream"})
            await response.prepare(request)
            for part in _chunks(message, cid, model):
                await response.write(part)
            await response.write_eof()
            return response
        return web.json_response({"id": cid, "object": "chat.completion", "created": int(time.time()), "model": model,
                                  "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                                  "usage": usage})  # fmt: skip

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "oracle", "object": "model"}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    return app

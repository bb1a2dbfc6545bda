"""The agent loops that run a task through the router, each the way its users write it:

    agents-responses   the OpenAI Agents SDK: `Runner.run` with function tools, OpenAIResponsesModel
    agents-chat        the same over chat completions (OpenAIChatCompletionsModel)
    anthropic          the `anthropic` SDK, a plain loop: call, run the tool_use blocks, send their
                       tool_result (is_error on a failed call), until an answer without tool_use or
                       the step bound

Each SDK keeps its default behaviour (retries of a retryable error included); what differs from
a default is said where it is done. The Agents SDK raises on a call of a tool it does not have
(ModelBehaviorError: the task fails); the plain Anthropic loop hands the model an "Error: unknown
tool" result instead, as a plain loop would.

Every HTTP call the SDK makes goes through an httpx client whose event hooks write down the router's
answer: status, the x-router-* headers (tier, route, escalated, mistakes, repaired, salvaged, looped,
exhausted, signs, verified, repeat, sampled) and the usage in the body. Calls are not streamed, so the headers carry
the final decision (a stream's would be in its `: router` trailer).
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from bench.agentic.env import TOOLS, Environment
from bench.agentic.tasks import SYSTEM, Task

LOOPS = ("agents-responses", "agents-chat", "anthropic")
MAX_TOKENS = 1024  # the Anthropic loop's max_tokens (required by the API); the Agents SDK sets none
_TEXT_CALL = re.compile(r"<tool_call>|\"arguments\"\s*:|```json\s*\{\s*\"name\"|^\s*\{\s*\"name\"\s*:", re.MULTILINE)


@dataclass
class Call:
    """One HTTP call of the agent's client to the router, as the router answered it."""

    status: int
    seconds: float
    tier: str | None = None
    route: str | None = None
    escalated: bool = False
    mistakes: list[str] = field(default_factory=list)
    repaired: bool = False
    salvaged: bool = False
    looped: bool = False
    exhausted: bool = False
    signs: list[str] | None = None  # None: not told (a run before the router said it)
    verified: str | None = None
    repeat: str | None = None
    sampled: str | None = None  # went on sampled after the greedy last tier's "sign" or "mistake"
    input_tokens: int = 0
    output_tokens: int = 0

    @classmethod
    def of(cls, status: int, seconds: float, headers: Any, body: Any) -> Call:
        usage = body.get("usage") if isinstance(body, dict) else None
        usage = usage if isinstance(usage, dict) else {}
        mistakes = headers.get("x-router-mistakes") or ""
        return cls(
            status=status,
            seconds=round(seconds, 3),
            tier=headers.get("x-router-tier"),
            route=headers.get("x-router-route"),
            escalated=headers.get("x-router-escalated") == "true",
            mistakes=[m for m in mistakes.split(",") if m],
            repaired=headers.get("x-router-repaired") == "true",
            salvaged=headers.get("x-router-salvaged") == "true",
            looped=headers.get("x-router-looped") == "true",
            exhausted=headers.get("x-router-exhausted") == "true",
            signs=[s for s in (headers.get("x-router-signs") or "").split(",") if s],
            verified=headers.get("x-router-verified"),
            repeat=headers.get("x-router-repeat"),
            sampled=headers.get("x-router-sampled"),
            input_tokens=int(usage.get("prompt_tokens") or usage.get("input_tokens") or 0),
            output_tokens=int(usage.get("completion_tokens") or usage.get("output_tokens") or 0),
        )


class Wire:
    """An httpx client for an SDK whose every POST's answer is kept as a Call."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._started: dict[int, float] = {}

    async def _request(self, request: Any) -> None:
        self._started[id(request)] = time.monotonic()

    async def _response(self, response: Any) -> None:
        request = response.request
        if request.method != "POST":
            return
        seconds = time.monotonic() - self._started.pop(id(request), time.monotonic())
        body: Any = None
        if response.headers.get("content-type", "").startswith("application/json"):
            await response.aread()  # not a stream: the SDK reads the same bytes afterwards
            try:
                body = orjson.loads(response.content)
            except orjson.JSONDecodeError:
                body = None
        self.calls.append(Call.of(response.status_code, seconds, response.headers, body))

    def client(self, timeout: float, http: Any = httpx) -> Any:
        """An AsyncClient of `http`: httpx (the openai SDK's) or httpx2 (the anthropic SDK's, which
        refuses an httpx client); both take the same event hooks."""
        return http.AsyncClient(
            timeout=http.Timeout(timeout, connect=10.0),
            event_hooks={"request": [self._request], "response": [self._response]},
        )


@dataclass
class Outcome:
    answer: str
    error: str | None = None  # what ended the loop other than an answer
    infra: bool = False  # the router could not be reached: nothing of the model's doing


def looks_like_text_call(answer: str) -> bool:
    """The final answer is a tool call written as text (a mistake that reached the agent as text)."""
    return bool(_TEXT_CALL.search(answer))


def _history(task: Task) -> list[dict[str, Any]]:
    return [{"role": role, "content": text} for role, text in task.history] + [{"role": "user", "content": task.prompt}]


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


def _unreachable(exc: BaseException) -> bool:
    """The router was not reached at all (refused, reset before an answer), as opposed to a call
    that timed out or an answer the loop could not use."""
    import anthropic
    import httpx2
    import openai

    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return False
        timeouts = (openai.APITimeoutError, anthropic.APITimeoutError, httpx.TimeoutException, httpx2.TimeoutException)
        if isinstance(seen, timeouts):
            return False
        refused = (openai.APIConnectionError, anthropic.APIConnectionError, httpx.ConnectError, httpx2.ConnectError)
        if isinstance(seen, refused):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


async def agents_loop(
    task: Task, env: Environment, base: str, wire: Wire, session: str, *, api: str, max_steps: int, http_timeout: float
) -> Outcome:
    """The OpenAI Agents SDK: an Agent with the task's tools as FunctionTools, `Runner.run`.
    `api`: "responses" or "chat"."""
    import agents
    import openai

    agents.set_tracing_disabled(True)  # never export traces (the SDK would, to OpenAI)
    client = openai.AsyncOpenAI(
        base_url=f"{base}/v1", api_key="agentic-bench", http_client=wire.client(http_timeout),
        default_headers={"x-session-id": session},
    )  # fmt: skip
    model_class = agents.OpenAIResponsesModel if api == "responses" else agents.OpenAIChatCompletionsModel
    model = model_class(model="auto", openai_client=client)

    def invoke(name: str) -> Callable[[Any, str], Awaitable[str]]:
        async def run(ctx: Any, arguments: str) -> str:
            return env.call(name, arguments).text

        return run

    tools: list[Any] = [
        agents.FunctionTool(
            name=name,
            description=TOOLS[name].description,
            params_json_schema=TOOLS[name].parameters,
            on_invoke_tool=invoke(name),
            strict_json_schema=False,
        )
        for name in task.tools
    ]
    # the chat model asks for usage in a stream only from OpenAI's own URL unless told to
    settings = agents.ModelSettings(include_usage=True) if api == "chat" else agents.ModelSettings()
    agent = agents.Agent(name="assistant", instructions=SYSTEM, tools=tools, model=model, model_settings=settings)
    given: Any = _history(task) if task.history else task.prompt
    try:
        result = await agents.Runner.run(agent, given, max_turns=max_steps)
        return Outcome(str(result.final_output or ""))
    except Exception as exc:  # the loop's end, whatever it was: recorded with the task
        return Outcome("", _error(exc), _unreachable(exc))
    finally:
        await client.close()


async def anthropic_loop(
    task: Task, env: Environment, base: str, wire: Wire, session: str, *, max_steps: int, http_timeout: float
) -> Outcome:
    """A plain Messages tool loop with the `anthropic` SDK."""
    import anthropic
    import httpx2

    client = anthropic.AsyncAnthropic(
        base_url=base, api_key="agentic-bench", http_client=wire.client(http_timeout, httpx2),
        default_headers={"x-session-id": session},
    )  # fmt: skip
    tools: Any = [TOOLS[name].anthropic() for name in task.tools]
    messages: list[dict[str, Any]] = _history(task)
    text = ""
    try:
        for _ in range(max_steps):
            reply = await client.messages.create(
                model="auto",
                max_tokens=MAX_TOKENS,
                system=SYSTEM,
                tools=tools,
                messages=messages,  # type: ignore[arg-type]
            )
            messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
            text = "".join(b.text for b in reply.content if b.type == "text")
            uses = [b for b in reply.content if b.type == "tool_use"]
            if not uses:
                return Outcome(text)
            results = []
            for use in uses:
                result = env.call(use.name, use.input)
                results.append({"type": "tool_result", "tool_use_id": use.id, "content": result.text,
                                **({"is_error": True} if result.failed else {})})  # fmt: skip
            messages.append({"role": "user", "content": results})
        return Outcome(text, f"MaxSteps: {max_steps} model calls without a final answer")
    except Exception as exc:
        return Outcome(text, _error(exc), _unreachable(exc))
    finally:
        await client.close()


async def run_loop(
    loop: str, task: Task, env: Environment, base: str, wire: Wire, session: str, *, max_steps: int, http_timeout: float
) -> Outcome:
    if loop == "anthropic":
        return await anthropic_loop(task, env, base, wire, session, max_steps=max_steps, http_timeout=http_timeout)
    if loop in ("agents-responses", "agents-chat"):
        api = "responses" if loop == "agents-responses" else "chat"
        return await agents_loop(
            task, env, base, wire, session, api=api, max_steps=max_steps, http_timeout=http_timeout
        )
    raise ValueError(f"unknown loop {loop!r}; loops: {', '.join(LOOPS)}")

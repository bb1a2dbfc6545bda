"""Model calls to the fake upstream over HTTP: POST /v1/chat/completions (OpenAI chat completions),
/v1/messages (Anthropic Messages) and /v1/responses (OpenAI Responses), each answered as JSON or SSE
by `endpoint(api)`, with the faults its plan says (router/fake/faults.py). The app around them, its
other endpoints and how to run it: router/fake/server.py; the WebSocket mode: websocket.py.

Fast modes (router/fake/speed.py): on /v1/messages ``speed: "fast"`` is taken with the fast-mode beta
  header for models matching ``fast_models``, else Anthropic's 400; beyond ``fast_rate_limit`` a minute,
  its 429; ``usage.speed`` says the speed served. Chat and Responses answers carry the ``service_tier``
  asked for; one other than auto/default is taken for ``fast_models`` only (else OpenAI's 400) and
  within ``fast_rate_limit`` (else a 429). A refusal draws nothing.

Reasoning state (router/fake/reasoning.py), bound to the request's ``model`` as the providers bind it:
  /v1/messages with ``thinking`` on answers with a signed thinking block first, and refuses with
  Anthropic's 400 a thinking block signed for another model, and (``thinking.type: enabled``) a tool
  loop's final assistant turn that does not start with a thinking block. /v1/responses with
  ``include: ["reasoning.encrypted_content"]`` answers with a reasoning item first, and refuses with
  OpenAI's 400 ``invalid_encrypted_content`` an input item's encrypted content sealed for another model.
  Thinking off beside an effort level above ``effort_without_thinking`` (or written with more than its
  ``type``) gets Anthropic's 400 (DeepSeek's with ``none``); a field only a beta admits
  (``context_management``), without that beta, Anthropic's 400 for an unknown field (betas.py).
  Chat answers carry ``reasoning_content`` as the ``reasoning_content`` mode says, which may also
  require it back in a tool loop, or refuse it.

Answers
  With ``tools`` (and ``tool_choice`` not "none") the answer is one tool call: the named tool when
  ``tool_choice`` names one (Anthropic: ``{"type": "tool"}``), else the first of ``prefer_tools`` that is
  offered (steering a real agent to a harmless tool, e.g. Read or Glob), else a seeded pick. Arguments validate
  against the tool's ``parameters`` (see ``fake_tools`` for the supported schema subset). With
  probability ``bad_tool_rates.get(tool, bad_tool_rate)`` the answer is broken in one of ``bad_kinds``:
  invalid_json (truncated arguments), unknown_tool (a name not offered), schema_violation (wrong type or
  missing required argument), missing_tool_call (text "I will call NAME now.", finish "stop"),
  text_tool_call (``{"name": ..., "arguments": {...}}`` as content, no tool_calls), tool_sweep (one such
  call of every offered tool, in the order offered, each valid, as content; with fewer than three
  tools offered that is no sweep the router's checks find, and none it should). The injected
  kind is reported in the response header ``x-fake-defect``. Without tools: ``words`` seeded words of text.
  The response ``model`` echoes the request's ``model`` (``config.model`` if absent). A clean call that
  would repeat, word for word, one of the turn whose results the request brings back gets its first
  free-text argument changed ("Paris 2"): a model that has a call's result does not ask for it again.
  With ``finish_after`` N > 0 the fake ends a tool loop: once the conversation holds N tool results
  (chat ``tool`` messages, Responses ``*_call_output`` items, Anthropic ``tool_result`` blocks) and
  ``tool_choice`` does not demand a call, it answers text, as an agent's model does after its tools ran.

Determinism
  The app owns ``random.Random(seed)``. Each accepted request draws, synchronously and in this order:
  reset_before_first_byte, error_rate, reset_mid_stream, malformed_sse (one float each), the response
  id; then for a tool answer: tool index, bad draw, kind index, argument values, call id (plus at most
  one draw for a schema_violation; the other offered tools' argument values for a tool_sweep); for a
  text answer: the words. Requests rejected with 400/401 (bad body, bad key, bad ``x-fake-fault``,
  ``tool_choice`` naming a tool not offered) draw nothing. So the same sequence of requests gives the
  same sequence of answers; header overrides replace decisions but never change the draws.
  With ``greedy`` the fake answers as a greedy (temperature 0) model does: the same request, the same
  answer, broken or not. A request's draws then come from ``random.Random`` seeded by the seed and a
  digest of the request body (keys sorted; ``stream``, ``stream_options`` and the output limits left
  out: they do not change a greedy answer), unless it asks for a ``temperature`` above 0 (a sample:
  the app's draws).

Per-request override header ``x-fake-fault`` (comma-separated, any combination):
  ``500`` / ``429`` / ``400`` (any 4xx/5xx)   that status and an error body (429: ``retry-after-ms: 10``)
  ``reset``                 close the connection (TCP RST) with no response
  ``reset-mid-stream``      send a few chunks (at least one content chunk), then RST; for JSON answers
                            the headers and half of the body are sent first
  ``malformed-sse``         a garbage ``data:`` line in the stream (JSON answers: half the JSON body)
  ``bad-tool:<kind>``       break the tool call with that kind (needs ``tools``)
  ``slow-first-token:<ms>`` streams: delay before the first event; JSON answers: extra delay
  ``delay:<ms>``            delay before the response headers
  ``endless``               an answer that never ends: a JSON body, or a chat stream of one tool call
                            whose arguments (text, without tools) go on until the peer leaves
  ``loop``                  chat only: the answer (a tool call written as text, ``{"name": ..., "arguments":
                            ...}``, or the text) written again and again, a line each, until ``max_tokens``,
                            finish "length" — as a small model answering greedily does; a stream writes a
                            token (4 characters) per event and stops when the peer leaves (``left_early``
                            in GET /_fake/stats)

Rate knobs (``FakeConfig``): ``error_rate`` (HTTP 500), ``reset_before_first_byte``, ``reset_mid_stream``,
``malformed_sse``, ``bad_tool_rate``/``bad_tool_rates``; a forced header fault adds to them.
Timing knobs: ``delay_ms`` before headers; ``first_token_delay_ms`` after the headers, before the first
SSE event; ``chunk_delay_ms`` between SSE events. With no chunk delay a stream is written in one go.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from router.fake.betas import beta_refusal
from router.fake.context import prompt_size, too_long
from router.fake.faults import Plan, plan_of, send_endless, send_looping
from router.fake.reasoning import (
    chat_reasoning,
    chat_refusal,
    effort_refusal,
    messages_refusal,
    reasoning_items,
    responses_refusal,
    thinking_blocks,
)
from router.fake.responses import (
    MALFORMED_RESPONSES,
    offered_tools,
    response_events,
    response_object,
    responses_tools,
)
from router.fake.speed import Refusal, messages_speed, served_tier
from router.fake.state import STATE, FakeState
from router.fake.tools import Answer, last_calls, make_text, tool_answer
from router.fake.wire import (
    MALFORMED_ANTHROPIC,
    MALFORMED_CHAT,
    anthropic_events,
    anthropic_message,
    anthropic_tools,
    chat_chunks,
    chat_completion,
    error_body,
    openai_tools,
    prompt_tokens,
)

JSON_HEADERS = {"Content-Type": "application/json"}
_SSE = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


def endpoint(api: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The handler of `api`'s POST: "chat" (completions), "messages" (Anthropic) or "responses" (OpenAI)."""

    async def handler(request: web.Request) -> web.StreamResponse:
        return await _serve(request, api)

    return handler


def error_response(status: int, message: str, anthropic: bool) -> web.Response:
    """An error in the API's shape (Anthropic's or OpenAI's); a 429 says when to retry."""
    headers = {**JSON_HEADERS, "retry-after-ms": "10"} if status == 429 else JSON_HEADERS
    return web.Response(status=status, body=error_body(status, message, anthropic), headers=headers)


def _cut(request: web.Request) -> None:
    """Reset the TCP connection: SO_LINGER 0 then abort, so the peer gets an RST."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


async def _send_json(request: web.Request, plan: Plan, body: bytes, headers: dict[str, str]) -> web.StreamResponse:
    if plan.malformed:
        body = body[: len(body) // 2]
    if not plan.reset_mid:
        return web.Response(body=body, headers={**JSON_HEADERS, **headers})
    resp = web.StreamResponse(headers={**JSON_HEADERS, **headers})
    resp.content_length = len(body)
    await resp.prepare(request)
    await resp.write(body[: len(body) // 2])
    await asyncio.sleep(0.005)  # let the partial body reach the peer before the RST
    _cut(request)
    return resp


async def _send_stream(
    request: web.Request, st: FakeState, plan: Plan, events: list[bytes], headers: dict[str, str], bad: bytes
) -> web.StreamResponse:
    st.streams += 1
    st.streaming += 1
    try:
        resp = web.StreamResponse(headers={**_SSE, **headers})
        await resp.prepare(request)
        if plan.malformed:
            events.insert(2 if len(events) > 3 else 1, bad)
        cut = max(2, len(events) // 2) if plan.reset_mid else -1
        gap = st.config.chunk_delay_ms / 1000
        if plan.first_ms > 0:
            await asyncio.sleep(plan.first_ms / 1000)
        if gap <= 0 and cut < 0:
            await resp.write(b"".join(events))
        else:
            for i, event in enumerate(events):
                if i == cut:
                    await asyncio.sleep(0.005)  # let the sent chunks reach the peer before the RST
                    _cut(request)
                    return resp
                if i and gap > 0:
                    await asyncio.sleep(gap)
                await resp.write(event)  # raises once the peer has gone
        await resp.write_eof()
        return resp
    finally:
        st.streaming -= 1


async def _serve(request: web.Request, api: str) -> web.StreamResponse:
    """One answer of `api`: "chat" (completions), "messages" (Anthropic) or "responses" (OpenAI)."""
    st = request.app[STATE]
    raw = await request.read()
    body = st.record(request, raw)
    st.model_calls += 1
    anthropic = api == "messages"
    if not st.authorized(request, anthropic):
        return error_response(401, "fake upstream: invalid API key", anthropic)
    if api == "responses" and isinstance(body, dict) and isinstance(body.get("input"), str | list):
        inputs = body["input"]
        body = {**body, "messages": inputs if isinstance(inputs, list) else [{"content": inputs}]}
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return error_response(400, "fake upstream: body must be a JSON object with a 'messages' list", anthropic)
    pick = {"chat": openai_tools, "messages": anthropic_tools, "responses": responses_tools}[api]
    tools, chosen = pick(body)
    if chosen is not None and all(name != chosen for name, _ in tools):
        return error_response(400, f"fake upstream: tool_choice names {chosen!r}, which is not in tools", anthropic)
    refused = {"messages": messages_refusal, "responses": responses_refusal}.get(api)
    if refused is not None and (foreign := refused(body, st.config.signing_key)) is not None:
        st.refused[foreign[0]] += 1  # another model's reasoning state, as the provider refuses it
        return web.Response(status=400, body=foreign[1], headers=JSON_HEADERS)
    if anthropic and (unadmitted := beta_refusal(body, request.headers)) is not None:
        st.refused["beta"] += 1  # a field its beta admits, without the beta
        return web.Response(status=400, body=unadmitted, headers=JSON_HEADERS)
    if anthropic and (effort := effort_refusal(body, st.config.effort_without_thinking)) is not None:
        st.refused[effort[0]] += 1
        return web.Response(status=400, body=effort[1], headers=JSON_HEADERS)
    if api == "chat" and (unreasoned := chat_refusal(body, st.config.reasoning_content)) is not None:
        st.refused[unreasoned[0]] += 1
        return web.Response(status=400, body=unreasoned[1], headers=JSON_HEADERS)
    if tools and finished(body, chosen, st.config.finish_after):
        tools = []
    size = prompt_size(body) if st.config.n_ctx else 0
    if size and (refusal := too_long(size, st.config.n_ctx, anthropic)) is not None:
        return web.Response(status=400, body=refusal, headers=JSON_HEADERS)
    speed = (messages_speed(body, request.headers, st.config, st.fast) if anthropic
             else served_tier(body, st.config, st.fast))  # fmt: skip
    if isinstance(speed, Refusal):
        return web.Response(status=speed.status, body=speed.body, headers=speed.headers)
    rng = greedy(st, body) or st.rng
    plan = plan_of(request.headers.get("x-fake-fault"), rng, st.config)
    if isinstance(plan, str):
        return error_response(400, plan, anthropic)
    # plan_of drew the fault floats; the rest is drawn here. All before the first await, so concurrency
    # cannot interleave two requests' draws.
    rid = rng.getrandbits(96)
    cfg = st.config
    if tools:
        rates, kinds = cfg.bad_tool_rates, cfg.bad_kinds
        last = last_calls(body["messages"])
        answer = tool_answer(tools, chosen, rng, rates, cfg.bad_tool_rate, kinds, plan.bad_kind, cfg.prefer_tools, last)
    else:
        answer = Answer(text=make_text(rng, cfg.words))
    if plan.reset:
        _cut(request)
        return web.Response(status=500)  # never sent: aiohttp drops it on the closed transport
    stream = body.get("stream") is True
    delay = plan.delay_ms + (0.0 if stream else plan.first_ms)
    if delay > 0:
        await asyncio.sleep(delay / 1000)
    if plan.status:
        return error_response(plan.status, f"fake upstream: injected HTTP {plan.status}", anthropic)
    if plan.endless:
        return await send_endless(request, stream, answer.tool_name)
    if plan.looping and api == "chat":
        call = {"name": answer.tool_name, "arguments": orjson.loads(answer.tool_args or "{}")}
        unit = (answer.text or orjson.dumps(call).decode()) + "\n"
        limit = int(body.get("max_tokens") or body.get("max_completion_tokens") or 2048)
        resp, left = await send_looping(request, stream, unit, limit, st.config.chunk_delay_ms / 1000 or 0.001)
        st.left_early += left
        return resp
    model = body.get("model")
    model = model if isinstance(model, str) else cfg.model
    prompt, completion = size or prompt_tokens(body), len(answer.text or answer.tool_args or "") // 4 + 1
    headers = {"x-fake-defect": answer.defect} if answer.defect else {}
    key = cfg.signing_key
    if api == "responses":
        reasoning = reasoning_items(body, key, f"{rid:024x}")
        response = response_object(answer, f"{rid:024x}", model, (prompt, completion), reasoning, offered_tools(body))
        if speed is not None:
            response["service_tier"] = speed
        if stream:
            return await _send_stream(
                request, st, plan, response_events(response, whole_items=cfg.whole_items), headers, MALFORMED_RESPONSES
            )
        return await _send_json(request, plan, orjson.dumps(response), headers)
    if anthropic:
        thinking = thinking_blocks(body, key, answer.tool_name)
        message = anthropic_message(answer, f"msg_{rid:024x}", model, (prompt, completion), thinking)
        if speed is not None:
            message["usage"]["speed"] = speed
        if stream:
            events = anthropic_events(answer, message)
            return await _send_stream(request, st, plan, events, headers, MALFORMED_ANTHROPIC)
        return await _send_json(request, plan, orjson.dumps(message), headers)
    cid, created = f"chatcmpl-{rid:024x}", int(time.time())
    reasoned = chat_reasoning(body, st.config.reasoning_content, answer.tool_name)
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    if stream:
        options = body.get("stream_options")
        with_usage = isinstance(options, dict) and options.get("include_usage") is True
        events = chat_chunks(answer, cid, created, model, usage if with_usage else None, speed, reasoned)
        return await _send_stream(request, st, plan, events, headers, MALFORMED_CHAT)
    whole = chat_completion(answer, cid, created, model, usage, speed, reasoned)
    return await _send_json(request, plan, whole, headers)


_NOT_ASKED = frozenset({"stream", "stream_options", "max_tokens", "max_completion_tokens", "max_output_tokens"})


def greedy(st: FakeState, body: dict[str, Any]) -> random.Random | None:
    """The request's own generator when the fake answers greedily and the request does not ask to sample."""
    temperature = body.get("temperature")
    if not st.config.greedy or (isinstance(temperature, int | float) and temperature > 0):
        return None
    asked = orjson.dumps({k: v for k, v in body.items() if k not in _NOT_ASKED}, option=orjson.OPT_SORT_KEYS)
    return random.Random(hashlib.blake2b(asked, digest_size=16, key=str(st.config.seed).encode()).digest())


def finished(body: dict[str, Any], chosen: str | None, after: int) -> bool:
    """True when the tool loop is over: `after` tool results are in and no call is demanded."""
    if after <= 0 or chosen is not None or body.get("tool_choice") in ("required", "any", {"type": "any"}):
        return False
    return tool_results(body["messages"]) >= after


def tool_results(messages: list[Any]) -> int:
    """Tool results in a conversation of any of the three APIs."""
    n = 0
    for m in messages:
        if not isinstance(m, dict):
            continue
        if m.get("role") == "tool" or str(m.get("type", "")).endswith("call_output"):
            n += 1
        elif isinstance(content := m.get("content"), list):
            n += sum(1 for b in content if isinstance(b, dict) and b.get("type") == "tool_result")
    return n

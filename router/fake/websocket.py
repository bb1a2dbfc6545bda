"""The fake upstream's Responses WebSocket mode (GET /v1/responses with an upgrade), as OpenAI runs it.

One connection, many responses, one at a time: each `response.create` message (the POST body, with
`type`; `stream` is implicit) is answered with the Responses stream's events, one JSON text message
each, the answer drawn as POST /v1/responses draws it (tools, `tool_choice`, `finish_after`, reasoning
state and its refusals, `n_ctx`, the seed and `greedy`, `error_rate` and `reset_before_first_byte`,
`delay_ms`, `first_token_delay_ms`, `chunk_delay_ms`).

  cache       the connection keeps its most recent response (its input and output): a
              `previous_response_id` naming it continues from there, `store: false` or not; any other
              id — an older response, another connection's — is an `error` event
              `previous_response_not_found` (status 400) and the connection stays open
  generate    `generate: false`: a response with no output (created, in_progress, completed), its input
              kept as the connection's most recent response, nothing drawn
  limit       a connection older than `ws_limit_s` (OpenAI: 60 minutes) answers its next
              `response.create` with the `error` event `websocket_connection_limit_reached` and closes
  auth        as on POST (`Authorization: Bearer`): an upgrade without the key gets a 401
  off         `websocket=False`: the upgrade is refused with a 404, as a server without this mode

What it received is recorded with the HTTP requests (GET /_fake/requests): the upgrade (`method` "GET",
answered or refused), then one entry per message: `method` "WS", `path` "/v1/responses", the upgrade's
headers, `body` (the message parsed), `bytes` (its size) and `connection` (the connection's number,
from 1 per fake).
"""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import WSMsgType, web

from router.fake.calls import finished, greedy
from router.fake.config import FakeConfig
from router.fake.context import prompt_size, too_long
from router.fake.faults import plan_of
from router.fake.reasoning import reasoning_items, responses_refusal
from router.fake.responses import offered_tools, response_events, response_object, responses_tools
from router.fake.state import STATE, FakeState
from router.fake.tools import Answer, last_calls, make_text, tool_answer
from router.fake.wire import prompt_tokens

LIMIT_REACHED = "websocket_connection_limit_reached"
_MAX_MESSAGE = 64 * 1024 * 1024

Greedy = Callable[[Any, dict[str, Any]], random.Random | None]  # the state, the body → a request's own draws
Finished = Callable[[dict[str, Any], str | None, int], bool]  # the body, the forced tool, finish_after


@dataclass
class _Last:
    """The connection's most recent response: its id and what it holds (input items, then output)."""

    id: str
    items: list[Any] = field(default_factory=list)


class _Refused(Exception):
    def __init__(self, status: int, error: dict[str, Any]) -> None:
        super().__init__(error.get("message"))
        self.status = status
        self.error = error


def _error_event(status: int, error: dict[str, Any]) -> bytes:
    return orjson.dumps({"type": "error", "status": status, "error": error})


def _invalid(message: str, code: str | None = None, param: str | None = None) -> _Refused:
    return _Refused(400, {"type": "invalid_request_error", "code": code, "message": message, "param": param})


def endpoint() -> Callable[..., Any]:
    """GET /v1/responses: the WebSocket mode of the app (its `STATE`), its draws made as POST's are
    (`greedy`, `finished`: router/fake/calls.py)."""
    opened = 0  # connections so far

    async def serve(request: web.Request) -> web.StreamResponse:
        nonlocal opened
        st = request.app[STATE]
        cfg: FakeConfig = st.config
        headers = {k.lower(): v for k, v in request.headers.items()}
        st.requests += 1  # the upgrade, answered or refused
        st.log.append({"method": "GET", "path": request.path, "headers": headers, "body": None, "bytes": 0})
        ws = web.WebSocketResponse(max_msg_size=_MAX_MESSAGE)
        if not cfg.websocket or not ws.can_prepare(request).ok:
            raise web.HTTPNotFound()
        if cfg.api_key is not None and request.headers.get("Authorization") != f"Bearer {cfg.api_key}":
            raise web.HTTPUnauthorized(text='{"error": {"message": "fake upstream: invalid API key"}}',
                                       content_type="application/json")  # fmt: skip
        await ws.prepare(request)
        opened += 1
        conn = _Connection(st, ws, opened, headers)
        conn.transport = request.transport
        await conn.run()
        return ws

    return serve


class _Connection:
    def __init__(self, st: FakeState, ws: web.WebSocketResponse, number: int, headers: dict[str, str]) -> None:
        self.st = st
        self.cfg: FakeConfig = st.config
        self.ws = ws
        self.number = number
        self.headers = headers
        self.started = time.monotonic()
        self.last: _Last | None = None
        self.transport: asyncio.Transport | None = None

    async def run(self) -> None:
        async for message in self.ws:
            if message.type != WSMsgType.TEXT:
                await self.ws.close(code=1003, message=b"text messages only")
                return
            raw: str = message.data
            body = self._record(raw)
            if time.monotonic() - self.started >= self.cfg.ws_limit_s:
                text = "fake upstream: this WebSocket is past its time limit; open a new one."
                error = {"type": "invalid_request_error", "code": LIMIT_REACHED, "param": None, "message": text}
                await self.ws.send_str(_error_event(400, error).decode())
                await self.ws.close()
                return
            try:
                events = await self._answer(body)
            except _Refused as exc:
                await self.ws.send_str(_error_event(exc.status, exc.error).decode())
                continue
            if events is None:  # a reset: the connection cut, nothing sent
                if self.transport is not None:
                    self.transport.abort()
                return
            await self._send(events)

    def _record(self, raw: str) -> Any:
        try:
            body: Any = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = raw
        self.st.requests += 1
        self.st.log.append({"method": "WS", "path": "/v1/responses", "headers": self.headers, "body": body,
                            "bytes": len(raw.encode()), "connection": self.number})  # fmt: skip
        return body

    async def _send(self, events: list[bytes]) -> None:
        gap = self.cfg.chunk_delay_ms / 1000
        self.st.streaming += 1
        try:
            if self.cfg.first_token_delay_ms > 0:
                await asyncio.sleep(self.cfg.first_token_delay_ms / 1000)
            for i, event in enumerate(events):
                if i and gap > 0:
                    await asyncio.sleep(gap)
                await self.ws.send_str(event.decode())  # raises once the peer has gone
        finally:
            self.st.streaming -= 1

    async def _answer(self, message: Any) -> list[bytes] | None:
        """The events of one `response.create` (None: the connection is to be cut)."""
        if not isinstance(message, dict) or message.get("type") != "response.create":
            kind = message.get("type") if isinstance(message, dict) else None
            raise _invalid(f"fake upstream: unknown message type {kind!r}; expected 'response.create'", param="type")
        body = {k: v for k, v in message.items() if k not in ("type", "stream", "previous_response_id")}
        items = self._context(message)
        body["input"] = items
        body["messages"] = items  # what the answer's draws read, as on POST
        if (foreign := responses_refusal(body, self.cfg.signing_key)) is not None:
            self.st.refused[foreign[0]] += 1
            raise _Refused(400, orjson.loads(foreign[1])["error"])
        model: str = body["model"] if isinstance(body.get("model"), str) else self.cfg.model
        if message.get("generate") is False:
            warm = secrets.token_hex(12)  # nothing drawn: the answers' draws stay as over HTTP
            response: dict[str, Any] = {"id": f"resp_{warm}", "object": "response", "created_at": int(time.time()),
                        "status": "completed", "model": model, "output": [],
                        "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}}  # fmt: skip
            self.last = _Last(response["id"], list(items))
            return _events(response)
        tools, chosen = responses_tools(body)
        if chosen is not None and all(name != chosen for name, _ in tools):
            raise _invalid(f"fake upstream: tool_choice names {chosen!r}, which is not in tools")
        if tools and finished(body, chosen, self.cfg.finish_after):
            tools = []
        size = prompt_size(body) if self.cfg.n_ctx else 0
        if size and (refusal := too_long(size, self.cfg.n_ctx, False)) is not None:
            raise _Refused(400, orjson.loads(refusal)["error"])
        rng = greedy(self.st, body) or self.st.rng
        plan = plan_of(None, rng, self.cfg)
        assert not isinstance(plan, str)
        rid = rng.getrandbits(96)
        cfg = self.cfg
        if tools:
            rates, kinds = cfg.bad_tool_rates, cfg.bad_kinds
            last = last_calls(items)
            answer = tool_answer(tools, chosen, rng, rates, cfg.bad_tool_rate, kinds, None, cfg.prefer_tools, last)
        else:
            answer = Answer(text=make_text(rng, cfg.words))
        if plan.reset:
            return None
        if plan.delay_ms > 0:
            await asyncio.sleep(plan.delay_ms / 1000)
        if plan.status:
            raise _Refused(plan.status, {"type": "server_error", "code": None, "param": None,
                                         "message": f"fake upstream: injected {plan.status}"})  # fmt: skip
        self.st.streams += 1
        usage = (size or prompt_tokens(body), len(answer.text or answer.tool_args or "") // 4 + 1)
        reasoning = reasoning_items(body, cfg.signing_key, f"{rid:024x}")
        response = response_object(answer, f"{rid:024x}", model, usage, reasoning, offered_tools(body))
        self.last = _Last(response["id"], [*items, *response["output"]])
        return _events(response, cfg.whole_items)

    def _context(self, message: dict[str, Any]) -> list[Any]:
        """The input items this response holds: the connection's last response's, then the message's own."""
        own = message.get("input")
        if isinstance(own, str):
            own = [{"type": "message", "role": "user", "content": own}]
        elif own is None:
            own = []
        elif not isinstance(own, list):
            raise _invalid("fake upstream: 'input' must be a string or a list of items", param="input")
        previous = message.get("previous_response_id")
        if previous is None:
            return list(own)
        if self.last is None or previous != self.last.id:
            raise _invalid(f"fake upstream: previous response {str(previous)[:64]!r} not found on this connection",
                           code="previous_response_not_found", param="previous_response_id")  # fmt: skip
        return [*self.last.items, *own]


def _events(response: dict[str, Any], whole_items: bool = False) -> list[bytes]:
    """The SSE stream's events of `response`, each the JSON of one WebSocket message."""
    events = response_events(response, whole_items=whole_items)
    return [frame.split(b"\ndata: ", 1)[1].rstrip(b"\n") for frame in events]

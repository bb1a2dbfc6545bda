"""A deterministic, fault-injecting fake model server (OpenAI chat completions and Responses, Anthropic
Messages).

Users try policies with it, tests inject faults with it, benchmarks measure proxy overhead against it,
so the happy path does no sleeping and little work. Run it with ``agent-router fake-upstream`` (CLI),
``run_fake(config, host, port)`` (blocking) or ``async with await start_fake(config) as server:``.

Endpoints
  POST /v1/chat/completions  OpenAI chat completions, JSON or ``stream: true`` SSE (chunks shaped like
                             OpenAI's, ``stream_options.include_usage`` honoured).
  POST /v1/messages          Anthropic Messages API, JSON or SSE (``message_start`` ... ``message_stop``);
                             accepts ``x-api-key`` or ``Authorization: Bearer``.
  POST /v1/responses         OpenAI Responses API, JSON or SSE (``response.created`` ... ``.completed``).
  GET  /v1/responses         its WebSocket mode (router/fake/websocket.py): a connection-local cache of the
                             last response, ``generate: false``, a time limit (``ws_limit_s``).
  GET  /v1/models            lists ``config.model``.      GET /health -> ``{"status": "ok"}``.
  GET  /v1/models/{id}       Anthropic's ModelInfo of ``id`` (``max_input_tokens`` with ``n_ctx``).
  POST /v1/messages/count_tokens   Anthropic's count: ``{"input_tokens": N}`` (the fake's tokenizer).
  With ``n_ctx`` > 0, as llama.cpp's llama-server (router/fake/context.py): GET /props
  (``default_generation_settings.n_ctx``), POST /apply-template (``{"prompt"}``), POST /tokenize
  (``{"tokens"}``), ``meta.n_ctx`` in the model list, and a prompt of ``n_ctx`` tokens or more refused
  with llama-server's 400 ``exceed_context_size_error`` (on /v1/messages: Anthropic's "prompt is too
  long", over ``n_ctx``). A refusal draws nothing.
  GET  /_fake/requests       the last 100 /v1/* requests: method, path, headers (lower-case names),
                             body (parsed JSON), bytes (the body's size); WebSocket messages too
                             (method ``WS``). ``DELETE /_fake/requests`` clears them.
  GET  /_fake/stats          ``{"requests": N, "model_calls": N, "streams": N, "open_connections": N,
                             "refused": {...}, "left_early": N, "streaming": N}`` (/v1/* requests, of
                             them the model calls over HTTP (chat, Messages, Responses POSTs), streamed
                             answers, currently open TCP connections including the caller's, requests
                             refused over reasoning state by kind, looping streams whose peer left before
                             their end, answers being streamed now, over HTTP or a WebSocket: a stream
                             whose peer has gone ends at its next event).

How a model call is answered — its tool calls and their breakages, determinism, the ``x-fake-fault``
header, the rate and timing knobs, fast modes, reasoning state: router/fake/calls.py.
"""

from __future__ import annotations

import gc
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from router.fake import calls, websocket
from router.fake.calls import error_response
from router.fake.config import FakeConfig
from router.fake.context import prompt_size, render, tokenize
from router.fake.state import STATE, FakeState

__all__ = ["FakeConfig", "FakeServer", "create_fake_app", "run_fake", "start_fake"]


async def _models(request: web.Request) -> web.Response:
    st = request.app[STATE]
    st.record(request, b"")
    entry: dict[str, Any] = {"id": st.config.model, "object": "model", "created": 0, "owned_by": "agent-router-fake"}
    if st.config.n_ctx:  # as llama-server: a slot's context, and the model's (here the same)
        entry["meta"] = {"n_ctx": st.config.n_ctx, "n_ctx_train": st.config.n_ctx}
    return web.Response(body=orjson.dumps({"object": "list", "data": [entry]}), headers=calls.JSON_HEADERS)


async def _model(request: web.Request) -> web.Response:
    """Anthropic's GET /v1/models/{id}."""
    st = request.app[STATE]
    st.record(request, b"")
    info: dict[str, Any] = {"type": "model", "id": request.match_info["id"], "display_name": request.match_info["id"],
                            "created_at": "1970-01-01T00:00:00Z", "lifecycle": "active"}  # fmt: skip
    if st.config.n_ctx:
        info["max_input_tokens"] = st.config.n_ctx
    return web.Response(body=orjson.dumps(info), headers=calls.JSON_HEADERS)


async def _count_tokens(request: web.Request) -> web.Response:
    """Anthropic's POST /v1/messages/count_tokens: the fake's count, calling no model."""
    st = request.app[STATE]
    body = st.record(request, await request.read())
    if not st.authorized(request, True):
        return error_response(401, "fake upstream: invalid API key", True)
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or "max_tokens" in body:
        return error_response(400, "fake upstream: count_tokens takes a 'messages' list (and no max_tokens)", True)
    return web.Response(body=orjson.dumps({"input_tokens": prompt_size(body)}), headers=calls.JSON_HEADERS)


Handler = Callable[[web.Request], Awaitable[web.Response]]


def _llama(handler: Handler) -> Handler:
    """A llama-server endpoint: served when the fake has a context (`n_ctx`), else 404 as elsewhere."""

    async def serve(request: web.Request) -> web.Response:
        if not request.app[STATE].config.n_ctx:
            raise web.HTTPNotFound()
        return await handler(request)

    return serve


async def _props(request: web.Request) -> web.Response:
    st = request.app[STATE]
    props = {"default_generation_settings": {"n_ctx": st.config.n_ctx, "params": {}}, "total_slots": 1,
             "model_alias": st.config.model}  # fmt: skip
    return web.Response(body=orjson.dumps(props), headers=calls.JSON_HEADERS)


async def _apply_template(request: web.Request) -> web.Response:
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        body = None
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return error_response(400, "fake upstream: body must be a JSON object with a 'messages' list", False)
    return web.Response(body=orjson.dumps({"prompt": render(body)}), headers=calls.JSON_HEADERS)


async def _tokenize(request: web.Request) -> web.Response:
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        body = None
    content = body.get("content", "") if isinstance(body, dict) else None
    if not isinstance(content, str):
        return error_response(400, "fake upstream: 'content' must be a string", False)
    tokens = tokenize(content, add_special=body.get("add_special") is True)
    return web.Response(body=orjson.dumps({"tokens": tokens}), headers=calls.JSON_HEADERS)


async def _health(request: web.Request) -> web.Response:
    return web.Response(body=b'{"status":"ok"}', headers=calls.JSON_HEADERS)


async def _get_requests(request: web.Request) -> web.Response:
    return web.Response(body=orjson.dumps(list(request.app[STATE].log)), headers=calls.JSON_HEADERS)


async def _clear_requests(request: web.Request) -> web.Response:
    request.app[STATE].log.clear()
    return web.Response(body=b'{"cleared":true}', headers=calls.JSON_HEADERS)


async def _stats(request: web.Request) -> web.Response:
    st = request.app[STATE]
    # Exact when served by start_fake; otherwise aiohttp's per-connection handler knows its server.
    server = st.server or getattr(request.protocol, "_manager", None)
    connections = len(server.connections) if server is not None else 1
    body = {"requests": st.requests, "model_calls": st.model_calls, "streams": st.streams,
            "open_connections": connections, "refused": st.refused,
            "left_early": st.left_early, "streaming": st.streaming}  # fmt: skip
    return web.Response(body=orjson.dumps(body), headers=calls.JSON_HEADERS)


def create_fake_app(config: FakeConfig) -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[STATE] = FakeState(config)
    app.router.add_post("/v1/chat/completions", calls.endpoint("chat"))
    app.router.add_post("/v1/messages", calls.endpoint("messages"))
    app.router.add_post("/v1/responses", calls.endpoint("responses"))
    app.router.add_get("/v1/responses", websocket.endpoint())
    app.router.add_get("/v1/models", _models)
    app.router.add_get("/v1/models/{id}", _model)
    app.router.add_post("/v1/messages/count_tokens", _count_tokens)
    app.router.add_get("/props", _llama(_props))
    app.router.add_post("/apply-template", _llama(_apply_template))
    app.router.add_post("/tokenize", _llama(_tokenize))
    app.router.add_get("/health", _health)
    app.router.add_get("/_fake/requests", _get_requests)
    app.router.add_delete("/_fake/requests", _clear_requests)
    app.router.add_get("/_fake/stats", _stats)
    return app


class FakeServer:
    """A running fake upstream. ``url`` ends in ``/v1``; use ``async with`` or ``await close()``."""

    def __init__(self, app: web.Application, runner: web.AppRunner, host: str, port: int) -> None:
        self.app, self.runner, self.host, self.port = app, runner, host, port
        self.url = f"http://{host}:{port}/v1"

    async def close(self) -> None:
        await self.runner.cleanup()

    async def __aenter__(self) -> FakeServer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def start_fake(config: FakeConfig, host: str = "127.0.0.1", port: int = 0) -> FakeServer:
    app = create_fake_app(config)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    app[STATE].server = runner.server
    return FakeServer(app, runner, host, int(runner.addresses[0][1]))


def run_fake(config: FakeConfig, host: str, port: int) -> None:
    """Serve until interrupted (the CLI's ``agent-router fake-upstream``)."""

    def announce(_: str) -> None:  # the site is up: what the process holds now lives as long as it
        gc.freeze()  # out of the collector's scans: a full collection pauses ~1 ms, not 20-55 (benches' p99)
        print(f"fake upstream on http://{host}:{port}/v1 (seed {config.seed})", flush=True)

    web.run_app(create_fake_app(config), host=host, port=port, access_log=None, print=announce)

"""POST /v1/messages (JSON and SSE) and POST /v1/messages/count_tokens — Anthropic's Messages API.

The request is translated to a chat-completions call (router/messages/translate.py) and run through
the same pipeline as /v1/chat/completions; an `anthropic/*` tier gets the request itself instead
(`Call.native`, router/upstream/anthropic.py). `x-router-*` headers as on every transport; a stream
also ends with the `: router {json}` comment. Errors have Anthropic's shape
`{"type": "error", "error": {"type", "message"}}` with the same status codes as elsewhere, except
529 for `overloaded_error` (Anthropic's own).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import orjson
from starlette.requests import Request
from starlette.responses import Response

from router.api import admitted, authorize, endpoint, lower_headers, observe, read_body, runtime_of
from router.api.sse import SSEResponse, framed, sse_frame
from router.core.call import Call, parse_body, refuse_forbidden
from router.errors import BadRequest, Overloaded, RouterError
from router.flow import pipeline
from router.flow.summary import error_headers, router_headers
from router.messages.events import Event, MessageEvents, error_body
from router.messages.translate import chat_body, left_out, message_of, new_message_id
from router.policy.decide import features_of
from router.sessions import session_of
from router.upstream.anthropic import FORWARDED_HEADERS
from router.upstream.base import Native


def anthropic_error(exc: RouterError) -> Response:
    # Anthropic says "overloaded" with 529, which its clients (Claude Code, the SDK) back off on
    status = 529 if isinstance(exc, Overloaded) else exc.http_status
    return Response(orjson.dumps(error_body(exc)), status, error_headers(exc), media_type="application/json")


anthropic_endpoint = functools.partial(endpoint, render=anthropic_error)


def messages_call(raw: bytes, headers: Mapping[str, str], *, count_only: bool = False) -> Call:
    """Parse and check a Messages request; the chat body is what routing and the checks read."""
    request = parse_body(raw)
    refuse_forbidden(request)
    max_tokens = request.get("max_tokens")
    if not count_only and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1):
        raise BadRequest("max_tokens: Field required (a positive integer)", param="max_tokens")
    body, failed = chat_body(request)
    forwarded = {k: headers[k] for k in FORWARDED_HEADERS if k in headers}
    native = Native("messages", request, forwarded, left_out=left_out(request))
    features = features_of(body, headers)
    session = session_of(body, headers, features.prompt_tokens, request=request)
    return Call(body, headers, features, session, native, failed)


@anthropic_endpoint
async def create(request: Request) -> Response:
    async with admitted(request) as admission:
        runtime = admission.runtime
        call = messages_call(admission.body, lower_headers(request))
        model = str(call.body["model"])
        if call.stream:
            attempts, chunks = await pipeline.stream(runtime, call)
            chunks = admission.to_stream(chunks)
            events = MessageEvents(new_message_id(), model)
            frames = framed(
                admission,
                attempts,
                chunks,
                lambda chunk: _frames(events.feed(chunk)),
                fail=lambda exc: sse_frame(error_body(exc)),
                close=lambda: _frames(events.close()),
            )
            return SSEResponse(admission, frames, router_headers(attempts.outcome(priced=False)))
        outcome, reply = await pipeline.complete(runtime, call)
        observe(runtime, outcome, None)
        if reply.native is not None and reply.raw is not None:  # the tier's own answer, untouched
            return Response(reply.raw, headers=router_headers(outcome), media_type="application/json")
        message = message_of(reply.data, model, new_message_id())
        return Response(orjson.dumps(message), headers=router_headers(outcome), media_type="application/json")


@anthropic_endpoint
async def count_tokens(request: Request) -> Response:
    """The prompt's tokens as the tier the call would go to counts them (`pipeline.count`): its own
    tokenizer (llama-server's, Anthropic's count_tokens), else the router's estimate (characters / 4,
    the tool definitions included). `x-router-tier` names the tier, `x-router-count` says which
    (`tokenizer` or `estimate`). Calls no model, so takes no place among the calls in flight."""
    runtime = runtime_of(request)
    authorize(runtime, request)
    call = messages_call(await read_body(request, runtime), lower_headers(request), count_only=True)
    decision, tokens, counted = await pipeline.count(runtime, call)
    headers = {"x-router-tier": decision.tier, "x-router-route": decision.route,
               "x-router-count": "tokenizer" if counted else "estimate"}  # fmt: skip
    return Response(orjson.dumps({"input_tokens": tokens}), headers=headers, media_type="application/json")


def _frames(events: list[Event]) -> bytes:
    return b"".join(sse_frame(e) for e in events)

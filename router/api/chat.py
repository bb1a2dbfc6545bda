"""POST /v1/chat/completions — JSON and SSE."""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response

from router.api import admitted, endpoint, lower_headers, observe
from router.api.sse import SSEResponse, framed
from router.core.call import chat_call
from router.errors import RouterError
from router.flow import pipeline
from router.flow.summary import router_headers
from router.upstream.base import Chunk


@endpoint
async def completions(request: Request) -> Response:
    async with admitted(request) as admission:
        runtime = admission.runtime
        call = chat_call(admission.body, lower_headers(request))
        if call.stream:
            attempts, chunks = await pipeline.stream(runtime, call)
            chunks = admission.to_stream(chunks)
            frames = framed(admission, attempts, chunks, _data, fail=_error, done=b"data: [DONE]\n\n")
            return SSEResponse(admission, frames, router_headers(attempts.outcome(priced=False)))
        outcome, reply = await pipeline.complete(runtime, call)
        observe(runtime, outcome, None)
        body = reply.raw or orjson.dumps(reply.data)
        return Response(body, headers=router_headers(outcome), media_type="application/json")


def _data(chunk: Chunk) -> bytes:
    if chunk.beat:  # no answer yet (router/flow/pipeline.py's `stream`): an SSE comment keeps the stream alive
        return b": keep-alive\n\n"
    return b"".join((b"data: ", chunk.raw if chunk.raw is not None else orjson.dumps(chunk.data), b"\n\n"))


def _error(exc: RouterError) -> bytes:
    return b"".join((b"data: ", exc.to_json(), b"\n\n"))

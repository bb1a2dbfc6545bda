"""POST /v1/chat/completions — JSON and SSE."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from router import pipeline
from router.api import SSE_HEADERS, admitted, endpoint, lower_headers
from router.call import chat_call
from router.errors import RouterError
from router.escalation import Trace
from router.upstream.base import Chunk

if TYPE_CHECKING:
    from router.app import Router


@endpoint
async def completions(request: Request) -> Response:
    async with admitted(request) as admission:
        router = admission.router
        call = chat_call(admission.body, lower_headers(request))
        if call.stream:
            trace, chunks = await pipeline.stream(router, call)
            chunks = admission.to_stream(chunks)
            headers = {**SSE_HEADERS, **trace.headers()}
            return StreamingResponse(_observed(router, trace, chunks), media_type="text/event-stream", headers=headers)
        trace, reply = await pipeline.complete(router, call)
        router.observe(trace, None)
        return Response(reply.raw or orjson.dumps(reply.data), headers=trace.headers(), media_type="application/json")


async def _observed(router: Router, trace: Trace, chunks: AsyncIterator[Chunk]) -> AsyncIterator[bytes]:
    """SSE frames of the chunks, then the trailer; an error after the first byte becomes an error
    frame. The call is counted when the stream ends, however it ends."""
    ttft = asyncio.get_running_loop().time() - trace.started
    pending: list[bytes] = []  # frames of events that arrived together go out in one write
    try:
        async for chunk in chunks:
            pending += (b"data: ", chunk.raw if chunk.raw is not None else orjson.dumps(chunk.data), b"\n\n")
            if not chunk.more:
                yield b"".join(pending)
                pending.clear()
    except RouterError as exc:
        yield b"".join((*pending, b"data: ", exc.to_json(), b"\n\n", b": router ", trace.summary(), b"\n\n"))
        return
    finally:
        router.inflight -= 1
        router.observe(trace, ttft)
    yield b"".join((*pending, b": router ", trace.summary(), b"\n\n", b"data: [DONE]\n\n"))

"""POST /v1/responses — JSON and SSE (`stream: true`). WebSocket mode is in responses_ws.py.

The request is translated to a chat-completions call and run through the same pipeline as
/v1/chat/completions; `x-router-*` headers as there, and `x-router-dropped-tools` naming the types of
the client's tools a chat tier cannot run (web_search, ...) when the tier that answered is one (it was
not offered them). A streamed response's final decision also rides on `response.completed`
(`"router": {...}`, or on the `error` event a failure ends it with) and in a trailing `: router {json}`
comment.
Responses are remembered (unless `store: false`) for `previous_response_id` in the process cache and
the store (router/core/live/response_state.py); an unknown id, or one the store cannot look up, is a 400.

A stream's first event is sent once the pipeline has the first chunk, so a failure before it is
still a plain HTTP error with its status (as on the chat transport); later ones are `error` events.
A prompt no tier's context takes is the exception, streamed as OpenAI does: `response.created`,
`.in_progress`, `response.failed` with `context_length_exceeded` (Codex compacts on that).
Codex's `x-codex-turn-state` request header is sent back on the response (a sticky-routing token).
"""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response

from router.api import access, admitted, endpoint, lower_headers, observe
from router.api.sse import SSE_HEADERS, SSEResponse, framed, sse_frame
from router.core.call import parse_body
from router.core.live.response_state import Stored
from router.errors import ContextExceeded
from router.flow import pipeline
from router.flow.summary import router_headers
from router.responses import turn as turns


@endpoint
async def create(request: Request) -> Response:
    async with admitted(request) as admission:
        runtime = admission.runtime
        body = parse_body(admission.body)
        state = runtime.responses
        stream = body.get("stream") is True
        prev = await turns.previous(body, None, state)
        native = turns.passes_through(runtime.policy.current)
        headers = lower_headers(request)
        turn = turns.prepare(body, headers, prev, stream=stream, native=native)
        echoed = turns.turn_state(headers)  # Codex's x-codex-turn-state, sent back

        async def save(entry: Stored) -> None:
            if turn.store:
                state.put(turn.id, entry)
                await state.written(turn.id)  # a follow-up sent at once to another replica finds it

        if stream:
            try:
                attempts, chunks = await pipeline.stream(runtime, turn.call)
            except ContextExceeded as exc:  # as OpenAI streams it: a failed response (Codex compacts)
                access.note_failure(request.scope, exc)
                failed = b"".join(sse_frame(event) for event in turns.failed(turn, exc))
                return Response(failed, headers=SSE_HEADERS, media_type="text/event-stream")
            chunks = admission.to_stream(chunks)
            frames = framed(admission, attempts, turns.events(turn, attempts, chunks, save), sse_frame)
            outcome = attempts.outcome(priced=False)  # the stream's headers: its cost comes at its end
            headers = {**router_headers(outcome), **turns.left_out(runtime, turn, outcome), **echoed}
            return SSEResponse(admission, frames, headers)
        outcome, response = await turns.complete(runtime, turn, save)
        observe(runtime, outcome, None)
        headers = {**router_headers(outcome), **turns.left_out(runtime, turn, outcome), **echoed}
        return Response(orjson.dumps(response), headers=headers, media_type="application/json")

"""The Responses API on top of the chat-completions pipeline.

    translate.py   Responses request/items ↔ chat body/messages; the Response object
    events.py      chat chunks → Responses stream events (sequence numbers, item lifecycle)
    state.py       response histories for previous_response_id: bounded caches, the store behind them
    turn.py        one request whatever the transport: resolve, translate, run, remember
    native.py      pass-through to tiers that serve Responses themselves (`apis: [responses]`)

Transports: router/api/responses.py (POST, JSON and SSE) and router/api/responses_ws.py
(WebSocket mode on GET /v1/responses).
"""

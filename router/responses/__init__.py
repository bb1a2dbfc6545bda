"""The Responses API on top of the chat-completions pipeline.

    translate.py   Responses request/items ↔ chat body/messages; the Response object
    items.py       Responses input and output items ↔ chat messages
    events.py      chat chunks → Responses stream events (sequence numbers, item lifecycle)
    turn.py        one request whatever the transport: resolve, translate, run, remember

Response histories for previous_response_id (bounded caches, the store behind them) are in
router/core/live/response_state.py; tiers that serve Responses themselves (`apis: [responses]`) are
passed the request as it came by router/upstream/openai_compat.py, whose answers the checks read
through router/upstream/responses_view.py.

Transports: router/api/responses.py (POST, JSON and SSE) and router/api/responses_ws.py
(WebSocket mode on GET /v1/responses).
"""

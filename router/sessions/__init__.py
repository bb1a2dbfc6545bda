"""Sessions: one agent conversation across many calls, and everything the router keeps for it.

An agent lives in a session — a long, stable prompt prefix, many turns, side calls, escalations,
failures that repeat. This package is where the concept lives:

    identity.py   Session, session_of: which conversation a call belongs to, per client API, and
                  which of its prompts (its prefix: instructions + tools; side calls)
    affinity.py   Affinity: which server slot (llama.cpp `id_slot`) and which replica (`api_base`
                  list) keeps a session's prompt prefix on a tier, so that a turn evaluates only its
                  new tokens and side calls never evict a main prompt
    provenance.py which model made each piece of reasoning state the client replays (thinking
                  blocks' signatures, Responses' encrypted_content): each tier gets only its own
                  model's
    sockets.py    the upstream WebSocket a session's turns take on a tier with `websocket: true`
                  (router/upstream/responses_ws.py), the upstream's id of its last response, and the
                  process's bound on such sockets

What the router holds per session, and where:

    stickiness        after an agent-reported error, the next calls go to the escalation tier:
                      router/flow/feedback.py, kept in the store (`sticky_set` / `sticky_take`)
    routed calls      which tier made each tool call the agent got, to attribute the errors it
                      reports later: the store (`routed_put` / `routed_take`)
    response chains   Responses `previous_response_id` → the conversation so far:
                      router/core/live/response_state.py, the store's responses
    prefix affinity   slot and replica per tier: affinity.py, in the tier's client (process-local)
    upstream sockets  per tier with `websocket: true`: the socket, the upstream's own id of its last
                      response (a turn continuing it sends only its new input), HTTP until when after a
                      failure: sockets.py, in the tier's client (process-local); which upstream answer a
                      response is: `Stored.upstream` in the response state, in the process only
    warm prefixes     tiers a session may be escalated to keep its prefix, prefilled in the
                      background: router/core/live/warming.py
    reasoning state   which model made each thinking block and encrypted reasoning item the agent
                      replays: marked in the values themselves as they are delivered (provenance.py),
                      read back by each tier's client (router/upstream/anthropic.py, openai_compat.py),
                      which sends only its own model's — no store, alike on every replica and restart
"""

from router.sessions.identity import SESSION_HEADER, Session, session_of

__all__ = ["SESSION_HEADER", "Session", "session_of"]

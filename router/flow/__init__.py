"""One call's flow, above the parts it uses (router/core/) and below the transports (router/api/).

    pipeline.py   lane → decide → call → validate → escalate → record, for a JSON answer or a stream
    attempts.py   Attempts: the state of one routed call — its decision, each attempt's tier and body
                  (routed, repair, stronger), what each found, its deadline; of the `Runtime` it
                  holds only the `Parts` its attempts use
    retries.py    tenacity's loop for the attempts after a first run outside it; the backoff
    summary.py    what a client is told of its call's routing, on every transport: the `x-router-*`
                  headers and the `: router {json}` trailer
    salvage.py    a call written as text that validates → a structured call (no model call)

A transport parses a request into a `Call` (router/core/call.py) and hands it to `pipeline.complete`
or `pipeline.stream` with the `Runtime` (router/runtime.py); nothing here imports a transport.
"""

"""One call's flow, above the parts it uses (router/core/) and below the transports (router/api/).

    pipeline.py   lane → decide → call → check → step → record: one attempt loop for a JSON answer
                  or a stream
    attempts.py   Attempts: the state of one routed call — its decision, its attempts, what each
                  found, its deadline; its checks, verifier and failures return a step
    steps.py      what the flow does after an attempt: Deliver, Retry, Fail; the sampling state
    next_tier.py  which tier an attempt goes to: pure functions of the policy and the call's history
    record.py     Record: every side effect of a call (store, metrics, breakers, warm-ups, shadow)
    outcome.py    Outcome: the frozen record of a routed call, what everything after the flow reads
    summary.py    what a client is told of its call's routing, on every transport: the `x-router-*`
                  headers and the `: router {json}` trailer
    hedge.py      a second tier raced against the routed one after a delay
    keepalive.py  keep-alives of a stream whose first chunk is slow
    salvage.py    a call written as text that validates → a structured call (no model call)

A transport parses a request into a `Call` (router/core/call.py) and hands it to `pipeline.complete`
or `pipeline.stream` with the `Runtime` (router/runtime.py); nothing here imports a transport.
"""

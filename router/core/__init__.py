"""The pipeline core: one call's flow (pipeline.py, escalation.py) and the parts it uses — the
parsed call, lanes, checks (validate, text_calls), verifiers and answer comparison (verify,
compare), streaming (Gate, Joiner), hedging, agent feedback, recording, shadow mode, adaptive
routes, open calls, response state and tracing. Below the transports (router/api/), above the
clients (router/upstream/) and the store (router/store/)."""

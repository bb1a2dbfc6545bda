"""The parts one call's flow (router/flow/) uses — the parsed call, lanes, checks (validate,
text_calls), verifiers and answer comparison (verify, compare), streaming (Gate, Joiner), hedging,
breakers, context windows, repeats, agent feedback, recording, shadow mode, adaptive routes, open
calls, response state, warm prefixes and tracing. Below the flow and the runtime, above the clients
(router/upstream/), the store (router/store/) and the sessions (router/sessions/)."""

"""The live state one proxy keeps, across calls: tiers' breakers (breaker.py) and context windows
(context.py), adaptive routes (adaptive.py), lanes (lanes.py), exhausted requests and their repeats
(repeats.py), warm prefixes (warming.py), shadow mode (shadow.py), the calls open (open_calls.py),
response chains (response_state.py) and traces (tracing.py)."""

"""Internal constants: the bounds and timings of the running proxy that are not knobs, in one place.

Each is a ceiling that keeps memory, time or a payload bounded, or a timing no deployment needs to
change; its comment says why it has its value. Knobs a deployment may turn, and their defaults, are
in router/settings.py (`AGENT_ROUTER_*`); what to route where is in the policy. Values that are facts
of a format or library (orjson's nesting limit, the OpenAI tool-name length) stay next to their use.
"""

from __future__ import annotations

# -- client requests ------------------------------------------------------------------------------
MAX_DEPTH = 240  # nesting of a request body: orjson encodes 254 levels and the router adds a few (call.py)
CUT_AT = 0.8  # share of `shutdown_grace` after which calls still open are ended (router/core/live/open_calls.py)
# a request scope's key, set by the router's server protocol (connections.py) once the request's whole
# body is buffered: reading it cannot wait, so it is read without the `body_timeout` timer (api/__init__.py)
BODY_IN = "router.body_in"

# -- checks and judges (validate.py, verify.py, shadow.py) -----------------------------------------
MAX_SCHEMAS = 512  # compiled tool schemas kept (LRU): a few agents' tool sets, each compiled once
MAX_RULES = 64  # compiled text-call rule sets kept (LRU), one per distinct set of offered tools
SCORE_TOP = 10  # logprobs per echoed token when a tier scores a call (`via: echo`): the call's token is among them
MAX_TOOL_SETS = 64  # offered tool lists kept read (LRU): the few an agent sends, each read once
TOOL_SET_BYTES = 64 * 1024  # a longer tool list (its JSON) is read per call, not kept: 64 lists of it at most
VERDICT_CACHE_ENTRIES = 4096  # judge verdicts kept by (call, context) hash (LRU): a repeated call is judged once
JUDGE_TEXT_MAX = 1500  # characters of one message, answer or arguments shown to a judge: a short prompt
# characters of the offered tools (with their parameters) shown to a judge before the request: over
# it, the other tools' parameters are left out and only the called tool's follow the call
JUDGE_TOOLS_MAX = 8000
JUDGE_CONTEXT_MESSAGES = 6  # last messages of a conversation a shadow judge sees
PASS_SCORE = 70  # a shadow verdict with a score but no readable `pass` passes at this score or above

# -- the process ----------------------------------------------------------------------------------
# Allocations between two young-generation collections (Python's default: 700). A call allocates
# several hundred objects (parsed bodies, answers, headers), so the default collected about every
# call, each time walking the objects of every call in flight; at 20,000 that walk happens every
# few dozen calls, and most of a call's objects are already freed (by reference counting) by then.
GC_YOUNG_THRESHOLD = 20_000

# -- background work ------------------------------------------------------------------------------
ADAPTIVE_INTERVAL = 2.0  # seconds between re-reads of the mistake rates adaptive routes follow
POLICY_DEBOUNCE_MS = 200  # a policy file that changes again within this is read once (editors write twice)
RETIRE_GRACE = 30.0  # seconds a replaced tier's client stays open for calls still using it
TASKS_STOP_WAIT = 2.0  # seconds a closing runtime waits for its background tasks to end once cancelled
# seconds after which a tier's context window is asked of its server again, by the next call (never while
# idle): a server that came up after the router, or was restarted with another context, is seen within it
CONTEXT_REFRESH = 60.0
MODELS_WAIT = 1.5  # seconds GET /v1/models waits for context windows still being asked (Claude Code waits 3)

# -- the store (router/store/) --------------------------------------------------------------------
BUCKET_SECONDS = 60  # width of a time-series bucket: /v1/router/series resolution
MAX_NAME_CHARS = 200  # tier/route/tool/kind names are cut here: a model can invent any tool name
BATCH_KEYS = 2_000  # counter keys per store write: each transaction stays short for whoever waits behind it
HOUSEKEEP_SECONDS = 60.0  # seconds between prunes of expired buckets, sessions and samples

# -- response state (router/core/live/response_state.py, router/store/responses.py) ------------------------
MAX_QUEUED = 4096  # responses waiting for the store; more are not written (and counted)
WRITE_BATCH = 64  # responses per store write
MISS_GRACE = 0.05  # seconds; a store miss is read once more after this (another replica's write in flight)
COMPRESS_FROM = 512  # bytes of JSON from which a stored response is compressed; below, zlib saves little
MAX_ID_CHARS = 128  # longest response id looked up: the router's own have 37, a longer one cannot be known
DECODE_INLINE = 64 * 1024  # bytes of a chain decoded on the event loop; bigger ones on a worker thread
LOOKUP_SECONDS = 1.0  # SQLite: a lookup waiting longer (its writer thread is stuck) counts as unreachable

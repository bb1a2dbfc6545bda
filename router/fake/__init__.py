"""The fault-injecting fake upstream: an OpenAI-compatible (chat completions, Responses) and
Anthropic Messages server with fault knobs — broken tool calls, 5xx, delays, resets, malformed
SSE, endless answers. Part of the product (`agent-router fake-upstream`), used by the tests and
the benches.

    server.py     the aiohttp app, `start_fake` / `run_fake`
    calls.py      the model calls over HTTP (chat, Messages, Responses): answers, draws, faults sent
    state.py      FakeState: what an app holds (config, generator, request log, counts)
    config.py     FakeConfig: every fault's rate or delay
    faults.py     which fault a request gets (per header or drawn), and how it is sent
    tools.py      tool-call answers, broken in each mistake kind (`BAD_KINDS`)
    responses.py  the Responses API's answer shapes
    websocket.py  the Responses WebSocket mode (its connection-local cache, time limit, warm-ups)
    wire.py       chat completions and Messages on the wire
    speed.py      fast modes: Anthropic's `speed` (its beta, fast models, rate limit), OpenAI's `service_tier`
    betas.py      the Messages fields a beta admits, refused without it
    reasoning.py  reasoning state bound to a model; thinking off with an effort; `reasoning_content`
"""

from router.fake.config import FakeConfig
from router.fake.server import FakeServer, create_fake_app, run_fake, start_fake

__all__ = ["FakeConfig", "FakeServer", "create_fake_app", "run_fake", "start_fake"]

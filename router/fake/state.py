"""`FakeState`: what one fake upstream app holds — its config, the seeded generator every answer
draws from, the last 100 requests (GET /_fake/requests) and the counts GET /_fake/stats reports (`streaming`:
the answers being streamed right now, so a test sees when the router has hung up on one) — and
how a request enters it: recorded, then checked against the config's key. `STATE` is its key in the
aiohttp app (router/fake/server.py builds the app; calls.py and websocket.py answer from it).
"""

from __future__ import annotations

import random
from collections import Counter, deque
from typing import Any

import orjson
from aiohttp import web

from router.fake.config import FakeConfig
from router.fake.speed import FastLimit


class FakeState:
    def __init__(self, config: FakeConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.log: deque[dict[str, Any]] = deque(maxlen=100)
        self.requests = 0
        self.model_calls = 0  # of them, model calls over HTTP (calls.py): what a router counts as its tiers' calls
        self.streams = 0
        self.left_early = 0  # streams whose peer left before their end (the ``loop`` fault's)
        self.streaming = 0  # answers being streamed now (SSE and WebSocket): begun, not yet ended or cut off
        self.refused: Counter[str] = Counter()  # requests refused over reasoning state, by kind
        self.fast = FastLimit(config.fast_rate_limit)  # Anthropic's fast-mode rate limit (router/fake/speed.py)
        self.server: web.Server | None = None

    def record(self, request: web.Request, raw: bytes) -> Any:
        """Count and log a request; its body parsed (the raw text when it is not JSON)."""
        try:
            body: Any = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            body = raw.decode("utf-8", "replace")
        self.requests += 1
        headers = {k.lower(): v for k, v in request.headers.items()}
        self.log.append({"method": request.method, "path": request.path, "headers": headers, "body": body,
                         "bytes": len(raw)})  # fmt: skip
        return body

    def authorized(self, request: web.Request, anthropic: bool) -> bool:
        key = self.config.api_key
        if key is None or (anthropic and request.headers.get("x-api-key") == key):
            return True
        return request.headers.get("Authorization") == f"Bearer {key}"


STATE: web.AppKey[FakeState] = web.AppKey("fake_state", FakeState)

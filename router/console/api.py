"""The console's JSON API: a FastAPI app mounted at `/console/api` (OpenAPI at `/console/api/docs`).

    GET /overview            tiers (price source, breaker, context window), the baseline, calls per
                             tier and mistakes caught (the store's counters), cost against the baseline
    GET /series              calls per tier and mistakes per time bucket, for the overview's chart
    GET /sessions            the most recently active sessions with their totals
    GET /sessions/{id}       one session: its totals and its calls, each with its decision chain
    GET /calls               the newest calls of every session (what the live tail starts from)
    GET /calls/live          the live tail: every finished call, pushed as an SSE event the moment
                             it ends (router/core/live/feed.py); a comment every `HEARTBEAT` seconds

Access (`access`): open on loopback when there are no client keys; otherwise it needs the admin key
(`AGENT_ROUTER_ADMIN_KEY`, header `x-admin-key` or `Authorization: Bearer`), and without one
configured the console is off (403 saying so; the log said so at start).
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

import orjson
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from router.console import views
from router.core.live.feed import TooManyViewers
from router.runtime import Runtime

HEARTBEAT = 15.0  # seconds between SSE comments while no call ends (proxies close silent streams)
Access = Literal["open", "key", "off"]


def access(runtime: Runtime) -> tuple[Access, str]:
    """Whether the console is open, needs the admin key, or is off — and why."""
    settings, policy = runtime.settings, runtime.policy.current
    if settings.admin_key is not None and settings.admin_key.get_secret_value():
        return "key", "the admin key is asked for"
    if policy.client_keys or settings.client_keys:
        return "off", "the router has client keys and no admin key: set AGENT_ROUTER_ADMIN_KEY to open the console"
    if not _loopback(settings.host):
        return "off", (f"the router listens on {settings.host}, beyond loopback, with no key: set "
                       "AGENT_ROUTER_ADMIN_KEY to open the console")  # fmt: skip
    return "open", "open on loopback (no client keys)"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def runtime_of(request: Request) -> Runtime:
    return request.app.state.runtime  # type: ignore[no-any-return]


def allowed(request: Request) -> Runtime:
    """The runtime, once the request may see the console (a dependency of every route)."""
    runtime = runtime_of(request)
    mode, why = access(runtime)
    if mode == "off":
        raise HTTPException(403, f"The console is off: {why}.")
    if mode == "key":
        expected = runtime.settings.admin_key.get_secret_value() if runtime.settings.admin_key else ""
        auth = request.headers.get("authorization", "")
        given = auth[7:].strip() if auth[:7].lower() == "bearer " else request.headers.get("x-admin-key", "")
        if not hmac.compare_digest(given.encode(), expected.encode()):
            raise HTTPException(401, "The console needs the admin key (header x-admin-key).")
    return runtime


Allowed = Annotated[Runtime, Depends(allowed)]


class Tier(BaseModel):
    name: str
    model: str
    price: str  # where its prices come from (router/core/live/prices.py)
    breaker: str  # closed, open, half_open
    context_window: int | None
    ttft_ms: float | None  # median time to first token of its answers among the recent calls
    prefix_reused: float | None  # share of its prompt tokens read from its cache (the store's counters)


class Overview(BaseModel):
    tiers: list[Tier]
    baseline: str | None
    calls: dict[str, int]  # answers per tier (the store's counters)
    mistakes: dict[str, int]  # caught, by kind
    escalated: int
    sessions: int  # with calls kept
    cost_usd: float  # of the kept calls of the listed sessions
    baseline_cost_usd: float
    saved_usd: float
    unpriced: int
    viewers: int  # of the live tail on this process
    access: str


class SessionTotals(BaseModel):
    id: str
    first: float
    last: float
    calls: int
    tiers: dict[str, int]
    escalated: int
    sticky: int
    exhausted: int
    mistakes: dict[str, int]  # caught by the router, by kind
    reported: int  # reached the agent: routed calls it reported failed
    tokens: dict[str, int]
    cost_usd: float
    baseline_cost_usd: float
    saved_usd: float
    unpriced: int
    seconds: float


class Session(BaseModel):
    session: SessionTotals
    calls: list[dict[str, Any]]  # newest first, each with its decision chain (`Outcome.to_json`)


class Sessions(BaseModel):
    sessions: list[SessionTotals]


class Calls(BaseModel):
    calls: list[dict[str, Any]]


def create() -> FastAPI:
    """The console's API; mounted by router/app.py, which sets `app.state.runtime`."""
    app = FastAPI(title="agent-router console", docs_url="/docs", openapi_url="/openapi.json", redoc_url=None)
    app.get("/overview", response_model=Overview)(overview)
    app.get("/series")(series)
    app.get("/sessions", response_model=Sessions)(sessions)
    app.get("/sessions/{session_id}", response_model=Session)(session)
    app.get("/calls", response_model=Calls)(calls)
    app.get("/calls/live")(live)
    return app


async def overview(runtime: Allowed) -> Overview:
    policy, ledger = runtime.policy.current, runtime.ledger
    prices = ledger.prices(policy)
    stats = await runtime.store.stats(None)
    breakers = runtime.breakers.snapshot()
    windows = runtime.windows.known()
    counted = {t: v for t, v in (stats.get("tiers") or {}).items() if isinstance(v, dict)}
    ttft = views.first_tokens(await views.recent(runtime.store, views.MAX_CALLS))
    tiers = [
        Tier(name=name, model=tier.model, price=prices.sources.get(name, ""),
             breaker=str((breakers.get(name) or {}).get("state", "closed")), context_window=windows.get(name),
             ttft_ms=ttft.get(name), prefix_reused=_reused((counted.get(name) or {}).get("prompt_tokens")))
        for name, tier in policy.models.items()
    ]  # fmt: skip
    listed = await views.sessions(runtime.store, views.MAX_SESSIONS)
    cost = sum(s["cost_usd"] for s in listed)
    baseline = sum(s["baseline_cost_usd"] for s in listed)
    mistakes: dict[str, int] = {}
    for per_tier in counted.values():
        for kind, n in (per_tier.get("mistakes") or {}).items():
            mistakes[kind] = mistakes.get(kind, 0) + int(n)
    return Overview(
        tiers=tiers, baseline=prices.baseline, calls={t: int(v.get("calls", 0)) for t, v in counted.items()},
        mistakes=mistakes, escalated=sum(int(v.get("escalations", 0)) for v in counted.values()), sessions=len(listed),
        cost_usd=round(cost, 6), baseline_cost_usd=round(baseline, 6), saved_usd=round(baseline - cost, 6),
        unpriced=sum(s["unpriced"] for s in listed), viewers=runtime.feed.viewers, access=access(runtime)[1],
    )  # fmt: skip


def _reused(prompt: Any) -> float | None:
    """The share of a tier's prompt tokens it read from its cache (None: it counted none)."""
    if not isinstance(prompt, dict):
        return None
    evaluated, reused = int(prompt.get("evaluated", 0)), int(prompt.get("reused", 0))
    return round(reused / (evaluated + reused), 4) if evaluated + reused else None


async def series(runtime: Allowed, since: float | None = None, bucket: int = 60) -> dict[str, Any]:
    """Counters per time bucket: rows of [bucket start, tier, route, tool, kind, count]."""
    if not 60 <= bucket <= 86400:
        raise HTTPException(400, "'bucket' must be between 60 and 86400 seconds.")
    return {"rows": await runtime.store.series(since if since is not None else time.time() - 3600, bucket)}


async def sessions(runtime: Allowed, limit: int = 50) -> Sessions:
    listed = await views.sessions(runtime.store, limit)
    return Sessions(sessions=[SessionTotals(**s) for s in listed])


async def session(session_id: str, runtime: Allowed) -> Session:
    found = await views.session(runtime.store, session_id)
    if found is None:
        raise HTTPException(404, "No calls of this session are kept.")
    return Session(session=SessionTotals(**found["session"]), calls=found["calls"])


async def calls(runtime: Allowed, limit: int = 100) -> Calls:
    return Calls(calls=await views.recent(runtime.store, limit))


async def live(request: Request, runtime: Allowed) -> StreamingResponse:
    """Every call as it ends, as SSE `data:` events; the stream ends when this viewer falls behind."""
    try:
        watching = runtime.feed.watch()
        viewer = await watching.__aenter__()
    except TooManyViewers as exc:
        raise HTTPException(503, str(exc)) from None

    async def events() -> AsyncIterator[bytes]:
        try:
            yield b": watching\n\n"
            pending = asyncio.ensure_future(anext(viewer, None))
            try:
                while True:
                    done, _ = await asyncio.wait({pending}, timeout=HEARTBEAT)
                    if not done:
                        yield b": beat\n\n"
                        continue
                    record = pending.result()
                    if record is None:
                        return  # dropped, behind: the page reconnects and reads the store
                    yield b"data: " + orjson.dumps(record) + b"\n\n"
                    pending = asyncio.ensure_future(anext(viewer, None))
            finally:
                pending.cancel()
        finally:
            await watching.__aexit__(None, None, None)

    headers = {"cache-control": "no-store", "x-accel-buffering": "no"}
    return StreamingResponse(events(), media_type="text/event-stream", headers=headers)

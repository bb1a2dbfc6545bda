"""Health, models, stats and metrics."""

from __future__ import annotations

import time
from importlib.resources import files

import orjson
import yaml
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from router.api import authorize, endpoint, router_of
from router.errors import BadRequest


def _json(data: object, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status, media_type="application/json")


@endpoint
async def root(request: Request) -> Response:
    """GET and HEAD /: a client's reachability probe, and a pointer for a person."""
    return _json(
        {
            "service": "agent-router",
            "api": "/v1",
            "endpoints": ["/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/models"],
            "health": "/healthz",
        }
    )


@endpoint
async def healthz(request: Request) -> Response:
    router = router_of(request)
    holder = router.policy
    unusable = router.store.unusable
    status = "starting" if not router.ready else "degraded" if unusable else "ok"
    body = {"status": status, "policy_version": holder.version}
    if unusable:
        body["store"] = f"the {router.store.backend} store cannot be used: {unusable}; nothing is counted"
    if holder.last_error:
        body["policy_error"] = "the policy file on disk is invalid; the previous version is in use"
    return _json(body, 200 if router.ready else 503)


@endpoint
async def readyz(request: Request) -> Response:
    """Ready for traffic: started, and the store can be used (503 while degraded)."""
    router = router_of(request)
    ready = router.ready and not router.store.unusable
    body = {"status": "ready" if ready else "degraded" if router.ready else "starting"}
    if router.store.unusable:
        body["store"] = router.store.unusable
    return _json(body, 200 if ready else 503)


@endpoint
async def models(request: Request) -> Response:
    router = router_of(request)
    authorize(router, request)
    policy = router.policy.current
    now = int(time.time())
    data = [{"id": name, "object": "model", "created": now, "owned_by": "agent-router"} for name in policy.models]
    data += [
        {"id": alias, "object": "model", "created": now, "owned_by": "agent-router", "routes_to": target}
        for alias, target in policy.aliases.items()
        if not any(ch in alias for ch in "*?[")
    ]
    return _json({"object": "list", "data": data})


@endpoint
async def stats(request: Request) -> Response:
    router = router_of(request)
    authorize(router, request)
    window = request.query_params.get("window")
    try:
        seconds = float(window) if window else None
    except ValueError:
        raise BadRequest("'window' must be a number of seconds.", param="window") from None
    # the breakers are this process's (router/core/breaker.py): under workers, the answering worker's
    return _json({**await router.store.stats(seconds), "breakers": router.breakers.snapshot()})


@endpoint
async def series(request: Request) -> Response:
    """Counters per time bucket since `since` (unix seconds), for plots: rows of
    [bucket start, tier, route, tool, kind, count]."""
    router = router_of(request)
    authorize(router, request)
    try:
        since = float(request.query_params.get("since") or time.time() - 3600)
        bucket = int(request.query_params.get("bucket") or 60)
    except ValueError:
        raise BadRequest("'since' and 'bucket' must be numbers.", param="since") from None
    if not 1 <= bucket <= 86400:
        raise BadRequest("'bucket' must be between 1 and 86400 seconds.", param="bucket")
    return _json({"rows": await router.store.series(since, max(bucket, 60))})


@endpoint
async def metrics(request: Request) -> Response:
    return Response(router_of(request).metrics.render(), media_type="text/plain; version=0.0.4")


@endpoint
async def openapi(request: Request) -> Response:
    """GET /openapi.json: the HTTP surface (router/api/openapi.yaml), read once per app."""
    state = request.app.state
    document: bytes | None = getattr(state, "openapi", None)
    if document is None:
        text = files("router.api").joinpath("openapi.yaml").read_text(encoding="utf-8")
        document = state.openapi = orjson.dumps(yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
    return Response(document, media_type="application/json")


routes = [
    Route("/", root, methods=["GET"]),  # HEAD too (Starlette adds it to GET routes)
    Route("/healthz", healthz, methods=["GET"]),
    Route("/readyz", readyz, methods=["GET"]),
    Route("/v1/models", models, methods=["GET"]),
    Route("/v1/router/stats", stats, methods=["GET"]),
    Route("/v1/router/series", series, methods=["GET"]),
    Route("/metrics", metrics, methods=["GET"]),
    Route("/openapi.json", openapi, methods=["GET"]),
]

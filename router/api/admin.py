"""Health, models, stats and metrics."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources import files

import orjson
import yaml
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from router.api import authorize, endpoint, runtime_of
from router.api.messages import anthropic_error
from router.console import views
from router.constants import MODELS_WAIT
from router.errors import BadRequest, NotFound, RouterError, UnknownPath
from router.policy.model import Policy


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
    """Alive (200 once started): `ok`, or `degraded` with the store's state — unusable since start-up, or
    lost while serving (a Redis outage: since when, why, counters waiting)."""
    runtime = runtime_of(request)
    holder = runtime.policy
    store = runtime.store
    unusable = store.unusable
    status = "starting" if not runtime.ready else "degraded" if unusable or not store.healthy else "ok"
    body: dict[str, object] = {"status": status, "policy_version": holder.version}
    if unusable:
        body["store"] = f"the {store.backend} store cannot be used: {unusable}; nothing is counted"
    elif not store.healthy:
        body["store"] = store.health()
    if holder.last_error:
        body["policy_error"] = "the policy file on disk is invalid; the previous version is in use"
    return _json(body, 200 if runtime.ready else 503)


@endpoint
async def readyz(request: Request) -> Response:
    """Ready for traffic: started, and the store could be used once (503 until then). A store lost while
    serving (Redis gone) leaves the replica ready — it answers every call — with `"store"` saying so:
    replicas sharing one Redis would otherwise all leave the load balancer at once (docs/operations.md)."""
    runtime = runtime_of(request)
    store = runtime.store
    ready = runtime.ready and not store.unusable
    body: dict[str, object] = {"status": "ready" if ready else "degraded" if runtime.ready else "starting"}
    if store.unusable:
        body["store"] = store.unusable
    elif not store.healthy:
        body["store"] = store.health()
    return _json(body, 200 if ready else 503)


@dataclass(frozen=True, slots=True)
class Listed:
    """A model id clients may ask for: a tier, or `auto` (the routes decide), with its context window
    in tokens (None: not known) and the aliases that name it."""

    id: str
    window: int | None
    aliases: tuple[str, ...]
    label: str = ""  # a name for people (Anthropic's display_name); "" = the id


def listed(policy: Policy, windows: Mapping[str, int]) -> list[Listed]:
    """Each tier once, then `auto` if the policy routes it, then the same under the names of the
    policy's `discovery` (`claude-router`, `claude-router-<tier>`: what Claude Code's model picker
    keeps). `auto`'s window is the largest of the tiers its routes and escalations use (None unless
    all are known): a prompt goes to one it fits."""
    named: dict[str, list[str]] = {}
    for alias, target in policy.aliases.items():
        if not any(ch in alias for ch in "*?[") and alias != target:
            named.setdefault(target, []).append(alias)
    out = [Listed(name, windows.get(name), tuple(named.get(name, ()))) for name in policy.models]
    if policy.resolve_alias("auto") == "auto":
        used = {r.use for r in policy.routes} | {r.adaptive.to for r in policy.routes if r.adaptive and r.adaptive.to}
        used |= set(policy.escalation.chain)
        window = max(windows[t] for t in used) if all(t in windows for t in used) else None
        out.append(Listed("auto", window, tuple(named.get("auto", ()))))
    by_id = {m.id: m for m in out}
    out += [Listed(name, by_id[target].window, (), f"agent-router {target}")
            for name, target in policy.discovery.names(policy.models).items()
            if target in by_id and name not in by_id]  # fmt: skip
    return out


def _openai_model(model: Listed, created: int) -> dict[str, object]:
    """OpenAI's model object, with the router's `context_window` (tokens) and `aliases`."""
    return {"id": model.id, "object": "model", "created": created, "owned_by": "agent-router",
            "context_window": model.window, "aliases": list(model.aliases)}  # fmt: skip


def _anthropic_model(model: Listed) -> dict[str, object]:
    """Anthropic's ModelInfo: `max_input_tokens` is the context window (omitted when not known)."""
    info: dict[str, object] = {"type": "model", "id": model.id, "display_name": model.label or model.id,
                               "created_at": _EPOCH, "lifecycle": "active"}  # fmt: skip
    if model.window is not None:
        info["max_input_tokens"] = model.window
    return info


_EPOCH = "1970-01-01T00:00:00Z"  # Anthropic's ModelInfo.created_at "when the release date is unknown"


async def _listed(request: Request) -> list[Listed]:
    runtime = runtime_of(request)
    authorize(runtime, request)
    await runtime.windows.settled(MODELS_WAIT)  # windows still being asked (at start-up)
    return listed(runtime.policy.current, runtime.windows.known())


def _anthropic(request: Request) -> bool:
    """The client speaks Anthropic's API (its SDKs and Claude Code send `anthropic-version`)."""
    return "anthropic-version" in request.headers


@endpoint
async def models(request: Request) -> Response:
    """GET /v1/models: each tier once and `auto`, with their context windows — OpenAI's list, or
    Anthropic's to a client that speaks it (Claude Code's gateway model discovery), errors included."""
    try:
        found = await _listed(request)
    except RouterError as exc:
        if not _anthropic(request):
            raise
        return anthropic_error(exc)
    if _anthropic(request):
        data = [_anthropic_model(m) for m in found]
        first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
        return _json({"data": data, "has_more": False, "first_id": first, "last_id": last})
    created = int(time.time())
    return _json({"object": "list", "data": [_openai_model(m, created) for m in found]})


@endpoint
async def model(request: Request) -> Response:
    """GET /v1/models/{model_id}: one of them, in the client's API's shape."""
    model_id = request.path_params["model_id"]
    try:
        one = next((m for m in await _listed(request) if m.id == model_id), None)
        if one is None:
            raise NotFound(f"The model {model_id[:100]!r} is not listed here; see GET /v1/models.", param="model")
    except RouterError as exc:
        if not _anthropic(request):
            raise
        return anthropic_error(exc)
    return _json(_anthropic_model(one) if _anthropic(request) else _openai_model(one, int(time.time())))


@endpoint
async def stats(request: Request) -> Response:
    runtime = runtime_of(request)
    authorize(runtime, request)
    window = request.query_params.get("window")
    try:
        seconds = float(window) if window else None
    except ValueError:
        raise BadRequest("'window' must be a number of seconds.", param="window") from None
    # the breakers are this process's (router/core/live/breaker.py): under workers, the answering worker's
    return _json({**await runtime.store.stats(seconds), "breakers": runtime.breakers.snapshot()})


@endpoint
async def series(request: Request) -> Response:
    """Counters per time bucket since `since` (unix seconds), for plots: rows of
    [bucket start, tier, route, tool, kind, count]."""
    runtime = runtime_of(request)
    authorize(runtime, request)
    try:
        since = float(request.query_params.get("since") or time.time() - 3600)
        bucket = int(request.query_params.get("bucket") or 60)
    except ValueError:
        raise BadRequest("'since' and 'bucket' must be numbers.", param="since") from None
    if not 1 <= bucket <= 86400:
        raise BadRequest("'bucket' must be between 1 and 86400 seconds.", param="bucket")
    return _json({"rows": await runtime.store.series(since, max(bucket, 60))})


@endpoint
async def sessions(request: Request) -> Response:
    """Recent sessions, newest first, with their cost against the baseline (router/console/views.py)."""
    runtime = runtime_of(request)
    authorize(runtime, request)
    limit = _count(request, "limit", 50)
    return _json({"sessions": await views.sessions(runtime.store, limit)})


@endpoint
async def session(request: Request) -> Response:
    """One session's totals and calls, each with its decision chain."""
    runtime = runtime_of(request)
    authorize(runtime, request)
    found = await views.session(runtime.store, request.path_params["session_id"], _count(request, "limit", 500))
    if found is None:
        raise UnknownPath("No calls of this session are kept.")
    return _json(found)


def _count(request: Request, name: str, default: int) -> int:
    value = request.query_params.get(name)
    if value is None:
        return default
    if not value.isdigit() or not 1 <= int(value) <= 1000:
        raise BadRequest(f"'{name}' must be a whole number from 1 to 1000.", param=name)
    return int(value)


@endpoint
async def metrics(request: Request) -> Response:
    return Response(runtime_of(request).metrics.render(), media_type="text/plain; version=0.0.4")


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
    Route("/v1/models/{model_id}", model, methods=["GET"]),
    Route("/v1/router/stats", stats, methods=["GET"]),
    Route("/v1/router/series", series, methods=["GET"]),
    Route("/v1/router/sessions", sessions, methods=["GET"]),
    Route("/v1/router/sessions/{session_id}", session, methods=["GET"]),
    Route("/metrics", metrics, methods=["GET"]),
    Route("/openapi.json", openapi, methods=["GET"]),
]

"""The console, one mount at `/console` (router/app.py): the page at `/console/` (its files at
`/console/static/`), the JSON API at `/console/api/` (router/console/api.py, its own OpenAPI at
`/console/api/openapi.json`). Its access is its own (`api.access`: the admin key), tested in
tests/console/."""

from __future__ import annotations

import functools
import logging
from pathlib import Path

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from router.console import api
from router.runtime import Runtime

log = logging.getLogger("router.console")
PAGE = Path(__file__).parent / "page"


@functools.cache
def _index() -> bytes:
    return (PAGE / "index.html").read_bytes()


async def page(request: Request) -> Response:
    mode, why = api.access(request.app.state.runtime)  # the router's app (a Route's request)
    if mode == "off":
        text = f"<!doctype html><title>agent-router console</title><p>The console is off: {why}.</p>"
        return HTMLResponse(text, status_code=403)
    return Response(_index(), media_type="text/html; charset=utf-8", headers={"cache-control": "no-store"})


def mount(runtime: Runtime) -> Mount:
    """The console for `runtime`'s app; the log says whether it is open."""
    app = api.create()
    app.state.runtime = runtime
    mode, why = api.access(runtime)
    (log.warning if mode == "off" else log.info)("console at /console/: %s", why)
    return Mount("/console", routes=[
        Route("/", page, methods=["GET"]),
        Mount("/static", app=StaticFiles(directory=PAGE), name="console-static"),
        Mount("/api", app=app),
    ])  # fmt: skip

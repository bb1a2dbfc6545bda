"""What FastAPI's request handling costs per call, against plain Starlette: `python -m bench.fastapi_cost [calls]`.

One handler (read the JSON body, answer it back) served three ways, each driven in process by a raw
ASGI call loop (no sockets, no HTTP client: only the framework's own work is measured):

    starlette        Starlette(routes=[Route(path, handler)]) — how the proxy's hot path is served
    fastapi          FastAPI().add_api_route(path, handler): the same handler, taking the Request
    fastapi (body)   a FastAPI endpoint that declares its body (`body: dict[str, Any]`): FastAPI reads,
                     parses and validates it before the handler runs, as a typical FastAPI app does

Each variant runs `calls` POSTs of a 2 KB chat request, in 5 rounds after a warm-up; the table gives
the median round's microseconds per call and the extra over Starlette. Writes bench/results/fastapi_cost.md.
"""

from __future__ import annotations

import asyncio
import platform
import statistics
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import orjson
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message

PATH = "/v1/chat/completions"
BODY = orjson.dumps(
    {
        "model": "auto",
        "messages": [{"role": "user", "content": "Summarise the change in one line. " * 40}],
        "tools": [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}],
    }
)
ROUNDS = 5


async def handler(request: Request) -> Response:
    data = orjson.loads(await request.body())
    return Response(orjson.dumps({"model": data["model"], "ok": True}), media_type="application/json")


def apps() -> dict[str, ASGIApp]:
    plain = Starlette(routes=[Route(PATH, handler, methods=["POST"])])
    fast = FastAPI()
    fast.add_api_route(PATH, handler, methods=["POST"])
    typed = FastAPI()

    async def with_body(body: dict[str, Any]) -> Response:
        return Response(orjson.dumps({"model": body["model"], "ok": True}), media_type="application/json")

    typed.add_api_route(PATH, with_body, methods=["POST"])
    return {"starlette": plain, "fastapi": fast, "fastapi (body)": typed}


def scope() -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": PATH,
        "raw_path": PATH.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
    }


async def call(app: ASGIApp) -> int:
    status = 0

    async def receive() -> Message:
        return {"type": "http.request", "body": BODY, "more_body": False}

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope(), receive, send)
    return status


async def per_call_us(app: ASGIApp, calls: int) -> float:
    """The median round's microseconds per call."""
    for _ in range(min(calls, 500)):  # warm-up
        assert await call(app) == 200
    rounds = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        for _ in range(calls):
            await call(app)
        rounds.append((time.perf_counter() - started) / calls * 1e6)
    return statistics.median(rounds)


async def main(calls: int) -> str:
    results = {name: await per_call_us(app, calls) for name, app in apps().items()}
    base = results["starlette"]
    lines = [
        "# FastAPI's request handling cost, against plain Starlette",
        "",
        f"`python -m bench.fastapi_cost {calls}` — {calls} in-process ASGI calls per round, median of "
        f"{ROUNDS} rounds; Python {platform.python_version()}, starlette {version('starlette')}, "
        f"fastapi {version('fastapi')}, {platform.machine()}.",
        "",
        "| served by | µs per call | over Starlette |",
        "|---|---:|---:|",
    ]
    for name, us in results.items():
        lines.append(f"| {name} | {us:.1f} | {'—' if name == 'starlette' else f'+{us - base:.1f} µs'} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    report = asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 5000))
    print(report)
    Path(__file__).with_name("results").joinpath("fastapi_cost.md").write_text(report)

"""The fake upstream over TLS, as a provider is reached: `python -m bench.ttft.upstream_fake --port P
--cert C --key K [--close] [--first-token-delay-ms T]`.

Serves router/fake as `agent-router fake-upstream` does (HTTP, SSE and the Responses WebSocket mode),
behind TLS with the given certificate. `--close`: every HTTP response ends its connection
(`Connection: close`), so a client pays a new TCP and TLS handshake per request — the benchmark's
"new connection" way. Answers: always one `read_file` call (the agent loop never finishes).
"""

from __future__ import annotations

import argparse
import ssl
from collections.abc import Awaitable, Callable

from aiohttp import web

from router.fake import FakeConfig, create_fake_app

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _closing(request: web.Request, handler: Handler) -> web.StreamResponse:
    response = await handler(request)
    if not isinstance(response, web.WebSocketResponse):
        response.force_close()  # `Connection: close`: the next request opens a new connection
    return response


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--close", action="store_true", help="no keep-alive: one connection per request")
    parser.add_argument("--first-token-delay-ms", type=float, default=20.0)
    args = parser.parse_args()
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(args.cert, args.key)
    config = FakeConfig(seed=1, first_token_delay_ms=args.first_token_delay_ms, prefer_tools=("read_file",))
    app = create_fake_app(config)
    if args.close:
        app.middlewares.append(_closing)
    web.run_app(app, host="127.0.0.1", port=args.port, ssl_context=ctx, access_log=None, print=None)


if __name__ == "__main__":
    main()

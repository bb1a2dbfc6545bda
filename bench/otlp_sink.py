"""A small OTLP/HTTP trace receiver: `python -m bench.otlp_sink --port N` (or `Sink` in a test).

It answers `POST /v1/traces` as a collector does (protobuf `ExportTraceServiceRequest` in, an empty
`ExportTraceServiceResponse` out; gzip bodies accepted), decodes every request with
opentelemetry-proto and keeps the spans (in a test) or only counts them (`GET /count`, for benches).
"""

from __future__ import annotations

import argparse
import gzip
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

MAX_BODY = 64 * 1024 * 1024


def value_of(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value_of(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value_of(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind) if kind else None


@dataclass
class Received:
    span: Span
    resource: dict[str, Any]

    @property
    def attrs(self) -> dict[str, Any]:
        return {kv.key: value_of(kv.value) for kv in self.span.attributes}

    @property
    def name(self) -> str:
        return self.span.name


@dataclass
class Sink:
    keep: bool = True  # keep the decoded spans (tests); else count only (benches)
    spans: list[Received] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)  # request bodies as received (decompressed)
    requests: int = 0
    count: int = 0

    async def traces(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("content-encoding", "").lower() == "gzip":
            body = gzip.decompress(body)
        message = ExportTraceServiceRequest.FromString(body)
        self.requests += 1
        for rs in message.resource_spans:
            resource = {kv.key: value_of(kv.value) for kv in rs.resource.attributes}
            for ss in rs.scope_spans:
                self.count += len(ss.spans)
                if self.keep:
                    self.spans.extend(Received(span, resource) for span in ss.spans)
        if self.keep:
            self.raw.append(body)
        out = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=out, content_type="application/x-protobuf")

    async def counted(self, request: web.Request) -> web.Response:
        return web.json_response({"requests": self.requests, "spans": self.count})

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post("/v1/traces", self.traces)
        app.router.add_get("/count", self.counted)
        return app


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.otlp_sink", description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    web.run_app(Sink(keep=False).app(), host="127.0.0.1", port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()

"""OpenTelemetry traces of routed calls: off unless the standard `OTEL_*` variables configure them.

On when `OTEL_TRACES_EXPORTER` names `otlp` (or `console`), or, with it unset, when
`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set; `OTEL_SDK_DISABLED=true`
or `OTEL_TRACES_EXPORTER=none` keep it off. Export is OTLP/HTTP (protobuf) in batches, from the
SDK's own thread; the exporter reads its endpoint, headers, timeout and compression, and the SDK its
sampler (`OTEL_TRACES_SAMPLER`) and resource (`OTEL_SERVICE_NAME`, default `agent-router`), from the
environment. The SDK is imported only when tracing is on: off, every hook is a no-op (`OFF`).

One span per call (kind SERVER, a child of the client's `traceparent` when it sends one), and one
child per attempt (kind CLIENT: one upstream tier asked), named and attributed after the GenAI
semantic conventions (`gen_ai.operation.name`, `gen_ai.request.model`, `gen_ai.response.model`,
`gen_ai.usage.input_tokens`/`output_tokens`, `gen_ai.provider.name`), plus the routing: `agent_router.tier`,
`.route`, `.escalated`, `.mistakes`, `.lane`, `.verdicts`, `.tiers`, `.reason`, `.cost_usd`,
`.baseline_cost_usd` (lists and flags only when not empty: every attribute costs the exporter's encoding).
Prompts and answers are never put in spans, unless `otel_capture_content` (settings) asks for
them: then `gen_ai.input.messages` and `gen_ai.output.messages`, as JSON, each cut at 64 KiB.

The pipeline calls `start(attempts)` once a call is routed, wraps each attempt in
`span.attempt(attempts)` (told its step: `ended(how, error)`), passes the answer (`span.answer`,
JSON) or its chunks (`span.chunk`, streams) and ends with `span.end(attempts)` in a `finally`, which
reads the exception, if any, that is ending the call.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import logging
import os
import sys
import time
from collections.abc import Mapping
from types import SimpleNamespace, TracebackType
from typing import TYPE_CHECKING, Any, Protocol

import orjson

if TYPE_CHECKING:
    from router.core.call import Call
    from router.core.live.lanes import Choice
    from router.policy.decide import Decision
    from router.policy.model import Policy
    from router.settings import Settings
    from router.upstream.base import Chunk


class Traced(Protocol):
    """What a span reads of a call's `attempts.Attempts` (so tracing needs no import of it)."""

    call: Call
    started: float
    tier: str
    route: str
    decision: Decision
    tried: list[str]
    mistakes: list[str]
    verdicts: list[str]
    repaired: bool
    lane: Choice
    policy: Policy

    @property
    def escalated(self) -> bool: ...

    def outcome(self) -> Any: ...  # the call's frozen record (router/flow/outcome.py)


log = logging.getLogger("router.tracing")

__all__ = ["OFF", "CallSpan", "Span", "Tracing", "exporter_of"]

CONTENT_MAX = 64 * 1024  # bytes of captured prompt or answer JSON per span (opt-in only)
EXPORTERS = ("otlp", "console")


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def exporter_of(environ: Mapping[str, str]) -> str | None:
    """The span exporter the environment asks for (`otlp`, `console`), or None: tracing off.
    ValueError when it asks for what this router cannot do (another exporter, OTLP over gRPC)."""
    if _truthy(environ.get("OTEL_SDK_DISABLED")):
        return None
    named = [x.strip().lower() for x in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if x.strip()]
    if not named:
        endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        named = ["otlp"] if endpoint else ["none"]
    if "none" in named:
        return None
    unknown = [x for x in named if x not in EXPORTERS]
    if unknown or len(named) > 1:
        wanted = ",".join(named)
        raise ValueError(f"OTEL_TRACES_EXPORTER={wanted}: agent-router exports traces with one of: otlp, console")
    if named[0] == "otlp":
        protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        if protocol and protocol.strip().lower() != "http/protobuf":
            raise ValueError(f"OTLP protocol {protocol!r}: agent-router exports traces over http/protobuf only")
    if importlib.util.find_spec("opentelemetry.sdk") is None:
        raise ValueError(
            "OTEL_* variables ask for traces, but OpenTelemetry is not installed: pip install 'agent-router[otel]'"
        )
    return named[0]


class _Off:
    """Tracing off: every hook does nothing (one shared instance)."""

    __slots__ = ()

    def attempt(self, attempts: Traced) -> _OffAttempt:
        return _OFF_ATTEMPT

    def answer(self, data: Mapping[str, Any]) -> None:
        pass

    def chunk(self, chunk: Chunk) -> Chunk:
        return chunk

    def end(self, attempts: Traced) -> None:
        pass


class _OffAttempt:
    __slots__ = ()

    def __enter__(self) -> _OffAttempt:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def ended(self, how: str, error: BaseException | None = None) -> None:
        pass


OFF = _Off()
_OFF_ATTEMPT = _OffAttempt()


class Tracing:
    """The router's tracer provider (one per process), built at start, flushed and shut at close."""

    def __init__(self, settings: Settings, environ: Mapping[str, str] | None = None) -> None:
        self.environ = os.environ if environ is None else environ
        self.exporter = exporter_of(self.environ)
        self.capture = settings.otel_capture_content
        self._provider: Any = None
        self._tracer: Any = None
        self.api: Any = None  # the opentelemetry names the spans use, imported once at open()

    @property
    def enabled(self) -> bool:
        return self.exporter is not None

    def open(self) -> None:
        if self.exporter is None or self._provider is not None:
            return
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

        attributes = {"service.version": importlib.metadata.version("agent-router")}
        resource_env = self.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
        if "OTEL_SERVICE_NAME" not in self.environ and "service.name=" not in resource_env:
            attributes["service.name"] = "agent-router"
        provider = TracerProvider(resource=Resource.create(attributes))
        if self.exporter == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        else:
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
        from opentelemetry import propagate
        from opentelemetry import trace as api

        self.api = SimpleNamespace(
            extract=propagate.extract,
            set_span_in_context=api.set_span_in_context,
            SpanKind=api.SpanKind,
            Status=api.Status,
            StatusCode=api.StatusCode,
        )
        self._provider = provider
        self._tracer = provider.get_tracer("agent-router", attributes["service.version"])
        log.info("OpenTelemetry traces on (%s exporter)", self.exporter)

    async def flush(self) -> None:
        if self._provider is not None:
            await asyncio.to_thread(self._provider.force_flush)

    async def close(self) -> None:
        """Export what is queued (bounded by the exporter's timeout), off the event loop."""
        provider, self._provider, self._tracer = self._provider, None, None
        if provider is not None:
            await asyncio.to_thread(provider.shutdown)

    def start(self, attempts: Traced) -> Span:
        """The span of a routed call, or OFF (tracing off, or this call not sampled: its attempts
        would not be either, and a span that records nothing needs nothing more)."""
        if self._tracer is None:
            return OFF
        span = CallSpan(self, attempts)
        return span if span.span.is_recording() else OFF


def _epoch_ns(loop_time: float) -> int:
    """A time of the event loop's clock, as the epoch nanoseconds spans carry."""
    return time.time_ns() - int((asyncio.get_running_loop().time() - loop_time) * 1e9)


def _content(value: Any) -> str:
    text = orjson.dumps(value, default=str).decode()
    return text if len(text) <= CONTENT_MAX else text[:CONTENT_MAX] + "…"


class CallSpan:
    """One call's span and its attempts' child spans."""

    def __init__(self, tracing: Tracing, attempts: Traced) -> None:
        api = tracing.api
        self._tracing = tracing
        body = attempts.call.body
        self._requested = str(body.get("model", ""))
        attributes: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.request.model": self._requested}
        for field in ("max_tokens", "temperature", "top_p"):
            value = body.get(field)
            if isinstance(value, int | float) and not isinstance(value, bool):
                attributes[f"gen_ai.request.{field}"] = value
        if tracing.capture and isinstance(body.get("messages"), list):
            attributes["gen_ai.input.messages"] = _content(body["messages"])
        self._context = api.extract(attempts.call.headers)  # the client's traceparent, if any
        self.span = tracing._tracer.start_span(
            f"chat {self._requested}".strip(),
            context=self._context,
            kind=api.SpanKind.SERVER,
            attributes=attributes,
            start_time=_epoch_ns(attempts.started),
        )
        self._seen_model = False
        self._text: list[str] = []  # streams, content capture only: the text sent
        self._tools: dict[int, dict[str, str]] = {}  # ...and the tool calls, by index

    def attempt(self, attempts: Traced) -> _AttemptSpan:
        """A child span around one attempt (the tier is known once the attempt has picked it)."""
        return _AttemptSpan(self, attempts)

    def answer(self, data: Mapping[str, Any]) -> None:
        """The whole answer of a JSON call: response model, id, finish reasons, usage."""
        self._response(data)
        choices = data.get("choices")
        if isinstance(choices, list):
            reasons = [str(c.get("finish_reason")) for c in choices if isinstance(c, dict) and c.get("finish_reason")]
            if reasons:
                self.span.set_attribute("gen_ai.response.finish_reasons", reasons)
            if self._tracing.capture:
                messages = [c.get("message") for c in choices if isinstance(c, dict) and c.get("message")]
                self.span.set_attribute("gen_ai.output.messages", _content(messages))

    def chunk(self, chunk: Chunk) -> Chunk:
        """A chunk sent to the client: the first names the model; usage comes at the end, if asked."""
        data = chunk.data
        if data.get("usage") or not self._seen_model:
            self._response(data)
        choices = data.get("choices")
        if choices and isinstance(choices[0], dict):
            choice = choices[0]
            if choice.get("finish_reason"):
                self.span.set_attribute("gen_ai.response.finish_reasons", [str(choice["finish_reason"])])
            if self._tracing.capture:
                self._captured(choice.get("delta") or {})
        return chunk

    def _response(self, data: Mapping[str, Any]) -> None:
        if isinstance(data.get("model"), str):
            self.span.set_attribute("gen_ai.response.model", data["model"])
            self._seen_model = True
        if isinstance(data.get("id"), str):
            self.span.set_attribute("gen_ai.response.id", data["id"])
        usage = data.get("usage")
        if isinstance(usage, dict):
            for ours, theirs in (("input_tokens", "prompt_tokens"), ("output_tokens", "completion_tokens")):
                if isinstance(usage.get(theirs), int):
                    self.span.set_attribute(f"gen_ai.usage.{ours}", usage[theirs])

    def _captured(self, delta: Mapping[str, Any]) -> None:
        if isinstance(delta.get("content"), str):
            self._text.append(delta["content"])
        for tc in delta.get("tool_calls") or ():
            if isinstance(tc, dict):
                call = self._tools.setdefault(int(tc.get("index") or 0), {"id": "", "name": "", "arguments": ""})
                call["id"] = call["id"] or str(tc.get("id") or "")
                function = tc.get("function") or {}
                call["name"] += str(function.get("name") or "")
                call["arguments"] += str(function.get("arguments") or "")

    def end(self, attempts: Traced) -> None:
        """The call is over; the exception ending it, if any, is the one being raised (sys.exc_info)."""
        exc = sys.exc_info()[1]
        attributes: dict[str, Any] = {
            "agent_router.tier": attempts.tier,
            "agent_router.route": attempts.route,
            "agent_router.reason": attempts.decision.reason,
            "agent_router.escalated": attempts.escalated,
            "agent_router.tiers": attempts.tried,
            "agent_router.lane": attempts.lane.name,
        }
        outcome = attempts.outcome()  # its cost and baseline (router/core/live/ledger.py)
        for key, value in (
            ("mistakes", attempts.mistakes),
            ("verdicts", attempts.verdicts),
            ("repaired", attempts.repaired),
        ):
            if value:  # absent: none (each attribute costs the exporter's encoding)
                attributes[f"agent_router.{key}"] = value
        for key, usd in (("cost_usd", outcome.cost_usd), ("baseline_cost_usd", outcome.baseline_usd)):
            if usd is not None:  # absent: not known (router/core/live/ledger.py)
                attributes[f"agent_router.{key}"] = usd
        self.span.set_attributes(attributes)
        if self._tracing.capture and (self._text or self._tools):
            message: dict[str, Any] = {"role": "assistant", "content": "".join(self._text) or None}
            if self._tools:
                message["tool_calls"] = [self._tools[i] for i in sorted(self._tools)]
            self.span.set_attribute("gen_ai.output.messages", _content([message]))
        outcome = "answered" if exc is None else _attempt_outcome(exc)
        self.span.set_attribute("agent_router.outcome", outcome)
        if outcome == "failed":
            assert exc is not None
            self.span.set_attribute("error.type", _error_type(exc))
            api = self._tracing.api
            self.span.set_status(api.Status(api.StatusCode.ERROR, type(exc).__name__))
        self.span.end()


class _AttemptSpan:
    """The span of one attempt: kind CLIENT, named after the upstream model it asked."""

    __slots__ = ("_call", "_error", "_how", "_marks", "_span", "_trace")

    def __init__(self, call: CallSpan, attempts: Traced) -> None:
        self._call, self._trace, self._how = call, attempts, ""
        self._error: BaseException | None = None
        self._marks = (len(attempts.tried), len(attempts.mistakes), len(attempts.verdicts))
        api = call._tracing.api
        parent = api.set_span_in_context(call.span, call._context)
        self._span = call._tracing._tracer.start_span("chat", context=parent, kind=api.SpanKind.CLIENT)

    def __enter__(self) -> _AttemptSpan:
        return self

    def ended(self, how: str, error: BaseException | None = None) -> None:
        """The attempt's step (`Step.how`: answered, fell_back, escalated, retried, failed; `error`: a
        failure's, held until the span ends)."""
        self._how, self._error = how, error

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        span, attempts = self._span, self._trace
        tried, mistakes, verdicts = self._marks
        outcome = _attempt_outcome(exc) if exc is not None else self._how or "answered"
        exc, self._error = exc or self._error, None  # no reference left to the error (a cycle through its traceback)
        if outcome == "failed":
            assert exc is not None
            api = self._call._tracing.api
            span.set_status(api.Status(api.StatusCode.ERROR, type(exc).__name__))
            span.set_attribute("error.type", _error_type(exc))
        tiers = attempts.tried[tried:]
        tier = tiers[0] if tiers else attempts.tier
        model = attempts.policy.models.get(tier)
        upstream = model.upstream_model if model is not None else tier
        span.update_name(f"chat {upstream}")
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": upstream,
            "gen_ai.provider.name": model.provider if model is not None else "",
            "agent_router.tier": tier,
            "agent_router.attempt": tried + 1,
            "agent_router.outcome": outcome,
        }
        if len(tiers) > 1:
            attributes["agent_router.tiers"] = tiers  # hedged: raced against another tier
        if attempts.mistakes[mistakes:]:
            attributes["agent_router.mistakes"] = attempts.mistakes[mistakes:]
        if attempts.verdicts[verdicts:]:
            attributes["agent_router.verdicts"] = attempts.verdicts[verdicts:]
        span.set_attributes(attributes)
        span.end()


def _attempt_outcome(exc: BaseException) -> str:
    return "cancelled" if isinstance(exc, GeneratorExit | asyncio.CancelledError) else "failed"


def _error_type(exc: BaseException) -> str:
    code = getattr(exc, "code", None)
    return code if isinstance(code, str) and code else type(exc).__name__


Span = CallSpan | _Off  # what `Tracing.start` gives: a call's span, or OFF

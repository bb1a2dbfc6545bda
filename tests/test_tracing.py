"""OpenTelemetry traces, end to end: a real proxy exports OTLP/HTTP to a real receiver on a free port
(bench/otlp_sink.py: protobuf decoded with opentelemetry-proto), configured by OTEL_* variables only."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import pytest
from aiohttp import web

from bench.otlp_sink import Received, Sink
from router.core.live.tracing import exporter_of
from router.fake import FakeConfig
from tests.api.helpers import TOOLS, USER, post
from tests.conftest import Proxy, policy_text

ESCALATE = "escalation: {to: full}\n"
PROMPT = USER[0]["content"]
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


@pytest.fixture
async def sink() -> AsyncIterator[tuple[Sink, str]]:
    """The receiver, and its traces endpoint."""
    received = Sink()
    runner = web.AppRunner(received.app(), access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield received, f"http://127.0.0.1:{runner.addresses[0][1]}/v1/traces"
    finally:
        await runner.cleanup()


@pytest.fixture
def otel_env(monkeypatch: pytest.MonkeyPatch, sink: tuple[Sink, str]) -> Callable[..., None]:
    """Set OTEL_* for the proxy about to start (nothing else is configured)."""

    def setenv(**extra: str) -> None:
        for key in ("SDK_DISABLED", "TRACES_EXPORTER", "EXPORTER_OTLP_ENDPOINT", "RESOURCE_ATTRIBUTES"):
            monkeypatch.delenv(f"OTEL_{key}", raising=False)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", sink[1])
        monkeypatch.setenv("OTEL_SERVICE_NAME", "router-under-test")
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
        for key, value in extra.items():
            monkeypatch.setenv(key, value)

    return setenv


async def exported(proxy: Proxy, sink: Sink) -> list[Received]:
    await proxy.runtime.tracing.flush()
    return sink.spans


def by_id(spans: list[Received]) -> dict[bytes, Received]:
    return {s.span.span_id: s for s in spans}


def children(spans: list[Received], parent: Received) -> list[Received]:
    kids = [s for s in spans if s.span.parent_span_id == parent.span.span_id]
    return sorted(kids, key=lambda s: s.span.start_time_unix_nano)


def calls(spans: list[Received]) -> list[Received]:
    ids = by_id(spans)
    return [s for s in spans if s.span.parent_span_id not in ids]


def test_exporter_from_the_environment() -> None:
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}
    cases: list[tuple[Mapping[str, str], str | None]] = [
        ({}, None),
        ({"OTEL_SERVICE_NAME": "x"}, None),  # naming the service alone turns nothing on
        (endpoint, "otlp"),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, "otlp"),
        ({**endpoint, "OTEL_TRACES_EXPORTER": "none"}, None),
        ({**endpoint, "OTEL_SDK_DISABLED": "true"}, None),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, "otlp"),  # the SDK's default endpoint, localhost:4318
        ({"OTEL_TRACES_EXPORTER": "console"}, "console"),
        ({**endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, "otlp"),
    ]
    for environ, want in cases:
        assert exporter_of(environ) == want, environ
    for bad in ({"OTEL_TRACES_EXPORTER": "zipkin"}, {**endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}):
        with pytest.raises(ValueError, match="agent-router exports traces"):
            exporter_of(bad)


async def test_escalated_call_one_span_per_attempt(start_fake_, proxy_, sink, otel_env) -> None:
    received, _ = sink
    otel_env()
    fast = await start_fake_(FakeConfig(seed=1, bad_tool_rate=1.0, bad_kinds=("invalid_json",)))
    full = await start_fake_(FakeConfig(seed=2))
    proxy = await proxy_(policy_text(fast.url, full.url, extra=ESCALATE))
    assert proxy.runtime.tracing.enabled
    body = {"model": "auto", "messages": USER, "tools": TOOLS, "max_tokens": 50}
    raw = await post(proxy.url + "/chat/completions", body, headers={"traceparent": PARENT})
    assert raw.status == 200 and raw.headers["x-router-escalated"] == "true"
    answer = raw.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]

    spans = await exported(proxy, received)
    [call] = calls(spans)
    assert call.span.trace_id.hex() == TRACE_ID  # a child of the client's traceparent
    assert call.span.kind == call.span.SPAN_KIND_SERVER and call.name == "chat auto"
    assert call.resource["service.name"] == "router-under-test"
    a = call.attrs
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.request.model"] == "auto"
    assert a["gen_ai.request.max_tokens"] == 50
    assert a["gen_ai.response.model"] == "full-model"
    assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
    assert a["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert (a["agent_router.tier"], a["agent_router.route"], a["agent_router.escalated"]) == (
        "full",
        "simple-tool-call",
        True,
    )
    assert a["agent_router.mistakes"] == ["invalid_json"] and a["agent_router.tiers"] == ["fast", "full"]
    assert a["agent_router.lane"] == "standard" and a["agent_router.outcome"] == "answered"
    first, second = children(spans, call)
    assert first.span.kind == first.span.SPAN_KIND_CLIENT
    assert first.name == "chat fast-model" and second.name == "chat full-model"
    f, s = first.attrs, second.attrs
    assert (f["agent_router.tier"], f["agent_router.outcome"], f["agent_router.mistakes"]) == (
        "fast",
        "escalated",
        ["invalid_json"],
    )
    assert (s["agent_router.tier"], s["agent_router.outcome"]) == ("full", "answered")
    assert "agent_router.mistakes" not in s and "agent_router.tiers" not in s  # empty: left out
    assert f["gen_ai.provider.name"] == "openai" and s["gen_ai.request.model"] == "full-model"
    assert call.span.start_time_unix_nano <= first.span.start_time_unix_nano
    assert second.span.end_time_unix_nano <= call.span.end_time_unix_nano
    # no prompt and no answer anywhere in what was exported
    exported_bytes = b"".join(received.raw)
    assert PROMPT.encode() not in exported_bytes and answer.encode() not in exported_bytes
    assert "gen_ai.input.messages" not in a and "gen_ai.output.messages" not in a


async def test_stream_and_failure(start_fake_, proxy_, sink, otel_env) -> None:
    received, _ = sink
    otel_env()
    good = await start_fake_(FakeConfig(seed=3))
    down = await start_fake_(FakeConfig(error_rate=1.0))
    ok = await proxy_(policy_text(good.url))
    failing = await proxy_(policy_text(down.url))
    stream = {"model": "auto", "messages": USER, "stream": True, "stream_options": {"include_usage": True}}
    assert (await post(ok.url + "/chat/completions", stream)).status == 200
    bad = await post(failing.url + "/chat/completions", {"model": "auto", "messages": USER})
    assert bad.status == 502

    await ok.runtime.tracing.flush()
    spans = await exported(failing, received)
    streamed, failed = sorted(calls(spans), key=lambda s: s.span.start_time_unix_nano)
    a = streamed.attrs
    assert (a["agent_router.route"], a["agent_router.tier"]) == ("default", "full")
    assert a["agent_router.outcome"] == "answered"
    assert a["gen_ai.response.model"] == "full-model" and a["gen_ai.usage.output_tokens"] > 0
    assert [c.attrs["agent_router.outcome"] for c in children(spans, streamed)] == ["answered"]
    assert failed.span.status.code == failed.span.status.STATUS_CODE_ERROR
    assert failed.attrs["error.type"] == "upstream_error" and failed.attrs["agent_router.outcome"] == "failed"
    tries = children(spans, failed)
    assert tries and all(t.attrs["agent_router.outcome"] in ("failed", "retried") for t in tries)
    assert tries[-1].span.status.code == tries[-1].span.status.STATUS_CODE_ERROR


async def test_content_only_when_asked(start_fake_, proxy_, sink, otel_env) -> None:
    received, _ = sink
    otel_env()
    fake = await start_fake_(FakeConfig(seed=4))
    proxy = await proxy_(policy_text(fake.url), otel_capture_content=True)
    raw = await post(proxy.url + "/chat/completions", {"model": "auto", "messages": USER})
    text = raw.json()["choices"][0]["message"]["content"]
    streamed = await post(proxy.url + "/chat/completions", {"model": "auto", "messages": USER, "stream": True})
    assert streamed.status == 200
    spans = calls(await exported(proxy, received))
    assert len(spans) == 2
    for span in spans:
        a: dict[str, Any] = span.attrs
        assert PROMPT in a["gen_ai.input.messages"]
        assert '"role":"assistant"' in a["gen_ai.output.messages"]
    assert text in spans[0].attrs["gen_ai.output.messages"] or text in spans[1].attrs["gen_ai.output.messages"]


async def test_off_exports_nothing(start_fake_, proxy_, sink, otel_env) -> None:
    """The endpoint is set, but OTEL_TRACES_EXPORTER=none: no provider, no request to the receiver."""
    received, _ = sink
    otel_env(OTEL_TRACES_EXPORTER="none")
    fake = await start_fake_(FakeConfig(seed=5))
    proxy = await proxy_(policy_text(fake.url))
    assert not proxy.runtime.tracing.enabled
    assert (await post(proxy.url + "/chat/completions", {"model": "auto", "messages": USER})).status == 200
    await proxy.stop()  # a provider would export what it queued now
    assert received.requests == 0


async def test_unsampled_calls_export_nothing(start_fake_, proxy_, sink, otel_env) -> None:
    """OTEL_TRACES_SAMPLER (here always_off) is the SDK's: a call not sampled gets no spans at all."""
    received, _ = sink
    otel_env(OTEL_TRACES_SAMPLER="always_off")
    fake = await start_fake_(FakeConfig(seed=6))
    proxy = await proxy_(policy_text(fake.url))
    assert proxy.runtime.tracing.enabled
    for stream in (False, True):
        body = {"model": "auto", "messages": USER, "stream": stream}
        assert (await post(proxy.url + "/chat/completions", body)).status == 200
    assert await exported(proxy, received) == []

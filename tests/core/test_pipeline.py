"""router/core/pipeline.py without sockets: `complete` and `stream` through scripted in-process tiers
(tests/scripted.py). The live-server suites (tests/api, tests/fault) cover the same flow over HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from router.core import pipeline
from router.core.call import Call, chat_call
from router.errors import UpstreamError
from tests.conftest import policy_text
from tests.scripted import UNUSED, WEATHER, Scripted, call, started, text

POLICY = policy_text(UNUSED, extra="escalation: {to: full}\n")


def ask(content: str, *, tools: bool = False, stream: bool = False) -> Call:
    body: dict[str, Any] = {"model": "auto", "messages": [{"role": "user", "content": content}], "stream": stream}
    if tools:
        body["tools"] = [WEATHER]
    return chat_call(orjson.dumps(body), {})


async def test_complete_answers_from_the_routed_tier(tmp_path: Path) -> None:
    fast, full = Scripted("fast", [call("get_weather", '{"city": "Paris"}')]), Scripted("full", [])
    async with started(POLICY, tmp_path, fast=fast, full=full) as router:
        trace, reply = await pipeline.complete(router, ask("weather in Paris?", tools=True))
    assert (trace.tier, trace.route, trace.tried) == ("fast", "simple-tool-call", ["fast"])
    assert reply.data["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'
    assert fast.bodies[0]["messages"][0]["content"] == "weather in Paris?"
    assert fast.started and fast.closed and not full.bodies


async def test_complete_escalates_a_mistake_to_the_stronger_tier(tmp_path: Path) -> None:
    fast = Scripted("fast", [call("get_weather", '{"city": ')])  # cut-off arguments: invalid_json
    full = Scripted("full", [call("get_weather", '{"city": "Oslo"}')])
    async with started(POLICY, tmp_path, fast=fast, full=full) as router:
        trace, reply = await pipeline.complete(router, ask("weather in Oslo?", tools=True))
    assert trace.tried == ["fast", "full"] and trace.escalated and trace.mistakes == ["invalid_json"]
    assert reply.data["model"] == "full"


async def test_stream_sends_text_as_it_comes_and_hides_an_escalated_call(tmp_path: Path) -> None:
    fast = Scripted("fast", [call("get_weather", "not json")])
    full = Scripted("full", [call("get_weather", '{"city": "Rome"}')])
    async with started(POLICY, tmp_path, fast=fast, full=full) as router:
        trace, chunks = await pipeline.stream(router, ask("weather in Rome?", tools=True, stream=True))
        sent = [c.data async for c in chunks]
    assert trace.tried == ["fast", "full"]
    deltas = [c["choices"][0]["delta"] for c in sent if c.get("choices")]
    calls = [tc for d in deltas for tc in d.get("tool_calls") or ()]
    assert [tc["function"]["arguments"] for tc in calls] == ['{"city": "Rome"}']  # fast's call never left
    assert sum("role" in d for d in deltas) == 1
    assert {c["id"] for c in sent} == {sent[0]["id"]}  # one stream: one id


async def test_stream_of_text(tmp_path: Path) -> None:
    fast = Scripted("fast", [text("hello there")])
    async with started(POLICY, tmp_path, fast=fast, full=Scripted("full", [text("I am full")])) as router:
        trace, chunks = await pipeline.stream(router, ask("hi", stream=True))
        sent = [c.data async for c in chunks]
    assert trace.tier == "full"  # the default route
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in sent if c.get("choices"))
    assert content == "I am full "
    assert sent[-1]["choices"][0]["finish_reason"] == "stop"


async def test_an_upstream_error_on_the_last_tier_is_raised(tmp_path: Path) -> None:
    error = UpstreamError("tier 'full' is down", tier="full")
    full = Scripted("full", [error, error, error])
    policy = policy_text(UNUSED, extra="escalation: {to: full, on: [invalid_json]}\n")
    async with started(policy, tmp_path, fast=Scripted("fast", []), full=full) as router:
        with pytest.raises(UpstreamError):
            await pipeline.complete(router, ask("hi"))
    assert len(full.bodies) == 1  # `upstream_error` is not in `on`: no second try

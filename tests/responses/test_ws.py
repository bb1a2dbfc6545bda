"""WebSocket mode through the SDK's `client.responses.connect()`: turns, warm-up, errors, limits."""

from __future__ import annotations

import asyncio

import orjson
import pytest
import websockets
from websockets.exceptions import ConnectionClosed

from router.fake import FakeConfig
from tests.api.helpers import assert_valid_weather_call, fake_requests
from tests.conftest import policy_text
from tests.responses.conftest import CALL_ITEM, TEXT_ITEM, TOOLS, assert_order, fake_stats, recv_response

ESCALATE = "escalation: {to: full}\n"


async def test_several_turns_on_one_connection(fake, proxy_, sdk) -> None:
    proxy = await proxy_(policy_text(fake.url, extra=ESCALATE))
    async with sdk(proxy.url).responses.connect() as conn:
        await conn.response.create(model="auto", input="Weather in Paris?", tools=TOOLS)
        first = await recv_response(conn)
        assert [e.sequence_number for e in first] == list(range(len(first)))
        assert_order([e.type for e in first], CALL_ITEM)
        call = first[-1].response.output[0]
        assert_valid_weather_call(call.name, call.arguments)
        assert first[-1].model_extra["router"]["route"] == "simple-tool-call"

        output = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
        await conn.response.create(model="auto", previous_response_id=first[-1].response.id, input=[output])
        second = await recv_response(conn)
        assert_order([e.type for e in second], TEXT_ITEM)
        await conn.response.create(model="auto", previous_response_id=second[-1].response.id, input="thanks")
        third = await recv_response(conn)
        assert third[-1].type == "response.completed" and third[-1].response.output_text

    sent = [r["body"]["messages"] for r in await fake_requests(fake.url)]
    assert [len(m) for m in sent] == [1, 3, 5]
    assert sent[2][:3] == sent[1] and sent[2][3] == {"role": "assistant", "content": second[-1].response.output_text}
    assert sent[2][4] == {"role": "user", "content": "thanks"}


async def test_envelope_names_the_answering_model_throughout(start_fake_, proxy_, sdk) -> None:
    """As on SSE: created, in_progress and completed name the model that answered, escalated or not."""
    good = await start_fake_(FakeConfig(seed=21))
    bad = await start_fake_(FakeConfig(seed=22, bad_tool_rate=1.0, bad_kinds=("invalid_json",)))
    for fast, model in ((good, "fast-model"), (bad, "full-model")):
        proxy = await proxy_(policy_text(fast.url, good.url, extra=ESCALATE))
        async with sdk(proxy.url).responses.connect() as conn:
            await conn.response.create(model="auto", input="Weather?", tools=TOOLS)
            events = await recv_response(conn)
        envelope = [e.response.model for e in events if e.type.startswith("response.") and hasattr(e, "response")]
        assert [e.type for e in events if hasattr(e, "response")] == [
            "response.created", "response.in_progress", "response.completed",
        ]  # fmt: skip
        assert envelope == [model] * 3


async def test_generate_false_warms_up_without_a_model_call(fake, proxy_, sdk) -> None:
    proxy = await proxy_(policy_text(fake.url, extra=ESCALATE))
    async with sdk(proxy.url).responses.connect() as conn:
        await conn.send({"type": "response.create", "model": "auto", "input": "Context: Paris.", "generate": False})
        warm = await recv_response(conn)
        assert [e.type for e in warm] == ["response.created", "response.completed"]
        assert warm[-1].response.output == []
        assert await fake_requests(fake.url) == []
        await conn.response.create(model="auto", previous_response_id=warm[-1].response.id, input="Weather?")
        answer = await recv_response(conn)
        assert answer[-1].type == "response.completed"
    [sent] = await fake_requests(fake.url)
    assert sent["body"]["messages"] == [
        {"role": "user", "content": "Context: Paris."},
        {"role": "user", "content": "Weather?"},
    ]


async def test_errors_keep_the_socket_open(fake, proxy_, sdk) -> None:
    proxy = await proxy_(policy_text(fake.url, extra=ESCALATE))
    async with sdk(proxy.url).responses.connect() as conn:
        await conn.response.create(model="auto", input="x", previous_response_id="resp_unknown")
        [err] = await recv_response(conn)
        assert err.type == "error" and err.code == "previous_response_not_found"
        assert err.param == "previous_response_id" and err.model_extra["status"] == 400
        await conn.send_raw("{not json")
        [err] = await recv_response(conn)
        assert err.code == "invalid_json"
        await conn.send_raw('{"type": "session.update"}')
        [err] = await recv_response(conn)
        assert err.code == "unknown_event" and err.param == "type"
        await conn.response.create(model="auto", input="x", tools=[{"type": "function"}])  # type: ignore[list-item]
        [err] = await recv_response(conn)
        assert err.code == "invalid_request" and err.param == "tools[0].name"
        await conn.response.create(model="auto", input="still there?")
        ok = await recv_response(conn)
        assert ok[-1].type == "response.completed"


async def test_chain_continues_across_http_and_connections(fake, proxy_, sdk) -> None:
    proxy = await proxy_(policy_text(fake.url, extra=ESCALATE))
    client = sdk(proxy.url)
    over_http = await client.responses.create(model="auto", input="one")
    async with client.responses.connect() as conn:
        await conn.response.create(model="auto", previous_response_id=over_http.id, input="two")
        two = (await recv_response(conn))[-1]
        assert two.type == "response.completed"
        await conn.response.create(model="auto", previous_response_id=two.response.id, input="three", store=False)
        private = (await recv_response(conn))[-1]
        await conn.response.create(model="auto", previous_response_id=private.response.id, input="four")
        assert (await recv_response(conn))[-1].type == "response.completed"  # same connection: known
    async with client.responses.connect() as other:
        await other.response.create(model="auto", previous_response_id=two.response.id, input="again")
        assert (await recv_response(other))[-1].type == "response.completed"
        await other.response.create(model="auto", previous_response_id=private.response.id, input="four")
        [err] = await recv_response(other)
        assert err.code == "previous_response_not_found"  # store=false stays on its connection


async def test_connection_state_is_bounded(fake, proxy_, sdk) -> None:
    proxy = await proxy_(policy_text(fake.url, extra=ESCALATE), ws_max_responses=2, responses_cache_entries=0)
    async with sdk(proxy.url).responses.connect() as conn:
        ids = []
        for word in ("a", "b", "c"):
            await conn.response.create(model="auto", input=word)
            ids.append((await recv_response(conn))[-1].response.id)
        await conn.response.create(model="auto", previous_response_id=ids[0], input="x")
        [err] = await recv_response(conn)
        assert err.code == "previous_response_not_found"
        await conn.response.create(model="auto", previous_response_id=ids[2], input="x")
        assert (await recv_response(conn))[-1].type == "response.completed"


async def test_oversize_message_closes_1009(fake, proxy_, sdk) -> None:
    proxy = await proxy_(policy_text(fake.url, extra=ESCALATE), ws_max_message_bytes=4096)
    async with sdk(proxy.url).responses.connect() as conn:
        await conn.response.create(model="auto", input="x" * 5000)
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(conn.recv(), 10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009


async def test_idle_connection_is_closed(fake, proxy_, sdk) -> None:
    proxy = await proxy_(policy_text(fake.url, extra=ESCALATE), ws_idle_timeout=0.3)
    async with sdk(proxy.url).responses.connect() as conn:
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(conn.recv(), 10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000


async def test_an_upgrade_is_answered_426_when_websocket_mode_is_off(fake, proxy_, sdk) -> None:
    """`ws_enabled` false: 426 Upgrade Required with an OpenAI error body (Codex then sends the turn
    over HTTP at once: tests/agents/test_cli.py), and HTTP still answers."""
    proxy = await proxy_(policy_text(fake.url, extra=ESCALATE), ws_enabled=False)
    with pytest.raises(websockets.InvalidStatus) as refused:
        async with sdk(proxy.url).responses.connect():
            pass
    answer = refused.value.response
    assert answer.status_code == 426
    assert orjson.loads(answer.body)["error"]["code"] == "websocket_mode_off"
    done = await sdk(proxy.url).responses.create(model="auto", input="Hello")
    assert done.status == "completed"


async def test_unauthorized_upgrade_is_refused(fake, proxy_, sdk) -> None:
    proxy = await proxy_(policy_text(fake.url, extra=ESCALATE), client_keys=["k-right"])
    with pytest.raises(websockets.InvalidStatus) as refused:
        async with sdk(proxy.url, api_key="k-wrong").responses.connect():
            pass
    assert refused.value.response.status_code == 401
    with pytest.raises(websockets.InvalidStatus):
        async with websockets.connect(proxy.url.replace("http", "ws") + "/responses"):  # no key at all
            pass
    async with sdk(proxy.url, api_key="k-right").responses.connect() as conn:
        await conn.response.create(model="auto", input="x")
        assert (await recv_response(conn))[-1].type == "response.completed"
    headers = {"x-api-key": "k-right"}
    async with websockets.connect(proxy.url.replace("http", "ws") + "/responses", additional_headers=headers) as ws:
        await ws.send('{"type": "response.create", "model": "auto", "input": "x", "generate": false}')
        assert '"response.created"' in await asyncio.wait_for(ws.recv(), 10)


async def test_disconnect_mid_response_cancels_the_upstream_stream(start_fake_, proxy_, sdk) -> None:
    slow = await start_fake_(FakeConfig(words=400, chunk_delay_ms=20))  # ~8 s of stream
    proxy = await proxy_(policy_text(slow.url, extra=ESCALATE))
    conn = await sdk(proxy.url).responses.connect().enter()
    await conn.response.create(model="auto", input="tell me a long story")
    for _ in range(100):
        event = await asyncio.wait_for(conn.recv(), 10)
        if event.type == "response.output_text.delta":
            break
    during = (await fake_stats(slow.url))["open_connections"]
    await conn.close()
    for _ in range(200):  # bounded: 4 s
        now = (await fake_stats(slow.url))["open_connections"]
        if now < during:
            break
        await asyncio.sleep(0.02)
    assert now < during, (during, now)
    assert proxy.runtime.inflight == 0


async def test_upstream_failure_is_an_error_event_and_the_socket_stays(start_fake_, proxy_, sdk) -> None:
    healthy = await start_fake_(FakeConfig(seed=1))
    failing = await start_fake_(FakeConfig(seed=2, error_rate=1.0))
    proxy = await proxy_(policy_text(healthy.url, failing.url))  # text → `full` (failing), tools → `fast`
    async with sdk(proxy.url).responses.connect() as conn:
        await conn.response.create(model="auto", input="hi")
        failed = await recv_response(conn)
        assert [e.type for e in failed] == ["error"]  # nothing of a response was begun
        assert failed[-1].code == "upstream_error" and failed[-1].model_extra["status"] == 502
        await conn.response.create(model="auto", input="Weather?", tools=TOOLS)
        assert (await recv_response(conn))[-1].type == "response.completed"
    assert proxy.runtime.inflight == 0

"""A tier in OpenAI's Responses WebSocket mode (`websocket: true`, router/upstream/responses_ws.py),
through real servers: the router on a free port, fake upstreams serving the mode as OpenAI runs it
(router/fake/websocket.py), clients through the official SDK (`responses.connect()`, HTTP) and a thin
`websockets` client. What reached each fake is read from its log."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
import pytest
import websockets

from router.fake import FakeConfig, FakeServer
from tests.api.helpers import get, post
from tests.conftest import Proxy, policy_text
from tests.responses.conftest import fake_log, recv_response, socket_messages

KEY = "sk-upstream-secret-0123456789"
READ = {
    "type": "function",
    "name": "read_file",
    "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
}
WRITE = {**READ, "name": "write_file", "description": "Write a file"}
FILES = [READ, WRITE]


def ws_policy(fast: FakeServer, full: FakeServer, *, full_socket: bool = False, extra: str = "") -> str:
    """Tool calls to fast (a WebSocket tier), the rest and escalations to full (Responses over HTTP). The
    fake calls read_file with the same arguments each turn: not taken as a failure the agent repeats."""
    escalation = "escalation: {to: full, after_agent_error: {repeated_call: false}}\n"
    text = policy_text(fast.url, full.url, extra=escalation + extra)
    for tier, socket in (("fast", True), ("full", full_socket)):
        marker = f"    model: openai/{tier}-model\n"
        added = f"    api_key: {KEY}\n    apis: [responses]\n" + ("    websocket: true\n" if socket else "")
        text = text.replace(marker, marker + added, 1)
    return text


def whole(message: dict[str, Any]) -> bool:
    return "previous_response_id" not in message["body"]


def call_of(response: Any) -> Any:
    [call] = [i for i in response.output if i.type == "function_call"]
    return call


async def ws_turns(proxy: Proxy, sdk: Any, turns: int, **create: Any) -> list[Any]:
    """An agent loop over the router's WebSocket: each turn answers the last call, only its new input
    after `previous_response_id`; the completed responses."""
    done: list[Any] = []
    async with sdk(proxy.url).responses.connect() as conn:
        new: Any = "Read the files."
        for i in range(turns):
            chained = {"previous_response_id": done[-1].id} if done else {}
            await conn.response.create(model="auto", input=new, tools=FILES, store=False, **chained, **create)
            events = await recv_response(conn)
            assert events[-1].type == "response.completed", events[-1]
            done.append(events[-1].response)
            output = {"type": "function_call_output", "call_id": call_of(done[-1]).call_id, "output": f"file {i}"}
            new = [output]
    return done


@pytest.fixture
async def tiers(start_fake_: Any) -> tuple[FakeServer, FakeServer]:
    fast = await start_fake_(FakeConfig(seed=1, api_key=KEY, prefer_tools=("read_file",)))
    full = await start_fake_(FakeConfig(seed=2, api_key=KEY, prefer_tools=("read_file",)))
    return fast, full


@pytest.mark.parametrize("client", ["websocket", "http"])
async def test_a_session_sends_only_its_new_input_on_one_upstream_socket(tiers, proxy_, sdk, client) -> None:
    fast, full = tiers
    proxy = await proxy_(ws_policy(fast, full))
    if client == "websocket":
        done = await ws_turns(proxy, sdk, 6)
    else:
        http, done, new = sdk(proxy.url), [], "Read the files."
        for i in range(6):
            chained = {"previous_response_id": done[-1].id} if done else {}
            done.append(await http.responses.create(model="auto", input=new, tools=FILES, **chained))
            new = [{"type": "function_call_output", "call_id": call_of(done[-1]).call_id, "output": f"file {i}"}]
    log = await fake_log(fast.url)
    sent = socket_messages(log)
    assert [m["connection"] for m in sent] == [1] * 6  # one upstream socket for the session
    assert [e for e in log if e["method"] == "POST"] == []  # nothing over HTTP
    assert whole(sent[0]) and sent[0]["body"]["input"] == "Read the files."
    upstream_ids = []
    for i, message in enumerate(sent[1:], 1):
        body = message["body"]
        assert body["input"] == [{"type": "function_call_output", "call_id": call_of(done[i - 1]).call_id,
                                  "output": f"file {i - 1}"}]  # fmt: skip
        upstream_ids.append(body["previous_response_id"])
    assert not set(upstream_ids) & {r.id for r in done}  # the upstream's own ids, never the router's
    assert len(set(upstream_ids)) == 5
    assert max(m["bytes"] for m in sent[1:]) < sent[0]["bytes"] + 200  # no turn re-sends the history
    assert all(m["body"]["store"] is False and "stream" not in m["body"] for m in sent)
    assert socket_messages(await fake_log(full.url)) == []


async def test_the_connection_limit_and_age_reopen_the_socket_with_the_turn_whole(start_fake_, proxy_, sdk) -> None:
    fast = await start_fake_(FakeConfig(seed=3, api_key=KEY, ws_limit_s=0.4, prefer_tools=("read_file",)))
    full = await start_fake_(FakeConfig(seed=4, api_key=KEY))
    proxy = await proxy_(ws_policy(fast, full))
    async with sdk(proxy.url).responses.connect() as conn:
        previous = None
        for i in range(4):
            if i == 2:
                await asyncio.sleep(0.5)  # the upstream's limit passes: the next turn meets its error
            chained = {"previous_response_id": previous.id} if previous else {}
            new = "Go." if previous is None else [{"type": "function_call_output", "call_id": call_of(previous).call_id,
                                                   "output": "x"}]  # fmt: skip
            await conn.response.create(model="auto", input=new, tools=FILES, **chained)
            events = await recv_response(conn)
            assert events[-1].type == "response.completed"  # the client never sees the limit
            previous = events[-1].response
    sent = socket_messages(await fake_log(fast.url))
    # turn 3 met the limit on socket 1 (its error), then went whole on socket 2; turn 4 continued there
    assert [(m["connection"], whole(m)) for m in sent] == [(1, True), (1, False), (1, False), (2, True), (2, False)]
    assert len(sent[3]["body"]["input"]) == 5  # the chain written out: 2 turns of call and output, the new one

    aged = await proxy_(ws_policy(fast, full), upstream_ws_max_age=0.3)  # reopened before the upstream ends it
    before = len(sent)
    async with sdk(aged.url).responses.connect() as conn:
        await conn.response.create(model="auto", input="Go.", tools=FILES)
        first = (await recv_response(conn))[-1].response
        await asyncio.sleep(0.35)
        output = {"type": "function_call_output", "call_id": call_of(first).call_id, "output": "x"}
        await conn.response.create(model="auto", input=[output], tools=FILES, previous_response_id=first.id)
        assert (await recv_response(conn))[-1].type == "response.completed"
    sent = socket_messages(await fake_log(fast.url))[before:]
    assert [whole(m) for m in sent] == [True, True] and sent[0]["connection"] != sent[1]["connection"]


async def test_a_socket_that_cannot_be_opened_falls_back_to_http_a_while(start_fake_, proxy_, sdk, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    fast = await start_fake_(FakeConfig(seed=5, api_key=KEY, websocket=False, prefer_tools=("read_file",)))
    full = await start_fake_(FakeConfig(seed=6, api_key=KEY))
    proxy = await proxy_(ws_policy(fast, full), upstream_ws_fallback=0.5)
    async with sdk(proxy.url).responses.connect() as conn:
        previous = None
        for i in range(3):
            if i == 2:
                await asyncio.sleep(0.6)  # the session's time on HTTP is over: the socket is tried again
            chained = {"previous_response_id": previous.id} if previous else {}
            new = "Go." if previous is None else [{"type": "function_call_output", "call_id": call_of(previous).call_id,
                                                   "output": "x"}]  # fmt: skip
            await conn.response.create(model="auto", input=new, tools=FILES, **chained)
            events = await recv_response(conn)
            assert events[-1].type == "response.completed" and events[-1].model_extra["router"]["tier"] == "fast"
            previous = events[-1].response
    log = await fake_log(fast.url)
    upgrades = [e for e in log if e["method"] == "GET" and e["path"] == "/v1/responses"]
    posts = [e["body"] for e in log if e["method"] == "POST" and e["path"] == "/v1/responses"]
    assert len(upgrades) == 2 and len(posts) == 3  # turn 2 did not try the socket
    assert [len(b["input"]) if isinstance(b["input"], list) else 1 for b in posts] == [1, 3, 5]  # whole
    assert all(e["headers"]["authorization"] == f"Bearer {KEY}" for e in upgrades)
    assert "HTTP 404" in caplog.text and KEY not in caplog.text


async def test_escalation_mid_session_starts_each_tiers_chain_from_the_whole_history(start_fake_, proxy_, sdk) -> None:
    fast = await start_fake_(FakeConfig(seed=7, api_key=KEY, bad_tool_rates={"write_file": 1.0},
                                        bad_kinds=("schema_violation",), prefer_tools=("read_file",)))  # fmt: skip
    full = await start_fake_(FakeConfig(seed=8, api_key=KEY))
    proxy = await proxy_(ws_policy(fast, full))
    tiers = []
    async with sdk(proxy.url).responses.connect() as conn:
        previous = None
        for i in range(5):
            chained = {"previous_response_id": previous.id} if previous else {}
            new = "Go." if previous is None else [{"type": "function_call_output", "call_id": call_of(previous).call_id,
                                                   "output": f"file {i}"}]  # fmt: skip
            forced = {"tool_choice": {"type": "function", "name": "write_file"}} if i == 2 else {}
            await conn.response.create(model="auto", input=new, tools=FILES, **chained, **forced)
            events = await recv_response(conn)
            assert events[-1].type == "response.completed", events[-1]
            tiers.append(events[-1].model_extra["router"]["tier"])
            previous = events[-1].response
    assert tiers == ["fast", "fast", "full", "fast", "fast"]
    sent = socket_messages(await fake_log(fast.url))
    # turn 3 on fast continued its chain (its answer was refused); turn 4 followed full's answer: whole
    assert [whole(m) for m in sent] == [True, False, False, True, False]
    assert {m["connection"] for m in sent} == {1}
    restarted = sent[3]["body"]["input"]
    assert [i["type"] for i in restarted].count("function_call_output") == 3  # turns 1-3's outputs, the new one
    [escalated] = [e["body"] for e in await fake_log(full.url) if e["method"] == "POST"]
    assert "previous_response_id" not in escalated and len(escalated["input"]) == 5  # full got the whole history


async def test_generate_false_warms_the_tiers_own_socket(tiers, proxy_) -> None:
    fast, full = tiers
    proxy = await proxy_(ws_policy(fast, full))
    url = proxy.url.replace("http://", "ws://") + "/responses"
    async with websockets.connect(url) as ws:
        await ws.send(orjson.dumps({"type": "response.create", "model": "auto", "input": "Context: a repo.",
                                    "tools": FILES, "generate": False}).decode())  # fmt: skip
        warm = [orjson.loads(await ws.recv()) for _ in range(2)]
        assert [e["type"] for e in warm] == ["response.created", "response.completed"]
        chained = {"input": "Read main.py.", "tools": FILES, "previous_response_id": warm[-1]["response"]["id"]}
        await ws.send(orjson.dumps({"type": "response.create", "model": "auto", **chained}).decode())
        while (event := orjson.loads(await ws.recv()))["type"] not in ("response.completed", "error"):
            pass
        assert event["type"] == "response.completed"
    sent = socket_messages(await fake_log(fast.url))
    assert [m["body"].get("generate") for m in sent] == [False, None]
    assert sent[1]["body"]["input"] == [{"type": "message", "role": "user", "content": "Read main.py."}]
    assert sent[1]["body"]["previous_response_id"] != warm[-1]["response"]["id"]  # the upstream's id


async def test_sockets_are_bounded_per_process_and_closed_when_idle(tiers, proxy_, sdk) -> None:
    fast, full = tiers
    proxy = await proxy_(ws_policy(fast, full), upstream_ws_max_sockets=1, upstream_ws_idle_timeout=0.4)
    client = sdk(proxy.url)

    async def turn(session: str, previous: Any = None) -> Any:
        chained = {"previous_response_id": previous.id} if previous else {}
        new = "Go." if previous is None else [{"type": "function_call_output", "call_id": call_of(previous).call_id,
                                               "output": "x"}]  # fmt: skip
        return await client.responses.create(model="auto", input=new, tools=FILES, **chained,
                                             extra_headers={"x-session-id": session})  # fmt: skip

    a = await turn("one")
    await turn("two")  # one socket at most: session one's idle socket is closed for it
    a = await turn("one", a)  # reopened: a new connection, the chain whole
    a = await turn("one", a)  # kept: continued
    await asyncio.sleep(0.5)  # idle past the timeout: closed
    await turn("one", a)
    sent = socket_messages(await fake_log(fast.url))
    assert [(m["connection"], whole(m)) for m in sent] == [(1, True), (2, True), (3, True), (3, False), (4, True)]


async def test_a_second_turn_of_a_session_in_flight_goes_over_http(start_fake_, proxy_) -> None:
    fast = await start_fake_(FakeConfig(seed=9, api_key=KEY, chunk_delay_ms=20, prefer_tools=("read_file",)))
    full = await start_fake_(FakeConfig(seed=10, api_key=KEY))
    proxy = await proxy_(ws_policy(fast, full))
    body = {"model": "auto", "input": "Go.", "tools": FILES}
    headers = {"x-session-id": "same"}
    first, second = await asyncio.gather(*(post(proxy.url + "/responses", body, headers=headers) for _ in "ab"))
    assert first.status == second.status == 200
    log = await fake_log(fast.url)
    assert len(socket_messages(log)) == 1 and len([e for e in log if e["method"] == "POST"]) == 1


async def test_an_oversized_upstream_event_is_the_tiers_failure(start_fake_, proxy_, sdk) -> None:
    fast = await start_fake_(FakeConfig(seed=11, api_key=KEY, words=2000))
    full = await start_fake_(FakeConfig(seed=12, api_key=KEY, words=5))
    routes = "routes:\n  - name: all\n    use: fast\n"
    text = ws_policy(fast, full).split("routes:")[0] + routes + "escalation: {to: full}\n"  # fmt: skip
    proxy = await proxy_(text, upstream_max_body_bytes=4096)
    async with sdk(proxy.url).responses.connect() as conn:
        # tools offered (not a side call, which goes over HTTP), none to be called: a long text answer
        await conn.response.create(model="auto", input="Write a lot.", tools=FILES, tool_choice="none")
        events = await recv_response(conn)
    assert events[-1].type == "response.completed" and events[-1].model_extra["router"]["tier"] == "full"
    assert b'router_limits_tripped_total{limit="upstream_body"} 1.0' in proxy.runtime.metrics.render()
    assert len(socket_messages(await fake_log(fast.url))) == 1


async def test_turn_state_is_echoed_on_the_upgrade_and_on_http(fake, proxy_) -> None:
    proxy = await proxy_(policy_text(fake.url))
    url = proxy.url.replace("http://", "ws://") + "/responses"
    async with websockets.connect(url, additional_headers={"x-codex-turn-state": "ts-123"}) as ws:
        assert ws.response.headers["x-codex-turn-state"] == "ts-123"
    async with websockets.connect(url) as ws:
        assert "x-codex-turn-state" not in ws.response.headers
    headers = {"x-codex-turn-state": "t9"}
    answered = await post(proxy.url + "/responses", {"model": "auto", "input": "Hi"}, headers=headers)
    assert answered.status == 200 and answered.headers["x-codex-turn-state"] == "t9"


async def test_streams_run_side_by_side_and_processed_is_taken(start_fake_, proxy_) -> None:
    slow = await start_fake_(FakeConfig(seed=13, chunk_delay_ms=25, words=10))
    proxy = await proxy_(policy_text(slow.url))
    url = proxy.url.replace("http://", "ws://") + "/responses"
    async with websockets.connect(url) as ws:
        for stream in ("a", "b", "a"):
            await ws.send(orjson.dumps({"type": "response.create", "model": "auto", "input": f"Hi {stream}",
                                        "stream_id": stream}).decode())  # fmt: skip
        events: list[dict[str, Any]] = []
        while sum(e["type"] == "response.completed" for e in events) < 3:
            events.append(orjson.loads(await asyncio.wait_for(ws.recv(), 10)))
        assert not [e for e in events if e["type"] == "error"]
        assert all(e.get("stream_id") in ("a", "b") for e in events)  # every event names its stream
        a = [e for e in events if e["stream_id"] == "a"]
        b = [e for e in events if e["stream_id"] == "b"]
        # b ran beside a's first response; a's two ran one after the other, each response numbered its own
        assert events.index(b[0]) < events.index(next(e for e in a if e["type"] == "response.completed"))
        assert [e["type"] for e in a].count("response.created") == 2 and b[-1]["type"] == "response.completed"
        ends = [i for i, e in enumerate(a) if e["type"] == "response.completed"]
        assert a[ends[0] + 1]["type"] == "response.created" and a[ends[0] + 1]["sequence_number"] == 0
        processed = {"type": "response.processed", "response_id": b[-1]["response"]["id"]}
        await ws.send(orjson.dumps(processed).decode())  # taken: nothing answered
        await ws.send(orjson.dumps({"type": "response.create", "model": "auto", "input": "Bye"}).decode())
        after: list[dict[str, Any]] = []
        while not after or after[-1]["type"] not in ("response.completed", "error"):
            after.append(orjson.loads(await asyncio.wait_for(ws.recv(), 10)))
        assert after[0]["type"] == "response.created" and after[-1]["type"] == "response.completed"
        assert all("stream_id" not in e for e in after)


async def test_side_calls_go_over_http(tiers, proxy_, sdk) -> None:
    """A small call offering no tools (a title, a summary) would move the socket's chain away from the
    conversation's: it takes HTTP."""
    fast, full = tiers
    routes = "routes:\n  - name: all\n    use: fast\n"
    proxy = await proxy_(ws_policy(fast, full).split("routes:")[0] + routes)
    title = await sdk(proxy.url).responses.create(model="auto", input="Name this conversation.")
    assert title.status == "completed"
    log = await fake_log(fast.url)
    assert socket_messages(log) == [] and [e["method"] for e in log if e["path"] == "/v1/responses"] == ["POST"]


async def test_a_turn_left_mid_answer_closes_its_socket(start_fake_, proxy_) -> None:
    """What is still on its way would be read as the next turn's: the socket goes with the turn."""
    fast = await start_fake_(FakeConfig(seed=14, api_key=KEY, chunk_delay_ms=50, words=40, prefer_tools=("read_file",)))
    full = await start_fake_(FakeConfig(seed=15, api_key=KEY))
    proxy = await proxy_(ws_policy(fast, full))
    url = proxy.url.replace("http://", "ws://") + "/responses"
    create = {"type": "response.create", "model": "auto", "input": "Go.", "tools": FILES, "tool_choice": "none"}
    async with websockets.connect(url, additional_headers={"x-session-id": "s"}) as ws:
        await ws.send(orjson.dumps(create).decode())
        for _ in range(4):  # the answer's text has begun
            await asyncio.wait_for(ws.recv(), 10)
    await asyncio.sleep(0.3)
    async with websockets.connect(url, additional_headers={"x-session-id": "s"}) as ws:
        await ws.send(orjson.dumps({**create, "input": "Again."}).decode())
        ended = ("response.completed", "error")
        while (event := orjson.loads(await asyncio.wait_for(ws.recv(), 10)))["type"] not in ended:
            pass
        assert event["type"] == "response.completed"
    assert [m["connection"] for m in socket_messages(await fake_log(fast.url))] == [1, 2]


async def test_a_warm_up_routed_elsewhere_still_opens_the_sockets(tiers, proxy_) -> None:
    """Codex warms up with no input and no tools (the default route, full here); its first turn, with
    tools, goes to fast, whose socket the warm-up opened: no handshake in that turn."""
    fast, full = tiers
    proxy = await proxy_(ws_policy(fast, full))
    url = proxy.url.replace("http://", "ws://") + "/responses"
    async with websockets.connect(url, additional_headers={"session_id": "codex-1"}) as ws:
        empty = {"type": "response.create", "model": "auto", "input": [], "generate": False}
        await ws.send(orjson.dumps(empty).decode())
        warm = [orjson.loads(await ws.recv()) for _ in range(2)]
        assert warm[-1]["type"] == "response.completed"
        upgrades = [e for e in await fake_log(fast.url) if e["method"] == "GET" and e["path"] == "/v1/responses"]
        assert len(upgrades) == 1 and socket_messages(await fake_log(fast.url)) == []  # opened, nothing sent
        chained = {"input": "Read main.py.", "tools": FILES, "previous_response_id": warm[-1]["response"]["id"]}
        await ws.send(orjson.dumps({"type": "response.create", "model": "auto", **chained}).decode())
        while (event := orjson.loads(await ws.recv()))["type"] not in ("response.completed", "error"):
            pass
        assert event["type"] == "response.completed" and event["router"]["tier"] == "fast"
    log = await fake_log(fast.url)
    assert len([e for e in log if e["method"] == "GET" and e["path"] == "/v1/responses"]) == 1
    [turn] = socket_messages(log)
    assert turn["connection"] == 1 and whole(turn)  # on the socket the warm-up opened, whole (a new chain there)


@pytest.mark.parametrize("path", ["http", "websocket", "upstream-websocket"])
async def test_a_stream_whose_items_arrive_whole_is_read_as_what_it_carries(start_fake_, proxy_, sdk, path) -> None:
    """Tiers that send each output item only in `response.output_item.done` (no `added`, no deltas;
    the published event schema allows it): their calls and text are read as what they are, on every
    path that reads streams, not as empty answers."""
    fast = await start_fake_(FakeConfig(seed=3, api_key=KEY, prefer_tools=("read_file",), whole_items=True))
    full = await start_fake_(FakeConfig(seed=4, api_key=KEY, whole_items=True))
    policy = ws_policy(fast, full)
    if path != "upstream-websocket":
        policy = policy.replace("    websocket: true\n", "")
    proxy = await proxy_(policy)
    client = sdk(proxy.url)
    if path == "http":
        async with client.responses.stream(model="auto", input="Read the files.", tools=FILES) as stream:
            [e async for e in stream]
            call_turn = await stream.get_final_response()
        async with client.responses.stream(model="auto", input="Say hello.") as stream:
            [e async for e in stream]
            text_turn = await stream.get_final_response()
    else:
        async with client.responses.connect() as conn:
            await conn.response.create(model="auto", input="Read the files.", tools=FILES)
            call_turn = (await recv_response(conn))[-1].response
            await conn.response.create(model="auto", input="Say hello.")
            text_turn = (await recv_response(conn))[-1].response
    call = call_of(call_turn)
    assert call.name == "read_file" and orjson.loads(call.arguments)["path"]
    assert len(text_turn.output_text.split()) == 12  # the fake's 12 words, read from the item itself
    log = await fake_log(fast.url)
    assert bool(socket_messages(log)) == (path == "upstream-websocket")  # the path the test meant
    stats = (await get(proxy.url + "/router/stats")).json()
    assert "empty_response" not in orjson.dumps(stats).decode()

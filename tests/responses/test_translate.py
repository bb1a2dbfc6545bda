"""Translation between Responses items and chat messages, the event builder, the history cache."""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson
import pytest

from router.core.live.response_state import ResponseCache, ResponseState, stored
from router.errors import BadRequest, ForbiddenField
from router.responses.events import EventBuilder
from router.responses.items import CARRIED, assistant_message, input_messages, items_of, output_items
from router.responses.translate import chat_body, chat_tool_choice, chat_tools, translate
from router.responses.turn import PreviousResponseNotFound, prepare, previous
from router.upstream.responses_tools import Offered, ToolMap
from router.upstream.responses_view import ResponsesEvents, completion_of
from tests.responses.conftest import CALL_ITEM, TEXT_ITEM, WEATHER, assert_order

LOOP_ITEMS: list[dict[str, Any]] = [
    {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "Be brief."}]},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in Paris and Rome?"}]},
    {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
    {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": '{"city":"Rome"}'},
    {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
    {"type": "function_call_output", "call_id": "c2", "output": "rain"},
]
LOOP_MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris and Rome?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}},
            {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'}},
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    {"role": "tool", "tool_call_id": "c2", "content": "rain"},
]


def strip_ids(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Items without the fields a round trip regenerates (item ids, statuses, part extras)."""
    out = []
    for item in items:
        item = {k: v for k, v in item.items() if k not in ("id", "status")}
        if "content" in item and isinstance(item["content"], list):
            item["content"] = [{k: p[k] for k in ("type", "text") if k in p} for p in item["content"]]
        out.append(item)
    return out


def test_items_to_messages_tool_loop() -> None:
    assert input_messages(LOOP_ITEMS) == LOOP_MESSAGES


def test_items_messages_round_trip() -> None:
    assert strip_ids(items_of(input_messages(LOOP_ITEMS))) == strip_ids(LOOP_ITEMS)
    assert input_messages(items_of(LOOP_MESSAGES)) == LOOP_MESSAGES


def test_string_input_roles_and_parts() -> None:
    assert input_messages("hi") == [{"role": "user", "content": "hi"}]
    msgs = input_messages(
        [
            {"role": "developer", "content": "rules"},  # an easy message: no `type`
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}],
            },
            {"role": "user", "content": [{"type": "input_image", "image_url": "data:x", "detail": "low"}]},
            {"type": "reasoning", "summary": []},
        ]
    )
    assert msgs == [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "ab"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:x", "detail": "low"}}]},
        {"role": CARRIED, "item": {"type": "reasoning", "summary": []}},  # for native tiers; chat tiers never see it
    ]


def test_assistant_text_then_calls_is_one_message() -> None:
    items = [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
    ]
    [msg] = input_messages(items)
    assert msg["content"] == "Checking." and [c["id"] for c in msg["tool_calls"]] == ["c1"]
    assert assistant_message(output_items(msg)) == msg


@pytest.mark.parametrize(
    "bad",
    [
        ["not an object"],
        [{"type": "function_call", "call_id": "c1", "arguments": "{}"}],  # no name
        [{"role": "user", "content": 7}],
        {"not": "a list"},
    ],
)
def test_malformed_items_are_400(bad: Any) -> None:
    with pytest.raises(BadRequest):
        input_messages(bad)


def test_items_a_chat_tier_cannot_take_are_carried_or_left_out() -> None:
    """Never a 400 for what the published API allows: an item_reference, an unknown role, a file part
    are left out of what a chat tier sees (counted); unknown items stay in the history for native tiers."""
    left_out: Counter[str] = Counter()
    items = [
        {"type": "item_reference", "id": "msg_1"},
        {"type": "message", "role": "critic", "content": "x"},
        {"role": "user", "content": [{"type": "input_file", "file_id": "f"}, {"type": "input_text", "text": "hi"}]},
    ]
    out = input_messages(items, None, left_out)
    assert [m for m in out if m["role"] != CARRIED] == [{"role": "user", "content": "hi"}]
    assert [m["item"] for m in out if m["role"] == CARRIED] == items[:2]
    assert items_of(out)[:2] == items[:2]  # what a native tier gets back on a chain
    assert left_out == {"item:item_reference": 1, "role:critic": 1, "part:input_file": 1}


def test_calls_and_outputs_without_call_id_are_paired() -> None:
    """Codex sends outputs carrying `name`/`namespace` and no `call_id`: each pairs with the latest
    unanswered call of that name, or a call is made up for it."""
    items = [
        {"type": "function_call", "name": "wait", "namespace": "functions", "arguments": "{}"},  # no call_id
        {"type": "function_call_output", "name": "wait", "namespace": "functions", "output": "done"},
        {"type": "function_call_output", "name": "sleep", "output": "slept"},  # no call at all
    ]
    call, result, made_call, made_result = input_messages(items)
    made_id = call["tool_calls"][0]["id"]
    assert call["tool_calls"][0]["function"]["name"] == "functions__wait"
    assert result == {"role": "tool", "tool_call_id": made_id, "content": "done"}
    assert made_call["tool_calls"][0]["function"]["name"] == "sleep"
    assert made_result["tool_call_id"] == made_call["tool_calls"][0]["id"] != made_id
    assert input_messages(items) == [call, result, made_call, made_result]  # the same ids every time


def test_tools_and_tool_choice() -> None:
    assert chat_tools([WEATHER]) == [
        {
            "type": "function",
            "function": {k: WEATHER[k] for k in ("name", "description", "parameters")},
        }
    ]
    chat_shaped = {"type": "function", "function": {"name": "f"}}
    assert chat_tools([chat_shaped]) == [chat_shaped]
    assert chat_tools([{"type": "web_search"}]) == []  # a hosted tool: not one a chat tier can run
    with pytest.raises(BadRequest) as err:
        chat_tools([{"type": "function", "parameters": {}}])  # malformed: no name
    assert err.value.param == "tools[0].name"
    assert chat_tool_choice({"type": "function", "name": "f"}) == {"type": "function", "function": {"name": "f"}}
    assert chat_tool_choice("required") == "required"
    assert chat_tool_choice({"type": "allowed_tools", "mode": "auto", "tools": []}) == "auto"
    assert chat_tool_choice({"type": "web_search"}) == "auto"
    with pytest.raises(BadRequest):
        chat_tool_choice("sometimes")


def test_chat_body_fields() -> None:
    request = {
        "model": "auto",
        "instructions": "Be brief.",
        "input": "hi",
        "tools": [WEATHER],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "max_output_tokens": 50,
        "temperature": 0.2,
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "metadata": {"k": "v"},
        "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}, "strict": True}},
        "reasoning": {"effort": "low"},
        "seed": 7,  # not a Responses field: passes through like on the chat transport
    }
    history = [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "ok"}]
    body, new = chat_body(request, history, stream=True)
    assert body["messages"] == [{"role": "system", "content": "Be brief."}, *history, {"role": "user", "content": "hi"}]
    assert new == [{"role": "user", "content": "hi"}]
    assert body["tools"][0]["function"]["name"] == "get_weather"
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert body["max_tokens"] == 50 and body["temperature"] == 0.2 and body["seed"] == 7
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "w", "schema": {"type": "object"}, "strict": True},
    }
    assert body["reasoning_effort"] == "low" and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}  # a Responses stream ends with usage
    for dropped in ("store", "include", "metadata", "text", "input", "instructions", "max_output_tokens"):
        assert dropped not in body


def test_request_checks() -> None:
    with pytest.raises(ForbiddenField):
        chat_body({"model": "auto", "input": "x", "api_base": "http://evil"}, [], stream=False)
    with pytest.raises(BadRequest) as err:
        chat_body({"input": "x"}, [], stream=False)
    assert err.value.param == "model"
    with pytest.raises(BadRequest):
        chat_body({"model": "auto"}, [], stream=False)  # nothing to answer
    with pytest.raises(BadRequest):
        chat_body({"model": "auto", "input": "x", "conversation": "conv_1"}, [], stream=False)


def test_output_items_of_a_reply() -> None:
    message = {
        "role": "assistant",
        "content": "Here.",
        "tool_calls": [{"id": "c9", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}],
    }
    text, call = output_items(message)
    assert text["type"] == "message" and text["content"][0] == {
        "type": "output_text",
        "text": "Here.",
        "annotations": [],
        "logprobs": [],
    }
    assert call["type"] == "function_call" and call["call_id"] == "c9" and call["id"].startswith("fc_")
    assert assistant_message([text, call]) == message


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"id": "c", "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}


def test_event_builder_text_then_call() -> None:
    b = EventBuilder({"model": "auto"}, "resp_1", 0)
    events = b.start()
    events += b.feed(chunk({"role": "assistant", "content": "Let me "}))
    events += b.feed(chunk({"content": "check."}))
    call = {"index": 0, "id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"ci'}}
    events += b.feed(chunk({"tool_calls": [call]}))
    events += b.feed(chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'ty":"Paris"}'}}]}))
    events += b.feed(chunk({}, "tool_calls", usage={"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}))
    events += b.finish(router={"tier": "fast"})
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    types = [e["type"] for e in events]
    assert_order(types, f"({TEXT_ITEM}|{CALL_ITEM})")
    final = events[-1]["response"]
    assert events[-1]["router"] == {"tier": "fast"}
    assert [i["type"] for i in final["output"]] == ["message", "function_call"]
    assert final["output"][0]["content"][0]["text"] == "Let me check."
    assert final["output"][1]["arguments"] == '{"city":"Paris"}' and final["output"][1]["status"] == "completed"
    assert final["usage"]["input_tokens"] == 3 and final["usage"]["output_tokens"] == 4
    done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    assert done["name"] == "get_weather" and done["arguments"] == '{"city":"Paris"}'


def test_event_builder_length_is_incomplete() -> None:
    b = EventBuilder({"model": "auto"}, "resp_1", 0)
    b.start()
    b.feed(chunk({"content": "cut"}, "length"))
    last = b.finish()[-1]
    assert last["type"] == "response.incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_cache_is_bounded_lru() -> None:
    cache = ResponseCache(max_entries=2)
    for rid in ("a", "b"):
        cache.put(rid, stored([], [{"role": "user", "content": rid}], "s"))
    assert cache.get("a") is not None  # a is now the most recent
    cache.put("c", stored([], [], "s"))
    assert "b" not in cache and "a" in cache and "c" in cache and cache.evicted == 1
    by_bytes = ResponseCache(max_entries=100, max_bytes=100)
    for i in range(10):
        by_bytes.put(str(i), stored([], [{"role": "user", "content": "x" * 30}], "s"))
    assert 0 < by_bytes.bytes <= 100 and "9" in by_bytes and "0" not in by_bytes


async def test_chain_keeps_its_session_and_history() -> None:
    first = prepare({"model": "auto", "input": "hello"}, {}, None, stream=False)
    entry = first.remember(
        [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]}]
    )
    state = ResponseState(ResponseCache(10), None)  # no store behind the process cache
    state.put(first.id, entry)
    follow = {"model": "auto", "input": "and then?", "previous_response_id": first.id}
    second = prepare(follow, {}, await previous(follow, None, state), stream=False)
    assert second.call.session.id == first.call.session.id
    assert second.call.body["messages"] == [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi"},
        {"role": "user", "content": "and then?"},
    ]
    with_header = prepare(follow, {"x-session-id": "mine"}, await previous(follow, None, state), stream=False)
    assert with_header.call.session.id == "mine"
    with pytest.raises(PreviousResponseNotFound) as err:
        await previous({"previous_response_id": "resp_gone"}, None, state)
    assert err.value.code == "previous_response_not_found" and err.value.http_status == 400


# -- what Codex CLI 0.169 sends ---------------------------------------------------------------------------
SPAWN = {
    "type": "function",
    "name": "spawn_agent",
    "parameters": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
    "strict": False,
}
EXEC = {
    "type": "custom",
    "name": "exec",
    "description": "Run JavaScript",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: /[\\s\\S]+/"},
}
WAIT = {"type": "function", "name": "wait", "parameters": {"type": "object", "properties": {}}}


def test_codex_top_level_tools_namespace_web_search_and_output_without_call_id() -> None:
    """The request that was refused: a namespace tool, web_search, and an output with name/namespace
    but no call_id (Codex 0.169, default config)."""
    request = {
        "model": "gpt-6.1-sol",
        "tools": [
            {"type": "namespace", "name": "multi_agent_v1", "description": "", "tools": [SPAWN]},
            {"type": "web_search", "external_web_access": False},
            WEATHER,
        ],
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
            {
                "type": "function_call",
                "call_id": "c1",
                "name": "spawn_agent",
                "namespace": "multi_agent_v1",
                "arguments": '{"message":"hi"}',
            },
            {"type": "function_call_output", "name": "spawn_agent", "namespace": "multi_agent_v1", "output": "ok"},
        ],
    }
    t = translate(request, [], stream=True)
    assert [tool["function"]["name"] for tool in t.body["tools"]] == ["multi_agent_v1__spawn_agent", "get_weather"]
    assert t.left_out == {"tool:web_search": 1}
    _, call, result = t.body["messages"]
    assert call["tool_calls"][0]["function"]["name"] == "multi_agent_v1__spawn_agent"
    assert result == {"role": "tool", "tool_call_id": "c1", "content": "ok"}  # paired with its call
    # the tier's call goes back under the namespace and name the client offered
    answer = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "multi_agent_v1__spawn_agent", "arguments": "{}"}}
        ],
    }
    [item] = output_items(answer, tools=t.tools)
    assert item["type"] == "function_call" and item["name"] == "spawn_agent"
    assert item["namespace"] == "multi_agent_v1" and item["call_id"] == "c2"


def test_codex_additional_tools_item_custom_exec_and_its_round_trip() -> None:
    """Codex's responses-lite turn: the tools come in an `additional_tools` input item (namespaces of
    function and freeform tools); the freeform call goes back as a `custom_tool_call` with its
    namespace, and its output comes back as `custom_tool_call_output`."""
    tools_item = {
        "type": "additional_tools",
        "id": "at_1",
        "role": "developer",
        "tools": [{"type": "namespace", "name": "functions", "description": "", "tools": [EXEC, WAIT]}],
    }
    first = {
        "model": "gpt-6.1-sol",
        "tool_choice": "auto",
        "store": False,
        "client_metadata": {"x": "y"},
        "input": [tools_item, {"type": "message", "role": "user", "content": "list the files"}],
    }
    t = translate(first, [], stream=True)
    exec_tool, wait_tool = t.body["tools"]
    assert exec_tool["function"]["name"] == "functions__exec" and wait_tool["function"]["name"] == "functions__wait"
    assert exec_tool["function"]["parameters"]["required"] == ["input"]
    assert "start: /[\\s\\S]+/" in exec_tool["function"]["parameters"]["properties"]["input"]["description"]
    assert "client_metadata" not in t.body and t.left_out == {}
    assert t.body["messages"] == [{"role": "user", "content": "list the files"}]
    answer = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "functions__exec", "arguments": '{"input":"1+1"}'}}
        ],
    }
    [item] = output_items(answer, tools=t.tools)
    assert {k: item[k] for k in ("type", "call_id", "name", "namespace", "input")} == {
        "type": "custom_tool_call",
        "call_id": "c1",
        "name": "exec",
        "namespace": "functions",
        "input": "1+1",
    }
    # the next turn continues the chain: the tools come from the history, the output pairs with the call
    history = [*t.new, assistant_message([item], t.tools)]
    output = {"type": "custom_tool_call_output", "call_id": "c1", "output": "2"}
    second = translate({"model": "gpt-6.1-sol", "input": [output]}, history, stream=True)
    assert [tool["function"]["name"] for tool in second.body["tools"]] == ["functions__exec", "functions__wait"]
    assert second.body["messages"][-2]["tool_calls"][0]["function"] == answer["tool_calls"][0]["function"]
    assert second.body["messages"][-1] == {"role": "tool", "tool_call_id": "c1", "content": "2"}
    items = items_of([*history, *second.new], second.tools)  # what a native tier gets on the chain
    assert items[0] == tools_item and items[-2]["type"] == "custom_tool_call" and items[-2]["namespace"] == "functions"
    assert items[-1] == output


def test_generated_names_stay_short_safe_and_distinct() -> None:
    long_ns = "mcp__" + "x" * 80
    tools = [
        {"type": "function", "name": "a__b"},
        {"type": "namespace", "name": "a", "tools": [{"type": "function", "name": "b"}]},
        {"type": "namespace", "name": long_ns, "tools": [{"type": "function", "name": "do.it"}]},
    ]
    m = ToolMap.of(tools)
    names = [t["function"]["name"] for t in m.chat_tools]
    assert names[0] == "a__b" and names[1] != "a__b" and names[1].startswith("a__b_")
    assert all(len(n) <= 64 and n.replace("_", "").replace("-", "").isalnum() for n in names)
    assert len(set(names)) == 3
    assert m.offered(names[1]) == Offered("function", "b", "a")
    assert m.offered(names[2]) == Offered("function", "do.it", long_ns)


def test_event_builder_streams_a_freeform_call_as_custom_tool_call() -> None:
    tools = ToolMap.of([{"type": "namespace", "name": "functions", "tools": [EXEC]}])
    b = EventBuilder({"model": "auto"}, "resp_1", 0, tools)
    events = b.start()
    call = {"index": 0, "id": "c1", "type": "function", "function": {"name": "functions__exec", "arguments": '{"in'}}
    events += b.feed(chunk({"tool_calls": [call]}))
    events += b.feed(chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'put":"ls()"}'}}]}, "tool_calls"))
    events += b.finish()
    types = [e["type"] for e in events]
    assert "response.function_call_arguments.delta" not in types
    assert types[-4:] == [
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
        "response.output_item.done",
        "response.completed",
    ]
    [item] = events[-1]["response"]["output"]
    assert item["type"] == "custom_tool_call" and item["input"] == "ls()" and item["namespace"] == "functions"


def test_a_native_tiers_namespaced_and_freeform_calls_are_checked_by_their_chat_names() -> None:
    """A tier serving Responses answers with `namespace` and `custom_tool_call` items: the checks read
    them under the names the chat body offers, so they are not mistaken for unknown tools."""
    request = {"model": "m", "tools": [{"type": "namespace", "name": "functions", "tools": [EXEC, WAIT]}]}
    tools = ToolMap.of_request(request)
    response = {"id": "r", "model": "m", "output": [
        {"type": "function_call", "call_id": "c1", "name": "wait", "namespace": "functions", "arguments": "{}"},
        {"type": "custom_tool_call", "call_id": "c2", "name": "exec", "namespace": "functions", "input": 'say("hi")'},
    ]}  # fmt: skip
    calls = completion_of(response, tools)["choices"][0]["message"]["tool_calls"]
    assert [c["function"] for c in calls] == [
        {"name": "functions__wait", "arguments": "{}"},
        {"name": "functions__exec", "arguments": '{"input":"say(\\"hi\\")"}'},
    ]
    view = ResponsesEvents("t", (), tools)
    item = response["output"][1]
    events = [
        {"type": "response.output_item.added", "output_index": 0, "item": {**item, "input": ""}},
        {"type": "response.custom_tool_call_input.delta", "output_index": 0, "delta": 'say("'},
        {"type": "response.custom_tool_call_input.delta", "output_index": 0, "delta": 'hi")'},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
    ]
    deltas = [view.chunk(orjson.dumps(e)).data["choices"][0]["delta"] for e in events]
    assert deltas[0]["tool_calls"][0]["function"]["name"] == "functions__exec"
    arguments = "".join(d["tool_calls"][0]["function"]["arguments"] for d in deltas)
    assert orjson.loads(arguments) == {"input": 'say("hi")'}


NAMESPACED = [
    {"type": "namespace", "name": "functions", "tools": [EXEC, WAIT]},
    {"type": "namespace", "name": "clock", "tools": [{"type": "function", "name": "sleep"}]},
    {"type": "function", "name": "get_weather"},
]


def test_text_names_a_namespaced_tool_as_the_client_does_even_split_over_deltas() -> None:
    """A chat tier knows `clock.sleep` as `clock__sleep` and may say so in its text: the client reads
    its own name, however the name was split over deltas, and text that only looks like one is kept."""
    tools = ToolMap.of(NAMESPACED)
    assert tools.renamed == {"functions__exec": "functions.exec", "functions__wait": "functions.wait",
                             "clock__sleep": "clock.sleep"}  # fmt: skip
    b = EventBuilder({"model": "auto"}, "resp_1", 0, tools)
    events = b.start()
    for delta in ("I will call clock_", "_sleep, then functions", "__exec (not clock__sleepy", ") and get_weather: ",
                  "clock__sl"):  # fmt: skip
        events += b.feed(chunk({"content": delta}))
    events += b.feed(chunk({}, "stop"))
    events += b.finish()
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    expected = "I will call clock.sleep, then functions.exec (not clock__sleepy) and get_weather: clock__sl"
    assert "".join(deltas) == expected  # a name that never completed goes out as it was written
    assert not any("clock__sleep," in d or "functions__exec" in d for d in deltas)
    [done] = [e for e in events if e["type"] == "response.output_text.done"]
    assert done["text"] == expected and events[-1]["response"]["output"][0]["content"][0]["text"] == expected
    # a whole answer (JSON), and the text before a call, the same way
    [item] = output_items({"role": "assistant", "content": "Calling functions__wait now."}, tools=tools)
    assert item["content"][0]["text"] == "Calling functions.wait now."
    b = EventBuilder({"model": "auto"}, "resp_2", 0, tools)
    events = b.start() + b.feed(chunk({"content": "Now functions__"}))
    call = {"index": 0, "id": "c1", "type": "function", "function": {"name": "functions__wait", "arguments": "{}"}}
    events += b.feed(chunk({"tool_calls": [call]}, "tool_calls")) + b.finish()
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == "Now functions__"  # held for what followed, which was a call: no name came of it
    assert [o["type"] for o in events[-1]["response"]["output"]] == ["message", "function_call"]

"""router/flow/streaming.py: `Gate` (content passes, calls wait for the checks) and `Joiner`
(attempts → one stream)."""

from __future__ import annotations

from typing import Any

from router.flow.streaming import Gate, Joiner
from router.upstream.base import Chunk


def chunk(delta: dict[str, Any], finish: str | None = None, *, id: str = "c1", raw: bool = False) -> Chunk:
    data = {
        "id": id,
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return Chunk(data, raw=b"{}" if raw else None)


def deltas(chunks: list[Chunk]) -> list[dict[str, Any]]:
    return [c.data["choices"][0]["delta"] for c in chunks if c.data.get("choices")]


def test_text_passes_as_it_arrives_with_the_role_held_until_then() -> None:
    gate = Gate(tools_offered=False)
    assert gate.feed(chunk({"role": "assistant"})) == []  # a role-only opener waits for text
    sent = gate.feed(chunk({"content": "Hello"}))
    assert deltas(sent) == [{"role": "assistant"}, {"content": "Hello"}]
    assert deltas(gate.feed(chunk({"content": " world"}))) == [{"content": " world"}]
    assert gate.feed(chunk({}, "stop")) == []  # the finish waits for the checks
    assert gate.message() == {"role": "assistant", "content": "Hello world"}
    released = gate.release()
    assert [c.data["choices"][0]["finish_reason"] for c in released] == ["stop"]


def test_tool_call_deltas_are_held_and_released_whole() -> None:
    gate = Gate(tools_offered=True)
    opening = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "read", "arguments": ""}}
    assert gate.feed(chunk({"role": "assistant", "tool_calls": [opening]})) == []
    assert gate.feed(chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"path"'}}]})) == []
    assert gate.feed(chunk({"tool_calls": [{"index": 0, "function": {"arguments": ': "a"}'}}]})) == []
    assert gate.feed(chunk({}, "tool_calls")) == []
    assert gate.finish_reason == "tool_calls"
    call = {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": '{"path": "a"}'}}
    assert gate.message() == {"role": "assistant", "content": None, "tool_calls": [call]}
    released = gate.release()
    assert deltas(released) == [{"role": "assistant"}, {"tool_calls": [{"index": 0, **call}]}, {}]
    assert [c.more for c in released] == [True, True, False]  # released together: one write


def test_text_that_opens_like_a_call_is_held_when_tools_are_offered() -> None:
    held = Gate(tools_offered=True)
    assert held.feed(chunk({"content": '{"name": "read"'})) == []
    assert held.feed(chunk({"content": "}"})) == []
    assert deltas(held.release()) == [{"content": '{"name": "read"'}, {"content": "}"}]
    free = Gate(tools_offered=False)
    assert deltas(free.feed(chunk({"content": "{"}))) == [{"content": "{"}]


def test_usage_only_chunks_wait_for_the_end() -> None:
    gate = Gate(tools_offered=False)
    usage = Chunk({"id": "c1", "choices": [], "usage": {"total_tokens": 3}})
    assert gate.feed(usage) == []
    assert gate.release() == [usage]


def test_native_events_from_a_call_on_are_held_whole_in_order() -> None:
    gate = Gate(tools_offered=True)
    text = Chunk(chunk({"content": "ok"}).data, native={"type": "content_block_delta"})
    assert gate.feed(text) == [text]
    start = {"index": 0, "id": "t", "function": {"name": "read"}}
    events = [
        Chunk(chunk({"tool_calls": [start]}).data, native={"type": "content_block_start"}),
        Chunk(chunk({}, "tool_calls").data, native={"type": "message_delta"}),
    ]
    assert [gate.feed(e) for e in events] == [[], []]
    assert gate.release() == events  # as they came: no synthesized call chunk


def test_joiner_gives_one_id_one_role_and_a_blank_line_between_attempts() -> None:
    join = Joiner()
    first = [chunk({"role": "assistant"}, id="a", raw=True), chunk({"content": "Let me"}, id="a", raw=True)]
    out = [join(c) for c in first]
    assert out == first  # unchanged chunks keep their raw bytes
    join.next_attempt()
    second = [chunk({"role": "assistant", "content": "Sure"}, id="b", raw=True), chunk({"content": "!"}, id="b")]
    out = [join(c) for c in second]
    assert [c.data["id"] for c in out] == ["a", "a"]
    assert deltas(out) == [{"content": "\n\nSure"}, {"content": "!"}]
    assert out[0].raw is None  # a changed chunk is sent as re-encoded
    assert join.sent


def test_joiner_keeps_a_native_event_when_only_its_id_changed() -> None:
    join = Joiner()
    join(chunk({"content": "x"}, id="a"))
    native = Chunk(chunk({}, "stop", id="b").data, native={"type": "message_stop"})
    assert join(native).native == {"type": "message_stop"}

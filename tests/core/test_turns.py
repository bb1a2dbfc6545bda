"""The agent's newest turn and how calls are compared (router/core/checks/turns.py)."""

from __future__ import annotations

from typing import Any

from router.core.checks.turns import Turn, call_key, newest_turn, tool_calls


def assistant(*calls: tuple[str, str, str]) -> dict[str, Any]:
    made = [{"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls]
    return {"role": "assistant", "content": None, "tool_calls": made}


def result(call_id: str, content: str = "ok") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


READ = assistant(("c1", "cat", '{"path": "/a"}'))
BOTH = assistant(("c2", "cat", '{"path": "/b"}'), ("c3", "wc", '{"path": "/b"}'))


def test_the_results_that_end_a_request_and_the_calls_they_answer() -> None:
    messages = [{"role": "user", "content": "go"}, READ, result("c1"), BOTH, result("c2"), result("c3", "2 lines")]
    turn = newest_turn(messages)
    assert [r["tool_call_id"] for r in turn.results] == ["c2", "c3"]
    assert turn.assistant is BOTH and turn.earlier == [READ]
    assert [c["id"] for c in turn.calls] == ["c2", "c3"]


def test_no_turn_unless_the_request_ends_with_results_after_an_assistant_message() -> None:
    assert newest_turn([{"role": "user", "content": "go"}]) == Turn()
    assert newest_turn([READ, result("c1"), {"role": "user", "content": "and now?"}]) == Turn()
    orphan = newest_turn([{"role": "user", "content": "go"}, result("c1")])  # no assistant before it
    assert orphan.assistant is None and orphan.calls == [] and len(orphan.results) == 1
    assert newest_turn(None) == Turn() and newest_turn("not a list") == Turn()
    assert newest_turn([READ, {"role": "tool", "content": "no id"}]).results == []


def test_calls_are_compared_as_json_however_spelled() -> None:
    same = [
        '{"path": "/a", "n": 1}',
        '{"n":1,"path":"/a"}',
        '  {\n "n": 1,\n "path": "/a"\n}  ',
    ]
    keys = {call_key({"function": {"name": "head", "arguments": a}}) for a in same}
    assert keys == {("head", '{"n":1,"path":"/a"}')}
    assert call_key({"function": {"name": "head", "arguments": '{"n": 2, "path": "/a"}'}}) not in keys
    assert call_key({"function": {"name": "tail", "arguments": '{"n": 1, "path": "/a"}'}}) not in keys


def test_what_is_not_json_is_compared_as_sent() -> None:
    assert call_key({"function": {"name": "sh", "arguments": " ls -l "}}) == ("sh", "ls -l")
    assert call_key({"function": {"name": "now"}}) == ("now", "{}")  # no arguments: an empty object
    assert call_key({"function": "broken"}) == ("", "{}")
    assert call_key("not a call") == ("", "{}")


def test_tool_calls_skip_what_is_not_a_call_object() -> None:
    assert tool_calls({"tool_calls": [{"id": "a"}, "junk", None]}) == [{"id": "a"}]
    assert tool_calls({"tool_calls": "junk"}) == [] and tool_calls({}) == []

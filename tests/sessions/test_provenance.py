"""Reasoning provenance (router/sessions/provenance.py): what each model's tier is sent of the
reasoning state a client replays, and how the answers' state is marked."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from router.sessions.provenance import (
    MARK,
    MessagesMarks,
    mark,
    mark_event,
    mark_items,
    mark_message,
    messages_request,
    model_tag,
    responses_input,
    unmark,
)

FULL, FAST = model_tag("anthropic/claude-full"), model_tag("anthropic/claude-fast")
THINK = {"type": "thinking", "thinking": "hmm", "signature": "RXFzaWc="}
CALL = {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "a"}}
RESULT = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}]}


def thought(tag: str, text: str = "hmm", signature: str = "RXFzaWc=") -> dict[str, Any]:
    return {"type": "thinking", "thinking": text, "signature": mark(signature, tag)}


def loop(*first: dict[str, Any], thinking: str = "enabled", **extra: Any) -> dict[str, Any]:
    """A request whose tool loop is in progress: the assistant turn (`first` blocks, then the call)
    answered by the last user turn's tool_result."""
    return {
        "model": "m",
        "thinking": {"type": thinking, "budget_tokens": 2048},
        "messages": [{"role": "user", "content": "read a"}, {"role": "assistant", "content": [*first, CALL]}, RESULT],
        **extra,
    }


def test_a_mark_names_the_model_and_keeps_the_value() -> None:
    assert model_tag("anthropic/claude-full") == FULL and FULL != FAST and len(FULL) == 12
    marked = mark("RXFzaWc=", FULL)
    assert marked == f"{MARK}{FULL}.RXFzaWc="
    assert unmark(unmark(mark(marked, FAST), FAST), FULL) == "RXFzaWc="  # a router behind a router
    assert unmark(marked, FULL) == "RXFzaWc="
    assert unmark(marked, FAST) is None  # another model's
    assert unmark("RXFzaWc=", FULL) is None  # made before the router (or by a client): no model known
    assert unmark(None, FULL) is None and unmark(f"{MARK}{FULL}", FULL) is None and unmark(MARK, FULL) is None
    assert unmark(f"{MARK}{FULL}x", FULL) is None


def test_a_tier_gets_its_own_models_blocks_restored_and_no_other() -> None:
    redacted = {"type": "redacted_thinking", "data": mark("ZGF0YQ==", FAST)}
    body = {
        "model": "m",
        "thinking": {"type": "adaptive"},
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [thought(FULL, "full's"), {"type": "text", "text": "a"}]},
            {"role": "user", "content": "more"},
            {"role": "assistant", "content": [thought(FAST, "fast's"), redacted, {"type": "text", "text": "b"}]},
            {"role": "user", "content": "and"},
            {"role": "assistant", "content": [THINK, {"type": "text", "text": "c"}]},  # unmarked: dropped
            {"role": "user", "content": "so?"},
        ],
    }
    before = copy.deepcopy(body)
    to_full = messages_request(body, FULL)
    assert body == before  # the client's request is never changed: the next attempt may go elsewhere
    assert to_full["messages"][1]["content"] == [{**THINK, "thinking": "full's"}, {"type": "text", "text": "a"}]
    assert to_full["messages"][3]["content"] == [{"type": "text", "text": "b"}]
    assert to_full["messages"][5]["content"] == [{"type": "text", "text": "c"}]
    assert to_full["thinking"] == {"type": "adaptive"}
    to_fast = messages_request(body, FAST)
    assert to_fast["messages"][1]["content"] == [{"type": "text", "text": "a"}]
    assert to_fast["messages"][3]["content"][:2] == [
        {**THINK, "thinking": "fast's"},
        {"type": "redacted_thinking", "data": "ZGF0YQ=="},
    ]


def test_a_request_without_reasoning_state_is_sent_as_it_is() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]}
    assert messages_request(body, FULL) is body
    assert messages_request({"model": "m", "messages": "not a list"}, FULL)["messages"] == "not a list"
    odd = {"model": "m", "messages": [None, {"role": "user", "content": None}, {"content": [None, 3]}]}
    assert messages_request(odd, FULL) is odd  # liberal in what it accepts: the upstream judges the rest


def test_a_message_of_nothing_but_another_models_thinking_is_left_out() -> None:
    body = {"model": "m", "messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": [thought(FAST)]},
        {"role": "user", "content": "again"},
    ]}  # fmt: skip
    assert [m["role"] for m in messages_request(body, FULL)["messages"]] == ["user", "user"]


def test_a_tool_loop_that_lost_its_leading_thinking_block_is_sent_without_thinking() -> None:
    """Anthropic, with thinking enabled, refuses a tool loop whose final assistant turn does not start
    with a thinking block: the call is made without thinking (and without the thinking edits, which
    need it on)."""
    edits = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}, {"type": "clear_tool_uses_20250919"}]}
    body = loop(thought(FAST), context_management=edits)
    to_fast = messages_request(body, FAST)
    assert to_fast["thinking"]["type"] == "enabled" and to_fast["context_management"] == edits
    assert to_fast["messages"][1]["content"][0]["signature"] == "RXFzaWc="
    to_full = messages_request(body, FULL)
    assert "thinking" not in to_full and to_full["messages"][1]["content"] == [CALL]
    assert to_full["context_management"] == {"edits": [{"type": "clear_tool_uses_20250919"}]}
    only = messages_request(loop(thought(FAST), context_management={"edits": [edits["edits"][0]]}), FULL)
    assert "context_management" not in only and "thinking" not in only


def test_a_tool_loop_answered_without_thinking_is_sent_without_it() -> None:
    """A turn a chat tier answered, or one made without thinking, has no block to start with."""
    assert "thinking" not in messages_request(loop(), FULL)
    adaptive = loop(thinking="adaptive")  # adaptive thinking may skip thinking: no such rule
    assert messages_request(adaptive, FULL) is adaptive
    finished = {**loop(), "messages": [*loop()["messages"], {"role": "assistant", "content": "done"},
                                        {"role": "user", "content": "next"}]}  # fmt: skip
    assert messages_request(finished, FULL) is finished  # no tool loop in progress


def test_the_final_assistant_turn_is_found_across_system_and_split_messages() -> None:
    system = {"role": "system", "content": "# Environment"}  # Claude Code 2.1's mid-conversation turn
    body = loop(thought(FULL))
    body["messages"] = [
        body["messages"][0],
        {"role": "assistant", "content": [thought(FULL)]},  # one turn in two messages, as the API joins them
        {"role": "assistant", "content": [CALL]},
        system,
        RESULT,
        {"role": "user", "content": "and then?"},
    ]
    assert messages_request(body, FULL)["thinking"]["type"] == "enabled"
    assert "thinking" not in messages_request(body, FAST)


def test_answers_are_marked_with_their_model() -> None:
    blocks = [{"type": "thinking", "thinking": "t", "signature": "c2ln"}, {"type": "redacted_thinking", "data": "ZA=="}]
    message = {"content": [*blocks, {"type": "text", "text": "x"}]}
    assert mark_message(message, FULL)
    assert [unmark(message["content"][0]["signature"], FULL), unmark(message["content"][1]["data"], FULL)] == [
        "c2ln", "ZA=="
    ]  # fmt: skip
    assert not mark_message({"content": [{"type": "text", "text": "x"}]}, FULL)


def test_a_streamed_signature_is_marked_once_whatever_its_pieces() -> None:
    marks = MessagesMarks(FULL)
    empty = {"type": "thinking", "thinking": "", "signature": ""}
    events: list[dict[str, Any]] = [
        {"type": "content_block_start", "index": 0, "content_block": dict(empty)},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "t"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "c2"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "ln"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "redacted_thinking", "data": "ZA=="}},
        {"type": "content_block_start", "index": 2, "content_block": dict(empty)},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "signature_delta", "signature": "eHk="}},
    ]  # fmt: skip
    for event in events:
        marks.event(event)
    joined = "".join(e["delta"]["signature"] for e in events[2:4])
    assert unmark(joined, FULL) == "c2ln"
    assert unmark(events[5]["content_block"]["data"], FULL) == "ZA=="
    assert unmark(events[7]["delta"]["signature"], FULL) == "eHk="


@pytest.mark.parametrize("kind", ["reasoning", "compaction"])
def test_a_responses_tier_gets_its_own_models_encrypted_items_only(kind: str) -> None:
    gpt, other = model_tag("openai/gpt-main"), model_tag("openai/gpt-mini")
    sealed = {"type": kind, "id": "rs_1", "summary": [], "encrypted_content": mark("gAAAAA1", other)}
    body = {"model": "gpt-main", "input": [
        {"type": "message", "role": "user", "content": "hi"},
        sealed,
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        {"type": "message", "id": "msg_2", "role": "assistant", "content": [{"type": "output_text", "text": "x"}]},
        {"type": "reasoning", "id": "rs_3", "summary": [], "encrypted_content": mark("gAAAAA3", gpt)},
        {"type": "function_call", "id": "fc_3", "call_id": "c3", "name": "f", "arguments": "{}"},
    ]}  # fmt: skip
    before = copy.deepcopy(body)
    items = responses_input(body, gpt)["input"]
    assert body == before
    assert [i.get("type") for i in items] == ["message", "function_call", "function_call_output", "message",
                                              "reasoning", "function_call"]  # fmt: skip
    assert "id" not in items[1]  # came with the dropped item: its upstream id means nothing to this model
    assert items[3]["id"] == "msg_2" and items[5]["id"] == "fc_3"  # not in the dropped item's output
    assert items[4]["encrypted_content"] == "gAAAAA3"
    plain = {"model": "m", "input": [{"type": "reasoning", "summary": [], "encrypted_content": None}]}
    assert responses_input(plain, gpt) is plain and responses_input({"input": "hi"}, gpt) == {"input": "hi"}


def test_responses_answers_and_events_are_marked() -> None:
    gpt = model_tag("openai/gpt-main")
    output = [{"type": "reasoning", "encrypted_content": "gAAAAA1"}, {"type": "message", "content": []}]
    assert mark_items(output, gpt) and unmark(output[0]["encrypted_content"], gpt) == "gAAAAA1"
    event = {"type": "response.output_item.done", "item": {"type": "reasoning", "encrypted_content": "gAAAAA2"}}
    mark_event(event, gpt)
    done = {"type": "response.completed", "response": {"output": [{"type": "compaction", "encrypted_content": "e"}]}}
    mark_event(done, gpt)
    assert unmark(event["item"]["encrypted_content"], gpt) == "gAAAAA2"
    assert unmark(done["response"]["output"][0]["encrypted_content"], gpt) == "e"
    added = {"type": "response.output_item.added", "item": {"type": "reasoning", "encrypted_content": None}}
    mark_event(added, gpt)
    assert added["item"]["encrypted_content"] is None

"""router/sessions/identity.py: which conversation a call belongs to, per client API, and its prefix."""

from __future__ import annotations

from router.sessions import Session, session_of
from router.sessions.identity import SIDE_CALL_TOKENS, prefix_digest

TOOLS = [{"type": "function", "function": {"name": "Read", "parameters": {"type": "object"}}}]


def body(*messages: dict[str, object], tools: object = TOOLS, **extra: object) -> dict[str, object]:
    return {"model": "auto", "messages": list(messages), **({"tools": tools} if tools else {}), **extra}


SYSTEM = {"role": "system", "content": "You are Claude Code."}
ASK = {"role": "user", "content": "What is the secret word?"}


def test_the_header_wins_over_everything() -> None:
    b = body(SYSTEM, ASK, user="u1", prompt_cache_key="k1")
    assert session_of(b, {"x-session-id": "mine", "session_id": "codex"}).id == "mine"


def test_claude_code_names_its_session_in_a_header_and_in_metadata() -> None:
    assert session_of(body(ASK), {"x-claude-code-session-id": "abc-123"}).id == "client:abc-123"
    user_id = "user_0a1b_account_5e6f_session_0f3c2d1e-aaaa-bbbb-cccc-1234567890ab"
    request = {"model": "claude", "metadata": {"user_id": user_id}, "messages": [ASK]}
    assert session_of(body(ASK), {}, request=request).id == "client:0f3c2d1e-aaaa-bbbb-cccc-1234567890ab"
    # the Messages translation maps metadata.user_id to `user`: the same session either way
    assert session_of(body(ASK, user=user_id), {}).id == "client:0f3c2d1e-aaaa-bbbb-cccc-1234567890ab"
    as_json = '{"device_id":"d1","account_uuid":"","session_id":"2d5af098-aa7c"}'  # Claude Code 2.1
    assert session_of(body(ASK, user=as_json), {}).id == "client:2d5af098-aa7c"
    no_session = '{"device_id":"d1"}'
    assert session_of(body(ASK, user=no_session), {}).id == "user:" + no_session


def test_codex_names_its_conversation_by_header_or_cache_key() -> None:
    assert session_of(body(ASK), {"session_id": "c-1"}).id == "client:c-1"
    assert session_of(body(ASK), {"conversation_id": "c-2"}).id == "client:c-2"
    request = {"model": "gpt-5", "input": [ASK], "prompt_cache_key": "c-3"}
    assert session_of(body(ASK), {}, request=request).id == "client:c-3"


def test_a_chain_a_user_and_else_the_opening() -> None:
    assert session_of(body(ASK, previous_response_id="resp_1"), {}).id == "resp:resp_1"
    assert session_of(body(ASK, user="alice"), {}).id == "user:alice"
    first = session_of(body(SYSTEM, ASK), {})
    later = session_of(body(SYSTEM, ASK, {"role": "assistant", "content": "Let me look."}, ASK), {})
    other = session_of(body(SYSTEM, {"role": "user", "content": "Another task"}), {})
    assert first.id == later.id != other.id
    assert session_of(body(ASK), {}, conversation="resp:known").id == "resp:known"


def test_the_prefix_is_the_instructions_and_the_tools() -> None:
    turn1 = body(SYSTEM, ASK)
    turn2 = body(SYSTEM, ASK, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"})
    subagent = body({"role": "system", "content": "You are a search sub-agent."}, ASK)
    fewer_tools = body(SYSTEM, ASK, tools=[*TOOLS, {"type": "function", "function": {"name": "Bash"}}])
    assert prefix_digest(turn1) == prefix_digest(turn2)
    assert len({prefix_digest(turn1), prefix_digest(subagent), prefix_digest(fewer_tools)}) == 3
    s = session_of(turn1, {"x-session-id": "s"})
    assert s.key == ("s", prefix_digest(turn1))


def test_a_side_call_is_small_and_offers_no_tools() -> None:
    title = body({"role": "user", "content": "Write a 5-word title for: fix the bug"}, tools=None)
    assert session_of(title, {}, prompt_tokens=40).side
    assert not session_of(body(SYSTEM, ASK), {}, prompt_tokens=40).side  # tools: the agent's own loop
    assert not session_of(title, {}, prompt_tokens=SIDE_CALL_TOKENS).side  # a long summary is a prompt of its own
    assert repr(Session("x", side=True)) == "Session('x', side)"

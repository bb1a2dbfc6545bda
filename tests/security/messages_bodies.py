"""Messages request bodies for property-based tests (tests/security/test_fuzz_messages.py), and the
policy they are sent through.

    messages_policy(fast_url, full_url)   `fast` a chat tier; `full` and its fast-lane variant
                                          `full-fast` `anthropic/*` tiers (key NATIVE_KEY); lanes
    messages_bodies                       plausible and wild bodies, with unknown (and forbidden) fields
    lane_headers                          `x-router-lane` values: none mostly, known lanes, any name
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from tests.conftest import policy_text
from tests.security.test_fuzz import any_json

NATIVE_KEY = "sk-ant-fuzz"
LANES = """
lanes:
  fast: {tiers: {full: full-fast}, params: {priority: -10}}
  priority: {service_tier: [priority], forward: true}
  flex: {refuse: true}
  solo: {max_concurrent: 1, over_limit: refuse}
"""


def messages_policy(fast: str, full: str) -> str:
    """`fast` speaks chat completions; `full` and its fast-lane variant are `anthropic/*` tiers."""
    escalate = "escalation: {to: full, max_attempts: 2, on_exhausted: deliver}\n"  # see stack.ESCALATE
    policy = policy_text(fast, full, extra=escalate + LANES)
    chat = f"  full:\n    model: openai/full-model\n    api_base: {full}\n"
    assert chat in policy
    root = full.removesuffix("/v1")
    native = "".join(
        f"  {name}:\n    model: anthropic/claude-test\n    api_base: {root}\n    api_key: {NATIVE_KEY}\n"
        for name in ("full", "full-fast")
    )
    return policy.replace(chat, native)


def family(wild: bool) -> st.SearchStrategy[dict[str, Any]]:
    """Messages bodies. Plausible ones are well-formed requests with random content that mostly reach
    an upstream; wild ones put any JSON at all in any field, at every level."""

    def either(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.one_of(good, good, any_json) if wild else good

    text = st.one_of(st.text(max_size=60), st.sampled_from(["", "\x00", "\u202e", "🦜" * 20, "</s>", "```json\n{"]))
    ids = st.one_of(st.sampled_from(["toolu_1", "toolu_2"]), st.text(min_size=1, max_size=12))
    names = st.one_of(st.sampled_from(["get_weather", "read_file", "x"]), st.text(min_size=1, max_size=20))
    schemas = st.one_of(
        st.just({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        st.just({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}}),
        st.just({"type": "nope"}),
        st.just({"$ref": "#/definitions/missing"}),
        st.just({"type": "object", "properties": {"a": {"$ref": "#"}}}),
        any_json,
    )
    text_blocks = st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": either(text)}), max_size=2)
    source = st.fixed_dictionaries(
        {"type": either(st.sampled_from(["base64", "url", "text", "file"]))},
        optional={"media_type": either(st.just("image/png")), "data": either(text), "url": either(text)},
    )
    blocks = [
        st.fixed_dictionaries(
            {"type": st.just("text"), "text": either(text)},
            optional={"cache_control": either(st.just({"type": "ephemeral"}))},
        ),
        st.fixed_dictionaries({"type": st.sampled_from(["image", "document"]), "source": either(source)}),
        st.fixed_dictionaries(
            {"type": st.just("tool_use"), "id": either(ids), "name": either(names), "input": either(any_json)}
        ),
        st.fixed_dictionaries(
            {"type": st.just("tool_result"), "tool_use_id": either(ids)},
            optional={"content": either(st.one_of(text, text_blocks)), "is_error": either(st.booleans())},
        ),
        st.fixed_dictionaries({"type": st.just("thinking"), "thinking": text, "signature": text}),
        st.fixed_dictionaries(
            {
                "type": st.sampled_from(
                    ["redacted_thinking", "server_tool_use", "web_search_tool_result", "", "TEXT", "tool_use ", "x"]
                )
            }
        ),
    ]
    content = st.one_of(text, st.lists(either(st.one_of(*blocks)), max_size=4))
    roles = st.sampled_from(["user", "assistant", "system", "tool", "", "USER"] if wild else ["user", "assistant"])
    message = st.fixed_dictionaries({"role": either(roles), "content": either(content)})
    # an agent's tool loop: the assistant's tool_use, then the user's tool_result
    call = st.fixed_dictionaries(
        {
            "type": st.just("tool_use"),
            "id": either(ids),
            "name": either(names),
            "input": either(st.just({"city": "Paris"})),
        }
    )
    result = st.fixed_dictionaries(
        {"type": st.just("tool_result"), "tool_use_id": either(ids)},
        optional={"content": either(st.one_of(text, text_blocks)), "is_error": either(st.booleans())},
    )
    looping = st.tuples(call, result).map(
        lambda pair: [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [pair[0]]},
            {"role": "user", "content": [pair[1]]},
        ]
    )
    asking = st.tuples(st.lists(message, max_size=3), content).map(lambda t: [*t[0], {"role": "user", "content": t[1]}])
    custom = st.fixed_dictionaries(
        {"name": either(names)},
        optional={"input_schema": schemas, "description": either(text), "type": either(st.just("custom"))},
    )
    # server tools run by Anthropic: a chat tier never sees them (names stay strings: the fake reads them)
    server = st.fixed_dictionaries(
        {
            "type": st.sampled_from(["web_search_20250305", "web_fetch_20250910", "code_execution_20250825"]),
            "name": st.sampled_from(["web_search", "web_fetch", "code_execution"]),
        }
    )
    client = st.fixed_dictionaries(  # Anthropic-defined client tools: no schema in the request
        {
            "type": st.sampled_from(["bash_20250124", "text_editor_20250728"]),
            "name": st.sampled_from(["bash", "str_replace_based_edit_tool"]),
        }
    )
    tools = st.lists(either(st.one_of(custom, custom, server, client)), max_size=3)
    tool_choice = st.fixed_dictionaries(
        {"type": either(st.sampled_from(["auto", "any", "none", "tool"]))},
        optional={"name": either(names), "disable_parallel_tool_use": either(st.booleans())},
    )
    models = st.sampled_from(["auto", "fast", "full", "full-fast", "claude-sonnet-4-5", "", "*"] if wild else ["auto"])
    return st.fixed_dictionaries(
        {
            "model": either(models),
            "max_tokens": either(st.integers(-5, 10**6) if wild else st.integers(1, 4096)),
            "messages": either(st.one_of(asking, looping)),
            "stream": either(st.sampled_from([True, False])),
        },
        optional={
            "system": either(st.one_of(text, text_blocks)),
            "tools": either(tools),
            "tool_choice": either(tool_choice),
            "temperature": either(st.floats(0, 1)),
            "top_p": either(st.floats(0, 1)),
            "top_k": either(st.integers(0, 500)),
            "stop_sequences": either(st.lists(text, max_size=2)),
            "metadata": either(st.fixed_dictionaries({"user_id": either(text)})),
            "thinking": either(
                st.fixed_dictionaries({"type": st.just("enabled"), "budget_tokens": st.integers(0, 4096)})
            ),
            "speed": either(st.sampled_from(["fast", "standard", "auto", "flex", "solo", "priority", "", "turbo"])),
            "service_tier": either(st.sampled_from(["priority", "flex", "default", "auto", "standard_only", "scale"])),
        },
    )


def with_unknown_fields(bodies: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """Fields the router does not know: passed upstream untouched (or refused, for api_base & co)."""
    forbidden = st.sampled_from(
        ["api_base", "base_url", "api_key", "api_version", "custom_llm_provider", "extra_headers"]
    )
    extra = st.dictionaries(st.one_of(st.text(max_size=10), st.text(max_size=10), forbidden), any_json, max_size=2)
    return st.tuples(bodies, extra).map(lambda pair: {**pair[1], **pair[0]})


_plausible, _wild = with_unknown_fields(family(wild=False)), with_unknown_fields(family(wild=True))
messages_bodies = st.one_of(_plausible, _plausible, _wild)
lane_headers = st.one_of(  # mostly none: an unknown lane is a 400 before anything else is looked at
    *[st.none()] * 4,
    st.sampled_from(["fast", "priority", "flex", "solo", "standard", "", "nope", "FAST", "x" * 300]),
    st.from_regex(r"[A-Za-z0-9_.\-]{1,30}", fullmatch=True),
)

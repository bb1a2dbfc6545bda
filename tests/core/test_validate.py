"""Tool-call checks: every mistake kind is found, and tricky valid answers are left alone."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from router.core.checks.validate import KINDS, Checks, Validator, check
from router.mistakes import Mistake
from tests.sweeps import SHELL_TOOLS, SWEEP_CALLS, SWEEP_TEXT, calls, tool

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["c", "f"]},
                "days": {"type": "integer", "minimum": 1},
            },
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search documents.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "number"},
                "filters": {
                    "type": "object",
                    "properties": {"lang": {"type": "string"}, "since": {"type": "string"}},
                    "additionalProperties": False,
                },
                "sort": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "field": {"type": "string"},
                            "order": {"type": "string", "enum": ["asc", "desc"]},
                        },
                        "required": ["field"],
                    },
                },
            },
            "required": ["query"],
        },
    },
}
NO_PARAMS = {"type": "function", "function": {"name": "get_time", "description": "Current time."}}
OPTIONAL_ONLY = {
    "type": "function",
    "function": {
        "name": "list_files",
        "parameters": {"type": "object", "properties": {"dir": {"type": "string"}}},
    },
}
BAD_SCHEMA = {
    "type": "function",
    "function": {"name": "broken", "parameters": {"type": "objekt", "properties": {"x": {"type": 5}}}},
}
NOT_A_SCHEMA = {"type": "function", "function": {"name": "weird", "parameters": "a string"}}
REMOTE_REF = {
    "type": "function",
    "function": {"name": "remote", "parameters": {"$ref": "http://127.0.0.1:9/never-fetched.json"}},
}
UNKNOWN_DRAFT = {
    "type": "function",
    "function": {
        "name": "future",
        "parameters": {"$schema": "https://example.invalid/draft/2099", "type": "object"},
    },
}
DRAFT7 = {  # array-form `items` is draft-07 only: under 2020-12 this schema would be invalid
    "type": "function",
    "function": {
        "name": "set_pair",
        "parameters": {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {"pair": {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]}},
            "required": ["pair"],
        },
    },
}
CUSTOM = {"type": "custom", "custom": {"name": "apply_patch", "description": "free-form patch"}}
FLAT = {"type": "function", "name": "flat_tool", "parameters": {"type": "object", "required": ["a"]}}

ALL_TOOLS = [
    WEATHER,
    SEARCH,
    NO_PARAMS,
    OPTIONAL_ONLY,
    BAD_SCHEMA,
    NOT_A_SCHEMA,
    REMOTE_REF,
    UNKNOWN_DRAFT,
    DRAFT7,
    CUSTOM,
    FLAT,
]


def call(name: str, arguments: Any, n: int = 0) -> dict[str, Any]:
    if isinstance(arguments, dict):
        arguments = orjson.dumps(arguments).decode()
    return {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": arguments}}


def msg(content: Any = None, *calls: dict[str, Any], **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content, **extra}
    if calls:
        message["tool_calls"] = list(calls)
    return message


def req(tool_choice: Any = "auto", tools: list[Any] | None = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], **extra}
    body["tools"] = ALL_TOOLS if tools is None else tools
    if tool_choice is not None:
        body["tool_choice"] = tool_choice
    return body


def named(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name}}


MISTAKES = [
    # invalid_json
    (
        "json-truncated",
        msg(None, call("get_weather", '{"city": "Par')),
        req(),
        [("invalid_json", "get_weather")],
    ),
    ("json-array", msg(None, call("get_weather", '["Paris"]')), req(), [("invalid_json", "get_weather")]),
    ("json-null", msg(None, call("list_files", "null")), req(), [("invalid_json", "list_files")]),
    ("json-empty-required", msg(None, call("get_weather", "")), req(), [("invalid_json", "get_weather")]),
    ("json-missing-args-required", msg(None, call("search", None)), req(), [("invalid_json", "search")]),
    (
        "json-dict-not-string",
        msg(
            None,
            {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "P"}}},
        ),
        req(),
        [("invalid_json", "get_weather")],
    ),
    (
        "json-single-quotes",
        msg(None, call("get_weather", "{'city': 'Paris'}")),
        req(),
        [("invalid_json", "get_weather")],
    ),
    (
        "json-nan",
        msg(None, call("search", '{"query": "x", "limit": NaN}')),
        req(),
        [("invalid_json", "search")],
    ),
    # unknown_tool
    (
        "unknown-typo",
        msg(None, call("get_wether", {"city": "Paris"})),
        req(),
        [("unknown_tool", "get_wether")],
    ),
    (
        "unknown-no-tools",
        msg(None, call("get_weather", {"city": "Paris"})),
        req(None, tools=[]),
        [("unknown_tool", "get_weather")],
    ),
    (
        "unknown-choice-none",
        msg(None, call("get_weather", {"city": "Paris"})),
        req("none"),
        [("unknown_tool", "get_weather")],
    ),
    (
        "unknown-no-name",
        msg(None, {"id": "c", "type": "function", "function": {"arguments": "{}"}}),
        req(),
        [("unknown_tool", "")],
    ),
    # schema_violation
    (
        "schema-missing-required",
        msg(None, call("get_weather", {"unit": "c"})),
        req(),
        [("schema_violation", "get_weather")],
    ),
    (
        "schema-wrong-type",
        msg(None, call("get_weather", {"city": 5})),
        req(),
        [("schema_violation", "get_weather")],
    ),
    (
        "schema-enum",
        msg(None, call("get_weather", {"city": "P", "unit": "kelvin"})),
        req(),
        [("schema_violation", "get_weather")],
    ),
    (
        "schema-additional",
        msg(None, call("get_weather", {"city": "P", "country": "FR"})),
        req(),
        [("schema_violation", "get_weather")],
    ),
    (
        "schema-integer-float",
        msg(None, call("get_weather", {"city": "P", "days": 1.5})),
        req(),
        [("schema_violation", "get_weather")],
    ),
    (
        "schema-nested",
        msg(None, call("search", {"query": "q", "filters": {"lang": 5}})),
        req(),
        [("schema_violation", "search")],
    ),
    (
        "schema-array-of-objects",
        msg(None, call("search", {"query": "q", "sort": [{"field": "d", "order": "up"}]})),
        req(),
        [("schema_violation", "search")],
    ),
    ("schema-empty-args-flat", msg(None, call("flat_tool", {})), req(), [("schema_violation", "flat_tool")]),
    (
        "schema-draft07",
        msg(None, call("set_pair", {"pair": [1, "a"]})),
        req(),
        [("schema_violation", "set_pair")],
    ),
    # missing_tool_call
    ("missing-required", msg("Sure, it is sunny."), req("required"), [("missing_tool_call", "")]),
    (
        "missing-named-text",
        msg("It is sunny."),
        req(named("get_weather")),
        [("missing_tool_call", "get_weather")],
    ),
    (
        "missing-named-other-called",
        msg(None, call("search", {"query": "q"})),
        req(named("get_weather")),
        [("missing_tool_call", "get_weather")],
    ),
    (
        "missing-announced-let-me",
        msg("Let me call get_weather for Paris."),
        req(),
        [("missing_tool_call", "get_weather")],
    ),
    (
        "missing-announced-ill-use",
        msg("I'll use the `search` tool to find that."),
        req(),
        [("missing_tool_call", "search")],
    ),
    (
        "missing-announced-calling",
        msg("Sure thing. Calling search now..."),
        req(),
        [("missing_tool_call", "search")],
    ),
    (
        "missing-announced-case",
        msg("I WILL CALL GET_WEATHER."),
        req(),
        [("missing_tool_call", "get_weather")],
    ),
    # text_tool_call
    (
        "text-json-fence",
        msg('```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```'),
        req(),
        [("text_tool_call", "get_weather")],
    ),
    (
        "text-hermes-tags",
        msg('<tool_call>\n{"name": "search", "arguments": {"query": "x"}}\n</tool_call>'),
        req(),
        [("text_tool_call", "search")],
    ),
    (
        "text-openai-shape",
        msg('{"type": "function", "function": {"name": "get_weather", "parameters": {}}}'),
        req(),
        [("text_tool_call", "get_weather")],
    ),
    (
        "text-function-key",
        msg('{"function": "search", "args": {"query": "x"}}'),
        req(),
        [("text_tool_call", "search")],
    ),
    (
        "text-list-of-calls",
        msg('[{"name": "search", "arguments": {}}, {"name": "get_time", "arguments": {}}]'),
        req(),
        [("text_tool_call", "search"), ("text_tool_call", "get_time")],
    ),
    (
        "text-prose-around",
        msg('I will call it now: {"name": "get_weather", "arguments": {"city": "P"}} done'),
        req(),
        [("text_tool_call", "get_weather")],
    ),
    ("text-pythonic", msg("[get_weather(city='Paris')]"), req(), [("text_tool_call", "get_weather")]),
    (
        "text-tool-code",
        msg('```tool_code\nprint(get_weather(city="Paris"))\n```'),
        req(),
        [("text_tool_call", "get_weather")],
    ),
    (
        "text-required-satisfied-by-leak",
        msg('{"name": "search", "arguments": {"query": "x"}}'),
        req("required"),
        [("text_tool_call", "search")],
    ),
    (
        "text-named-other",
        msg('{"name": "search", "arguments": {"query": "x"}}'),
        req(named("get_weather")),
        [("text_tool_call", "search"), ("missing_tool_call", "get_weather")],
    ),
    (
        "text-call-cut-short",
        msg('{"name": "get_weather", "arguments": {"city": "Paris"}'),
        req(),
        [("text_tool_call", "")],
    ),
    (
        "text-call-cut-before-its-arguments",  # seen from Qwen2.5-Coder-1.5B as a whole final answer
        msg('{"name": "get_weather",\n'),
        req(),
        [("text_tool_call", "")],
    ),
    (
        "text-call-unknown-name",
        msg('```json\n{"name": "df -h", "arguments": {"type": "object", "properties": {"path"'),
        req(),
        [("text_tool_call", "")],
    ),
    (
        "text-call-broken-tag",
        msg('Checking.\n<tool_call>\n{"name": "search", "arguments": {"query": }'),
        req(),
        [("text_tool_call", "")],
    ),
    # empty_response
    ("empty-none", msg(None), req(), [("empty_response", "")]),
    ("empty-whitespace", msg("  \n\t"), req(), [("empty_response", "")]),
    ("empty-no-tools", msg(""), req(None, tools=[]), [("empty_response", "")]),
    ("empty-empty-calls", msg(None, tool_calls=[]), req(), [("empty_response", "")]),
    ("empty-required", msg(None), req("required"), [("empty_response", "")]),
    ("empty-reasoning-only", msg(None, reasoning_content="thinking..."), req(), [("empty_response", "")]),
    # parallel calls: each checked on its own
    (
        "parallel-one-bad",
        msg(None, call("get_weather", {"city": "P"}, 0), call("search", {"limit": 3}, 1)),
        req(),
        [("schema_violation", "search")],
    ),
    (
        "parallel-three-bad",
        msg(
            None,
            call("get_weather", "{", 0),
            call("nope", {}, 1),
            call("search", {}, 2),
            call("get_time", {}, 3),
        ),
        req(),
        [("invalid_json", "get_weather"), ("unknown_tool", "nope"), ("schema_violation", "search")],
    ),
    # tool_sweep (more below)
    (
        "sweep-first-three-in-order",
        msg(None, call("get_weather", {"city": "P"}, 0), call("search", {"query": "q"}, 1), call("get_time", {}, 2)),
        req(),
        [("tool_sweep", "")],
    ),
    # tool_spray (more below)
    (
        "spray-of-one-tool",
        msg(None, *(call("get_weather", {"city": f"City {i}"}, i) for i in range(8))),
        req(),
        [("tool_spray", "get_weather")],
    ),
    # repeated_call (more below)
    (
        "repeat-of-the-last-turn",
        msg(None, call("get_weather", '{"city":"Paris"}', 1)),
        req(
            messages=[
                {"role": "user", "content": "weather in Paris?"},
                msg(None, call("get_weather", {"city": "Paris"}, 0)),
                {"role": "tool", "tool_call_id": "call_0", "content": "18 C"},
            ]
        ),
        [("repeated_call", "get_weather")],
    ),
]

VALID = [
    ("valid-single", msg(None, call("get_weather", {"city": "Paris", "unit": "c", "days": 2})), req()),
    ("valid-optional-omitted", msg(None, call("get_weather", {"city": "Paris"})), req()),
    ("valid-additional-false-satisfied", msg(None, call("get_weather", {"city": "P", "unit": "f"})), req()),
    (
        "valid-nested-object",
        msg(None, call("search", {"query": "q", "filters": {"lang": "en", "since": "2024"}})),
        req(),
    ),
    (
        "valid-array-of-objects",
        msg(None, call("search", {"query": "q", "sort": [{"field": "d"}, {"field": "t", "order": "asc"}]})),
        req(),
    ),
    ("valid-integer-for-number", msg(None, call("search", {"query": "q", "limit": 3})), req()),
    ("valid-whitespace-json", msg(None, call("get_weather", ' \n{ "city" : "P" }\n')), req()),
    ("valid-no-parameters-empty", msg(None, call("get_time", "")), req()),
    ("valid-no-parameters-object", msg(None, call("get_time", {})), req()),
    ("valid-no-parameters-extra", msg(None, call("get_time", {"tz": "UTC"})), req()),
    ("valid-empty-args-optional-only", msg(None, call("list_files", "")), req()),
    ("valid-absent-args-optional-only", msg(None, call("list_files", None)), req()),
    ("valid-invalid-client-schema", msg(None, call("broken", {"x": "anything"})), req()),
    ("valid-not-a-schema", msg(None, call("weird", {"x": 1})), req()),
    ("valid-remote-ref-not-fetched", msg(None, call("remote", {"x": 1})), req()),
    ("valid-unknown-draft", msg(None, call("future", {"x": 1})), req()),
    ("valid-draft07", msg(None, call("set_pair", {"pair": ["a", 1]})), req()),
    (
        "valid-custom-tool",
        msg(None, {"id": "c", "type": "custom", "custom": {"name": "apply_patch", "input": "*** Begin Patch"}}),
        req(),
    ),
    ("valid-flat-tool", msg(None, call("flat_tool", {"a": 1})), req()),
    (
        "valid-parallel",
        msg(None, call("get_weather", {"city": "P"}, 0), call("get_weather", {"city": "Q"}, 1)),
        req(),
    ),
    ("valid-named-choice", msg(None, call("get_weather", {"city": "P"})), req(named("get_weather"))),
    ("valid-required-choice", msg(None, call("search", {"query": "q"})), req("required")),
    ("valid-plain-text", msg("It is 20°C and sunny in Paris."), req()),
    ("valid-choice-none-text", msg("I'll call get_weather later if you want."), req("none")),
    ("valid-choice-none-json-text", msg('{"name": "get_weather", "arguments": {}}'), req("none")),
    (
        "valid-json-answer-not-a-tool",
        msg('{"name": "Paris", "temperature": 20, "arguments": ["warm"]}'),
        req(response_format={"type": "json_object"}),
    ),
    ("valid-json-answer-no-tools", msg('{"name": "get_weather", "arguments": {}}'), req(None, tools=[])),
    (
        "valid-json-answer-call-shaped",
        msg('{"name": "Paris", "arguments": ["warm"]'),
        req(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}),
    ),
    ("valid-prose-quoting-json", msg('Send it as {"name": "x", "arguments": {}} next time.'), req()),
    ("valid-tool-name-without-args-key", msg('{"tool": "search", "note": "not a call"}'), req()),
    (
        "valid-code-with-braces",
        msg('Here:\n```js\nfunction f(x) { return {"city": x}; }\n```\nUse `{}` or {a}.'),
        req(),
    ),
    ("valid-code-mentions-tool", msg("```python\nresult = get_weather(city)\nprint(result)\n```"), req()),
    ("valid-past-narrative", msg("After calling get_weather, I found it is 20°C in Paris."), req()),
    ("valid-explains-tool", msg("The get_weather tool returns the temperature (in C)."), req()),
    ("valid-refusal", msg(None, refusal="I can't help with that."), req()),
    ("valid-content-parts", msg([{"type": "text", "text": "Done."}]), req()),
    ("valid-unknown-choice-shape", msg("ok"), req({"type": "allowed_tools", "mode": "auto", "tools": []})),
]


def kinds(mistakes: list[Mistake]) -> list[tuple[str, str]]:
    return [(m.kind, m.tool) for m in mistakes]


@pytest.fixture
def validator() -> Validator:
    return Validator()


@pytest.mark.parametrize(
    ("message", "request_body", "expected"), [c[1:] for c in MISTAKES], ids=[c[0] for c in MISTAKES]
)
def test_mistakes_found(
    validator: Validator,
    message: dict[str, Any],
    request_body: dict[str, Any],
    expected: list[tuple[str, str]],
) -> None:
    found = validator.check(message, request_body)
    assert kinds(found) == expected
    for m in found:
        assert m.kind in KINDS
        assert m.detail and len(m.detail) <= 120


@pytest.mark.parametrize(("message", "request_body"), [c[1:] for c in VALID], ids=[c[0] for c in VALID])
def test_valid_not_flagged(validator: Validator, message: dict[str, Any], request_body: dict[str, Any]) -> None:
    before = copy.deepcopy((message, request_body))
    assert validator.check(message, request_body) == []
    assert (message, request_body) == before  # nothing is mutated


def test_every_kind_is_covered() -> None:
    assert {kind for case in MISTAKES for kind, _ in case[3]} == set(KINDS)


# -- tool_sweep: the calls begin with the first three offered tools, in the order offered ----------------------


def test_the_eval_sweep_made_as_calls_is_one_tool_sweep() -> None:
    [found] = check(calls(*SWEEP_CALLS), req(tools=SHELL_TOOLS), finish_reason="tool_calls")
    assert (found.kind, found.tool) == ("tool_sweep", "")
    assert found.detail.startswith("8 calls of the 8 offered tools in the order offered: ls, cat, head")


def test_the_eval_sweep_written_as_text_is_one_tool_sweep_not_text_tool_calls() -> None:
    [found] = check(msg(SWEEP_TEXT), req(tools=SHELL_TOOLS))
    assert (found.kind, found.tool) == ("tool_sweep", "")
    assert found.detail.endswith("(written as text)")


def test_a_sweep_cut_short_by_max_tokens_is_a_sweep() -> None:
    """Thirty tools offered: the sweep runs until max_tokens and stops inside a call."""
    many = [tool(f"tool_{i:02}", ("path",), {"path": "string"}) for i in range(30)]
    written = ",\n".join(f'{{"name": "tool_{i:02}", "arguments": {{"path": "/data/x.csv"}}}}' for i in range(12))
    cut = written + ',\n{"name": "tool_12", "arguments": {"pa'
    assert kinds(check(msg(cut), req(tools=many), finish_reason="length")) == [("tool_sweep", "")]


def test_a_sweep_is_the_answers_one_mistake() -> None:
    """Its calls' own defects follow from it: a sweep whose 5th call breaks its schema is only a sweep."""
    broken = [*SWEEP_CALLS[:4], ("grep", '{"path": 3}'), *SWEEP_CALLS[5:]]
    assert kinds(check(calls(*broken), req(tools=SHELL_TOOLS))) == [("tool_sweep", "")]
    assert kinds(check(calls(*SWEEP_CALLS[:3]), req(tools=SHELL_TOOLS))) == [("tool_sweep", "")]  # three is enough


CLAUDE_CODE = [tool(n, (), {"path": "string"}) for n in ("Task", "Bash", "Glob", "Grep", "Read", "Edit", "Write")]
READ = '{"path": "src/main.py"}'


@pytest.mark.parametrize(
    ("tools", "made"),
    [
        (CLAUDE_CODE, [("Read", READ), ("Read", '{"path": "README.md"}'), ("Grep", READ)]),  # parallel reads
        (CLAUDE_CODE[1:], [("Bash", READ), ("Glob", READ)]),  # the first two offered: two calls are no sweep
        (SHELL_TOOLS[:2], SWEEP_CALLS[:2]),  # every offered tool, in order, but only two offered
        (SHELL_TOOLS, [SWEEP_CALLS[0]] * 3),  # the first offered tool three times
        (SHELL_TOOLS, [SWEEP_CALLS[0], SWEEP_CALLS[2], SWEEP_CALLS[1]]),  # the first three, not in order
        # A deliberate limit: a sweep that starts at the second offered tool is not flagged. The check
        # stays that strict so that no call an agent means is ever taken for one.
        (SHELL_TOOLS, SWEEP_CALLS[1:]),
    ],
    ids=["parallel-reads", "two-calls", "two-offered", "same-tool-thrice", "out-of-order", "from-the-second"],
)
def test_calls_that_are_no_sweep(tools: list[Any], made: list[tuple[str, str]]) -> None:
    assert check(calls(*made), req(tools=tools)) == []
    written = ",\n".join(f'{{"name": "{name}", "arguments": {args}}}' for name, args in made)
    assert {m.kind for m in check(msg(written), req(tools=tools))} == {"text_tool_call"}  # as text: only that


def test_no_sweep_when_no_tool_may_be_called() -> None:
    assert {m.kind for m in check(calls(*SWEEP_CALLS), req("none", tools=SHELL_TOOLS))} == {"unknown_tool"}
    assert check(msg(SWEEP_TEXT), req("none", tools=SHELL_TOOLS)) == []


def test_finish_reason_tool_calls_without_calls() -> None:
    answer = msg("Here is the weather.")
    assert check(answer, req(), finish_reason="stop") == []
    assert kinds(check(answer, req(), finish_reason="tool_calls")) == [("missing_tool_call", "")]


def test_finish_reason_length_noted() -> None:
    [m] = check(msg(None, call("get_weather", '{"city": "Pa')), req(), finish_reason="length")
    assert m.kind == "invalid_json" and "finish_reason=length" in m.detail


def test_schema_violation_detail_names_the_path() -> None:
    [m] = check(msg(None, call("search", {"query": "q", "filters": {"lang": 5}})), req())
    assert m.detail.startswith("filters/lang:")


def test_long_detail_is_truncated() -> None:
    [m] = check(msg(None, call("x" * 500, {})), req())
    assert m.kind == "unknown_tool" and len(m.detail) <= 120


def test_schema_compiled_once_per_distinct_schema(validator: Validator) -> None:
    good = msg(None, call("get_weather", {"city": "P"}))
    for _ in range(5):
        assert validator.check(good, req()) == []
    assert validator.compiled == 1 and validator.hits == 4
    # Same schema, different key order and a fresh object: still one compilation.
    params = WEATHER["function"]["parameters"]
    reordered = {
        "function": {"parameters": dict(reversed(list(params.items()))), "name": "get_weather"},
        "type": "function",
    }
    assert validator.check(good, req(tools=[reordered])) == []
    assert validator.compiled == 1
    # Another schema: compiled once more; an invalid schema is compiled (found invalid) once too.
    validator.check(msg(None, call("search", {"query": "q"})), req())
    validator.check(msg(None, call("broken", {})), req())
    validator.check(msg(None, call("broken", {})), req())
    assert validator.compiled == 3 and validator.cached_schemas == 3


def test_schema_cache_is_bounded() -> None:
    validator = Validator(max_schemas=2)
    for name, args in (
        ("get_weather", {"city": "P"}),
        ("search", {"query": "q"}),
        ("set_pair", {"pair": ["a", 1]}),
    ):
        validator.check(msg(None, call(name, args)), req())
    assert validator.cached_schemas == 2
    validator.check(msg(None, call("get_weather", {"city": "P"})), req())  # evicted first: compiled again
    assert validator.compiled == 4


def test_caches_are_per_instance() -> None:
    a, b = Validator(), Validator()
    a.check(msg(None, call("get_weather", {"city": "P"})), req())
    assert a.compiled == 1 and b.compiled == 0


def test_module_check_uses_given_validator(validator: Validator) -> None:
    for _ in range(3):
        check(msg(None, call("get_weather", {"city": "P"})), req(), validator=validator)
    assert validator.compiled == 1


def test_tool_lists_read_once_find_what_a_fresh_validator_finds() -> None:
    """One validator, warm or cold, finds what a throw-away one finds, case after case, with each
    offered tool list read once (kept by its JSON; a longer one than the bound is not kept)."""
    shared = Validator(max_tool_sets=1)  # the lists take turns: read again after each eviction
    for _ in range(2):
        for _, message, request_body, _ in MISTAKES:
            assert shared.check(message, request_body) == check(message, request_body)
            read = shared.admit(request_body.get("tools"))  # as the pipeline keeps it for its checks
            assert shared.check(message, request_body, tool_set=read) == check(message, request_body)
    assert shared.cached_tool_sets == 1
    long = [{**WEATHER, "function": {**WEATHER["function"], "description": "d" * 70_000}}]
    good, bad = msg(None, call("get_weather", {"city": "P"})), msg(None, call("get_weather", {"town": "P"}))
    fresh = Validator()
    assert fresh.check(good, req(tools=long)) == []
    assert kinds(fresh.check(bad, req(tools=long))) == [("schema_violation", "get_weather")]
    assert fresh.cached_tool_sets == 0 and fresh.compiled == 1  # the list read per call, its schema compiled once


@pytest.mark.parametrize(
    ("checks", "content", "expected"),
    [
        (Checks(detect_announced_calls=False), "Let me call get_weather for Paris.", []),
        (Checks(detect_text_tool_calls=False), '{"name": "search", "arguments": {}}', []),
        (
            Checks(announced_call_patterns=(r"\bgonna hit <tool>",)),
            "ok, gonna hit search",
            [("missing_tool_call", "search")],
        ),
        (Checks(announced_call_patterns=(r"\bstand by\b",)), "Stand by...", [("missing_tool_call", "")]),
        (Checks(announced_call_patterns=()), "Let me call get_weather for Paris.", []),
    ],
    ids=["announce-off", "text-off", "custom-pattern", "pattern-without-tool", "no-patterns"],
)
def test_checks_options(checks: Checks, content: str, expected: list[tuple[str, str]]) -> None:
    assert kinds(Validator().check(msg(content), req(), checks)) == expected


def test_bad_pattern_rejected_at_construction() -> None:
    with pytest.raises(ValueError, match="announced_call_patterns"):
        Checks(announced_call_patterns=(r"(unclosed <tool>",))


def test_brace_heavy_content_is_bounded(validator: Validator) -> None:
    content = '"search" ' + "{ x " * 5000 + '{"name": "search", "arguments": {}}'
    # Deliberate trade-off: the scan gives up after a bounded number of '{' positions, so a leak
    # buried after thousands of braces is missed rather than paying a quadratic scan.
    assert validator.check(msg(content), req()) == []


GARBAGE = [
    ("tools-not-a-list", msg(None, call("x", {})), {"tools": "nope"}),
    ("tool-entries-garbage", msg("hi"), {"tools": [{"type": ["x"]}, 5, None, {"type": "function"}]}),
    ("choice-garbage", msg("hi"), req({"type": ["x"]})),
    ("allowed-tools-not-a-dict", msg("hi"), req({"type": "allowed_tools", "allowed_tools": 3})),
    ("calls-not-a-list", {"role": "assistant", "tool_calls": {"a": 1}}, req()),
    ("call-not-a-dict", msg(None, 5), req()),  # type: ignore[arg-type]
    ("call-type-garbage", msg(None, {"type": ["x"]}), req()),
    ("function-not-a-dict", msg(None, {"type": "function", "function": "get_weather"}), req()),
    ("content-parts-garbage", msg([1, None, {"type": "text"}]), req()),
    (
        "schema-with-list-schema-key",
        msg(None, call("odd", {})),
        req(tools=[{"type": "function", "function": {"name": "odd", "parameters": {"$schema": ["x"]}}}]),
    ),
]


@pytest.mark.parametrize(("message", "request_body"), [c[1:] for c in GARBAGE], ids=[c[0] for c in GARBAGE])
def test_garbage_never_crashes(validator: Validator, message: Any, request_body: Any) -> None:
    found = validator.check(message, request_body)
    assert all(m.kind in KINDS for m in found)


# -- repeated_call: nothing but the agent's last turn's calls, word for word ------------------------------------

SEND = tool("send_message", ("to", "text"), {"to": "string", "text": "string"})
OFFERED = [WEATHER, SEND]
ASKED = {"role": "user", "content": "Tell Maria the total and the weather in Paris."}
SENT = call("send_message", {"to": "@maria", "text": "The total is 370."}, 0)
WEATHER_CALL = call("get_weather", {"city": "Paris"}, 1)


def turn(*made: dict[str, Any]) -> list[dict[str, Any]]:
    """An assistant turn's calls and the agent's results for them."""
    return [msg(None, *made), *({"role": "tool", "tool_call_id": c["id"], "content": "done"} for c in made)]


def again(tool_call: dict[str, Any], n: int = 9) -> dict[str, Any]:
    """The same call as the model writes it again: another id, other spacing and key order."""
    arguments = orjson.loads(tool_call["function"]["arguments"])
    pairs = reversed(arguments.items())
    respelled = ", ".join(f"{orjson.dumps(k).decode()}: {orjson.dumps(v).decode()}" for k, v in pairs)
    return call(tool_call["function"]["name"], "{" + respelled + "}", n)


def test_the_last_turns_calls_again_are_a_repeat_however_spelled() -> None:
    request = req(messages=[ASKED, *turn(SENT, WEATHER_CALL)], tools=OFFERED)
    [found] = check(msg(None, again(SENT)), request)
    assert (found.kind, found.tool) == ("repeated_call", "send_message")
    assert found.detail == "the agent's last call(s) again, same arguments: send_message"
    assert kinds(check(msg(None, again(WEATHER_CALL), again(SENT, 8)), request)) == [("repeated_call", "get_weather")]


@pytest.mark.parametrize(
    ("history", "answer"),
    [
        ([ASKED, *turn(SENT)], [again(SENT), WEATHER_CALL]),  # a repeat beside a new call
        ([ASKED, *turn(SENT), *turn(WEATHER_CALL)], [again(SENT)]),  # from two turns back: a read after a write
        ([ASKED, *turn(SENT), {"role": "user", "content": "Send it again."}], [again(SENT)]),  # the user asked
        ([ASKED, *turn(SENT)], [call("send_message", {"to": "@maria", "text": "The total is 371."})]),  # new arguments
        ([ASKED], [SENT]),  # no turn before
        ([ASKED, *turn(SENT)[:1]], [again(SENT)]),  # the call's result has not come back
    ],
    ids=["beside-a-new-call", "two-turns-back", "after-the-user", "other-arguments", "first-turn", "no-result"],
)
def test_calls_that_are_no_repeat(history: list[dict[str, Any]], answer: list[dict[str, Any]]) -> None:
    assert check(msg(None, *answer), req(messages=history, tools=OFFERED)) == []


def test_a_repeat_with_a_defect_is_that_defect() -> None:
    """One root cause, one mistake: a repeat that breaks its schema is a schema violation."""
    broken = call("get_weather", {"city": 3}, 0)
    request = req(messages=[ASKED, *turn(broken)], tools=OFFERED)
    assert kinds(check(msg(None, again(broken)), request)) == [("schema_violation", "get_weather")]


def test_no_repeat_when_no_tool_may_be_called() -> None:
    request = req("none", messages=[ASKED, *turn(SENT)], tools=OFFERED)
    assert kinds(check(msg(None, again(SENT)), request)) == [("unknown_tool", "send_message")]


# -- tool_spray: one tool called SPRAY (8) times or more in one answer -----------------------------------------


def test_a_spray_is_the_answers_one_mistake_and_seven_calls_are_none() -> None:
    events = [call("get_weather", {"city": f"{h}:00"}, h) for h in range(10, 28)]  # 18, as the 0.5B wrote
    [found] = check(msg(None, *events[:-1], call("get_weather", {"city": 3}, 99)), req(tools=OFFERED))
    assert (found.kind, found.tool) == ("tool_spray", "get_weather")
    assert found.detail == "18 calls of get_weather in one answer"
    assert check(msg(None, *events[:7]), req(tools=OFFERED)) == []  # seven reads at once: an agent's
    assert check(msg(None, *events[:7], SENT), req(tools=OFFERED)) == []  # eight calls of two tools

"""The eval harness: case loading, scoring (a table), and a run through a real proxy to the fake."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from router.commands.cli import app as cli
from router.commands.eval import (
    Case,
    CaseError,
    Expected,
    Result,
    Run,
    load_cases,
    percentile,
    plot,
    run_cases,
    save,
    score,
    summarize,
    value_matches,
)
from router.fake import FakeServer
from tests.conftest import Proxy, policy_text

ROOT = Path(__file__).resolve().parents[2]


def tool(name: str, **props: Any) -> dict[str, Any]:
    params = {"type": "object", "properties": {k: {"type": v} for k, v in props.items()}}
    return {"type": "function", "function": {"name": name, "parameters": params}}


TOOLS = [tool("get_weather", city="string", days="integer"), tool("web_search", query="string")]


def case(accept: Any) -> Case:
    expected = None if accept == "text" else tuple(Expected(*a) for a in accept)
    return Case("c", [{"role": "user", "content": "q"}], TOOLS, expected)


def answer(name: str | None = None, args: str = "{}", content: str | None = None) -> dict[str, Any]:
    if name is None:
        return {"role": "assistant", "content": content}
    return {
        "role": "assistant",
        "tool_calls": [{"id": "1", "type": "function", "function": {"name": name, "arguments": args}}],
    }


WEATHER_PARIS = [(("get_weather",), {"city": {"regex": "(?i)paris"}})]

SCORING = [
    # accepted answers, the model's message, expected outcome
    (WEATHER_PARIS, answer("get_weather", '{"city": "Paris, France"}'), "correct"),
    (WEATHER_PARIS, answer("get_weather", '{"city": "Lyon"}'), "wrong_args"),
    (WEATHER_PARIS, answer("get_weather", "{}"), "wrong_args"),
    (WEATHER_PARIS, answer("web_search", '{"query": "paris weather"}'), "wrong_tool"),
    (WEATHER_PARIS, answer("get_wether", '{"city": "Paris"}'), "malformed"),
    (WEATHER_PARIS, answer("get_weather", '{"city": "Par'), "malformed"),
    (WEATHER_PARIS, answer("get_weather", "[1]"), "malformed"),
    (WEATHER_PARIS, answer(content="It is sunny."), "no_call"),
    (WEATHER_PARIS, None, "error"),
    ("text", answer(content="Paris is the capital."), "correct"),
    ("text", answer(content=""), "correct"),
    ("text", answer("web_search", '{"query": "x"}'), "unneeded_call"),
    (
        [(("get_weather",), {"city": "  PARIS ", "days": 3})],
        answer("get_weather", '{"city": "paris", "days": 3.0}'),
        "correct",
    ),
    ([(("get_weather",), {"days": 3})], answer("get_weather", '{"days": "3"}'), "correct"),
    ([(("get_weather",), {"days": 3})], answer("get_weather", '{"days": 4}'), "wrong_args"),
    ([(("get_weather", "web_search"), {})], answer("web_search", '{"query": "x"}'), "correct"),
    (
        [(("get_weather",), {"city": {"one_of": ["Paris", "paris, fr"]}})],
        answer("get_weather", '{"city": "Paris, FR"}'),
        "correct",
    ),
    ([(("get_weather",), {"days": {"present": True}})], answer("get_weather", '{"city": "x"}'), "wrong_args"),
    ([(("get_weather",), {"days": {"present": False}})], answer("get_weather", '{"city": "x"}'), "correct"),
    # several accepted answers: any one will do
    (
        [(("get_weather",), {"city": "Rome"}), (("web_search",), {"query": {"regex": "rome"}})],
        answer("web_search", '{"query": "weather rome"}'),
        "correct",
    ),
]


@pytest.mark.parametrize(("accept", "message", "expected"), SCORING)
def test_score(accept: Any, message: dict[str, Any] | None, expected: str) -> None:
    assert score(case(accept), message).kind == expected


def test_false_accepts_are_the_well_formed_wrong_calls() -> None:
    outcomes = {k: score(case(a), m) for a, m, k in SCORING}
    assert {k for k, o in outcomes.items() if o.false_accept} == {"wrong_tool", "wrong_args", "unneeded_call"}


@pytest.mark.parametrize(
    ("spec", "present", "value", "ok"),
    [
        ("a", True, "A ", True),
        (1, True, 1.0, True),
        (1, False, None, False),
        ({"regex": "^x"}, True, "xy", True),
        ({"regex": "^1"}, True, 12, True),
        ({"one_of": [1, 2]}, True, "2", True),
        ({"present": True}, True, None, True),
        (True, True, "true", False),
        ([1, "b"], True, [1, "B"], True),
    ],
)
def test_value_matches(spec: Any, present: bool, value: Any, ok: bool) -> None:
    assert value_matches(spec, present, value) is ok


def test_the_shipped_case_set_loads_and_is_varied() -> None:
    cases = load_cases(ROOT / "evals" / "tool_calls.jsonl")
    assert len(cases) >= 100
    tags = {c.tags[0] for c in cases}
    assert {"weather", "files", "shell", "search", "calendar", "email", "math", "units", "many", "misc"} <= tags
    assert sum(c.accept is None for c in cases) >= 10  # questions where no call is right
    for c in cases:  # every accepted tool is offered
        assert all(t in {x["function"]["name"] for x in c.tools} for e in c.accept or () for t in e.tools), c.id


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("not json", "not JSON"),
        ('{"messages": [], "accept": "text"}', "'messages'"),
        ('{"messages": [{"role": "user", "content": "x"}], "accept": []}', "'accept'"),
        ('{"messages": [{"role": "user", "content": "x"}], "accept": [{"tool": 3}]}', "'tool'"),
        (
            '{"messages": [{"role": "user", "content": "x"}], "accept": [{"tool": "a", "args": {"x": {"re": 1}}}]}',
            "args.x",
        ),
        (
            '{"messages": [{"role": "user", "content": "x"}], "accept": [{"tool": "a", "args": {"x": {"regex": "("}}}]}',  # noqa: E501
            "bad regex",
        ),
        ('{"messages": [{"role": "user", "content": "x"}], "accept": "text", "extra": 1}', "unknown keys"),
    ],
)
def test_bad_case_files_name_the_line(tmp_path: Path, line: str, error: str) -> None:
    path = tmp_path / "cases.jsonl"
    path.write_text("# a comment\n\n" + line + "\n")
    with pytest.raises(CaseError, match=rf"cases.jsonl:3: .*{error}"):
        load_cases(path)


def test_summary_rates_and_percentiles() -> None:
    run = Run("r", "u")
    run.results = [
        Result("a", "correct", "", 1.0, "fast", False),
        Result("b", "wrong_tool", "", 2.0, "full", True),
        Result("c", "unneeded_call", "", 3.0, "fast", False),
        Result("d", "error", "", 9.0, None, None),
    ]
    summarize(run, "full")
    assert (run.accuracy, run.false_accept_rate) == (0.25, 0.5)
    assert run.escalation_rate == pytest.approx(1 / 3) and run.full_tier_share == pytest.approx(1 / 3)
    assert run.p50 == 2.0 and percentile([1.0, 2.0, 3.0, 4.0], 0.95) == pytest.approx(3.85)


def test_runs_accumulate_by_label_and_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the plot needs the `report` extra")
    for label, acc, share in (("fast", 0.2, 0.0), ("full", 0.4, 1.0), ("fast", 0.3, 0.0)):
        run = Run(label, "u", cases=10, accuracy=acc, full_tier_share=share)
        runs = save(run, tmp_path)
    assert [(r["label"], r["accuracy"]) for r in runs] == [("full", 0.4), ("fast", 0.3)]
    assert orjson.loads((tmp_path / "eval.json").read_bytes())["runs"] == runs
    png = plot(runs, tmp_path / "eval.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_reports_a_bad_case_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("{}\n")
    result = CliRunner().invoke(cli, ["eval", str(path), "--url", "http://127.0.0.1:9/v1"])
    assert result.exit_code == 1 and "bad.jsonl:1" in result.output


async def test_a_run_through_the_proxy(
    start_fake_: Callable[..., Awaitable[FakeServer]], proxy_: Callable[..., Awaitable[Proxy]], tmp_path: Path
) -> None:
    fake = await start_fake_()
    proxy = await proxy_(policy_text(fake.url, extra="escalation: {to: full}\n"))
    lines = [
        {
            "id": "right",
            "messages": [{"role": "user", "content": "weather?"}],
            "tools": TOOLS,
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "accept": [{"tool": "get_weather"}],
        },
        {
            "id": "wrong",
            "messages": [{"role": "user", "content": "weather?"}],
            "tools": TOOLS,
            "tool_choice": {"type": "function", "function": {"name": "web_search"}},
            "accept": [{"tool": "get_weather"}],
        },
        {"id": "text", "messages": [{"role": "user", "content": "hi"}], "accept": "text"},
    ]
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(orjson.dumps(x).decode() + "\n" for x in lines))
    seen: list[str] = []
    run = await run_cases(
        load_cases(path), proxy.url, label="fake", concurrency=2, on_result=lambda r: seen.append(r.id)
    )
    by_id = {r.id: r for r in run.results}
    assert by_id["right"].outcome == "correct" and by_id["right"].tier == "fast"
    assert by_id["wrong"].outcome == "wrong_tool"  # well-formed, so the format checks let it through
    assert by_id["text"].outcome == "correct" and by_id["text"].tier == "full"  # the default route
    assert sorted(seen) == ["right", "text", "wrong"]
    assert run.cases == 3 and run.accuracy == pytest.approx(2 / 3) and run.false_accept_rate == pytest.approx(1 / 3)
    assert run.escalation_rate == 0.0 and run.full_tier_share == pytest.approx(1 / 3)
    assert run.p95 >= run.p50 > 0


async def test_a_run_against_nothing_scores_errors(tmp_path: Path) -> None:
    path = tmp_path / "cases.jsonl"
    path.write_text('{"messages": [{"role": "user", "content": "x"}], "accept": "text"}\n')
    run = await run_cases(load_cases(path), "http://127.0.0.1:9/v1", label="none", call_timeout=2)
    assert run.outcomes["error"] == 1 and run.results[0].detail

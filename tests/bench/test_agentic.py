"""bench/agentic without a router: the environment's tools and reset, the task set, every task's
checks against its scripted runs (the correct one passes, the near miss and doing nothing fail: no
checker is vacuous), the text and number matching, the resume logic and the mistake counts."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench.agentic import world
from bench.agentic.checks import contains, dates, failed, numbers, times
from bench.agentic.env import GROUPS, MAX_OUTPUT, TOOLS, Environment, State, Stats, tools_of
from bench.agentic.run import append, done, mistakes
from bench.agentic.tasks import KINDS, TASKS, Run, Task


def play(task: Task, run: Run) -> tuple[Environment, list[str]]:
    """The scripted run through a fresh Environment: (it, the problems with the script itself)."""
    env = Environment(task.tools)
    problems = []
    for step in run.steps:
        result = env.call(step.tool, step.args)
        if result.failed != step.fails:
            problems.append(f"{step.tool} {step.args}: {result.kind or 'worked'}, the script says fails={step.fails}")
        problems += [
            f"{step.tool} {step.args}: no {s!r} in {result.text[:200]!r}" for s in step.shows if s not in result.text
        ]
    return env, problems


# --- the environment ------------------------------------------------------------------------------


def test_thirty_tools_in_groups_each_with_an_object_schema() -> None:
    assert len(TOOLS) == 30
    assert tools_of("all") == tuple(TOOLS)
    assert set(tools_of(*GROUPS)) == set(TOOLS)
    for tool in TOOLS.values():
        schema = tool.parameters
        assert schema["type"] == "object" and set(schema["required"]) <= set(schema["properties"]), tool.name
        assert tool.openai()["function"]["name"] == tool.anthropic()["name"] == tool.name
    with pytest.raises(KeyError):
        tools_of("nope")


def test_reset_restores_the_start_and_environments_share_nothing() -> None:
    env, other = Environment(), Environment()
    env.call("write_file", {"path": "/notes/new.txt", "content": "x"})
    env.call("send_message", {"to": "@tom", "text": "hi"})
    env.call("delete_event", {"event_id": "ev-1"})
    env.call("update_issue", {"issue_id": 3, "status": "closed"})
    env.state.contacts[0]["name"] = "changed in place"
    assert len(env.changes()) == 4 and len(env.log) == 4
    assert other.state == State.initial() and not other.changes()
    assert world.CONTACTS[0]["name"] == "Maria Gonzalez" and world.EVENTS[0]["id"] == "ev-1"
    env.reset()
    assert env.state == State.initial() and env.log == [] and env.changes() == []


def test_file_commands() -> None:
    env = Environment()
    assert env.call("ls", {}).text.splitlines() == [
        "README.md",
        "archive/",
        "data/",
        "docs/",
        "logs/",
        "notes/",
        "src/",
    ]
    assert env.call("ls", {"path": "notes"}).text == "meeting-2025-03-07.md\nshopping.txt\ntodo.txt"
    assert env.call("cat", {"path": "/notes/../notes/shopping.txt"}).text == world.SHOPPING
    assert env.call("cat", {"path": "/notes"}).kind == "error"
    missing = env.call("cat", {"path": "/notes/todos.txt"})
    assert missing.kind == "error" and missing.text.startswith("Error: cat: no such file: /notes/todos.txt")
    assert env.call("head", {"path": "/logs/app.log", "lines": 2}).text.count("\n") == 1
    assert env.call("tail", {"path": "/notes/shopping.txt", "lines": 1}).text == "bread"
    assert env.call("grep", {"pattern": "TODO", "path": "/src"}).text.count("/src/app.py:") == 2
    assert env.call("grep", {"pattern": "(", "path": "/src"}).kind == "error"
    assert env.call("grep", {"pattern": "zebra"}).text == "(no matches)"
    assert env.call("wc", {"path": "/src/util.py"}).text.startswith("12 lines")
    assert env.call("find", {"name": "*.csv"}).text == "/data/inventory.csv\n/data/sales-q1.csv"
    assert env.call("append_file", {"path": "/nope.txt", "content": "x"}).kind == "error"
    assert not env.call("move_file", {"source": "/notes/shopping.txt", "destination": "/archive"}).failed
    assert "/archive/shopping.txt" in env.state.files and "/notes/shopping.txt" not in env.state.files
    assert env.call("delete_file", {"path": "/notes/shopping.txt"}).kind == "error"


def test_shell_runs_the_commands_with_pipes_and_nothing_else() -> None:
    env = Environment()
    errors = world.log_facts()["errors"]
    assert env.call("shell", {"command": "grep -c ERROR /logs/app.log"}).text == str(errors)
    assert env.call("shell", {"command": "grep ERROR /logs/app.log | wc -l"}).text == str(errors)
    ranked = env.call("shell", {"command": "grep ERROR /logs/app.log | cut -d ' ' -f 4 | sort | uniq -c | sort -n -r"})
    top, count = world.log_facts()["top_service"]
    assert ranked.text.splitlines()[0].split() == [str(count), f"{top}:"]
    assert env.call("shell", {"command": "head -n 2 /notes/shopping.txt"}).text == "milk\neggs"
    assert env.call("shell", {"command": "cat /notes/shopping.txt | grep -v e"}).text == "milk"
    for refused in ("ls /src > /tmp/x", "cat /README.md; rm -rf /", "echo $(id)", "ls && ls", "python -c 1", "rm /x"):
        assert env.call("shell", {"command": refused}).kind == "error", refused
    assert env.state == State.initial()


def test_calculator_does_arithmetic_only() -> None:
    env = Environment()
    assert env.call("calculate", {"expression": "(120 + 140) * 25 / 2"}).text == "3250"
    assert env.call("calculate", {"expression": "round(sqrt(2), 3) + max(1, 2)"}).text == "3.414"
    assert env.call("calculate", {"expression": "10 / 4"}).text == "2.5"
    for bad in ("__import__('os')", "().__class__", "x + 1", "2 ** 10000", "1 / 0", "15% of 2,340", "'a' * 3"):
        assert env.call("calculate", {"expression": bad}).kind == "error", bad


def test_calendar_contacts_messages_issues() -> None:
    env = Environment()
    made = env.call("create_event", {"title": "Dentist", "date": "2025-03-14", "start": "11:30",
                                     "duration_minutes": 45, "attendees": ["Ana"]})  # fmt: skip
    assert (
        made.text.startswith("created ev-7: 2025-03-14 11:30-12:15 Dentist with @ana") and "overlaps ev-6" in made.text
    )
    assert env.call("create_event", {"title": "x", "date": "14/03/2025", "start": "08:00"}).kind == "error"
    assert env.call("create_event", {"title": "x", "date": "2025-03-14", "start": "8am"}).kind == "error"
    assert env.call("delete_event", {"event_id": "ev-9"}).kind == "error"
    assert "ev-3" in env.call("list_events", {"date": "2025-03-11"}).text
    ambiguous = env.call("send_message", {"to": "Lee", "text": "hi"})
    assert ambiguous.kind == "error" and "@lee.park" in ambiguous.text and "@lchen" in ambiguous.text
    for who, handle in (("Maria", "@maria"), ("lee.park", "@lee.park"), ("Tom Becker", "@tom"),
                        ("julia.novak@falcon.example", "@julia")):  # fmt: skip
        assert not env.call("send_message", {"to": who, "text": "hi"}).failed
        assert env.state.sent[-1] == {"to": handle, "text": "hi"}
    assert env.call("send_message", {"to": "priya@falcon.example", "text": "hi"}).kind == "error"
    assert "From: @maria" in env.call("read_message", {"message_id": "m1"}).text
    assert env.call("update_issue", {"issue_id": 12, "status": "closed"}).kind == "error"
    assert env.call("update_issue", {"issue_id": 4}).kind == "error"  # nothing to change
    assert not env.call("update_issue", {"issue_id": 4, "assignee": "Tom", "add_labels": ["p1"]}).failed
    issue = next(i for i in env.state.issues if i["id"] == 4)
    assert issue["assignee"] == "@tom" and issue["labels"] == ["bug", "performance", "p1"]
    assert env.call("create_issue", {"title": "New", "labels": ["ops"]}).text.startswith("created #9 [open] New")


def test_failures_say_who_was_wrong() -> None:
    env = Environment(tools_of("files"))
    assert env.call("get_weather", {"city": "Paris"}).kind == "unknown_tool"  # exists, not offered
    assert env.call("rm", {}).kind == "unknown_tool"
    assert env.call("cat", '{"path": ').kind == "invalid_json"
    assert env.call("cat", "[1]").kind == "invalid_json"
    assert env.call("cat", {}).kind == "bad_arguments"
    assert env.call("head", {"path": "/README.md", "lines": "3"}).kind == "bad_arguments"
    assert not env.call("head", {"path": "/README.md", "lines": 3.0, "extra": 1}).failed  # 3.0 is an integer
    assert all(e.output.startswith("Error: ") for e in env.log[:-1])
    big = Environment()
    big.call("write_file", {"path": "/big.txt", "content": "x" * (MAX_OUTPUT + 10)})
    assert big.call("cat", {"path": "/big.txt"}).text.endswith(f"[output cut at {MAX_OUTPUT} characters]")


def test_stats_count_errors_recovered_and_malformed_calls() -> None:
    env = Environment()
    env.call("cat", {"path": "/nope"})  # error, recovered below
    env.call("cat", {})  # bad_arguments
    env.call("ls", {"path": "/notes"})
    env.call("cat", {"path": "/nope"})  # error, never recovered
    stats = Stats.of(env.log)
    assert (stats.calls, stats.errors, stats.recovered, stats.malformed) == (4, 2, 1, {"bad_arguments": 1})


# --- the tasks ----------------------------------------------------------------------------------


def test_the_task_set() -> None:
    assert len(TASKS) >= 60
    assert len({t.id for t in TASKS}) == len({t.prompt for t in TASKS}) == len(TASKS)
    kinds = Counter(k for t in TASKS for k in t.kinds)
    assert set(kinds) == set(KINDS) and min(kinds.values()) >= 8, kinds
    levels = Counter(t.level for t in TASKS)
    assert set(levels) == {1, 2, 3} and min(levels.values()) >= 10, levels  # a spread of difficulty
    for t in TASKS:
        assert set(t.kinds) <= set(KINDS) and t.tools and t.checks, t.id
        steps = len(t.solution.steps) + 1  # the model calls of a correct run: its tool calls, then the answer
        assert steps <= 8, t.id
        assert ("no_tool" in t.kinds) == (steps == 1), t.id
        if "many_tools" in t.kinds:
            assert len(t.tools) >= 20, t.id
        if "recovery" in t.kinds:
            assert any(s.fails for s in t.solution.steps), t.id
        if "long_context" in t.kinds:
            read = "".join(str(s.args) for s in t.solution.steps)
            assert t.history or "/logs/" in read or "handbook" in read, t.id
        if "chain" in t.kinds:
            assert steps >= 2, t.id


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.id)
def test_the_correct_run_passes_every_check(task: Task) -> None:
    env, problems = play(task, task.solution)
    assert problems == []
    assert failed(task.checks, env, task.solution.answer) == []


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.id)
def test_what_a_task_makes_is_counted(task: Task) -> None:
    """A message, event or issue looked for is also counted: the same one made 12 times fails."""
    kinds = {type(c).__name__ for c in task.checks}
    for made, count in (("Sent", "SentCount"), ("Event", "EventCount"), ("Issue", "IssueCount")):
        assert made not in kinds or count in kinds or (made == "Sent" and "NotSent" in kinds), (task.id, made)


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.id)
def test_a_near_miss_and_doing_nothing_fail(task: Task) -> None:
    assert all(s.tool in task.tools for r in (task.solution, task.wrong) for s in r.steps), "a tool not offered"
    env, problems = play(task, task.wrong)
    assert problems == []
    assert failed(task.checks, env, task.wrong.answer), "the near miss passes: a check is missing"
    assert failed(task.checks, Environment(task.tools), ""), "doing nothing passes"
    assert failed(task.checks, Environment(task.tools), "I could not do it."), "giving up passes"


def test_text_and_numbers_are_matched_as_written() -> None:
    assert contains("**OK**, done", "ok") and not contains("I booked it", "ok")
    assert contains("Issue #3 it is.", "#3") and not contains("#30", "#3")
    assert contains("staging-3.falcon.internal.", "staging-3.falcon.internal")
    assert numbers("2,592.00 USD, 2016 GBP, on 2025-03-14, 26.2 mi") == [2592.0, 2016.0, 2025.0, 3.0, 14.0, 26.2]
    assert "march 12" in dates("2025-03-12") and "12/03/2025" in dates("2025-03-12")
    assert {"15:00", "3 pm", "3:00 pm", "3pm"} <= set(times("15:00"))
    assert "9:30 am" in times("09:30")


# --- resuming and counting -------------------------------------------------------------------------


def test_done_reads_the_finished_tasks_and_skips_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "routed" / "anthropic.jsonl"
    assert done(path) == set()
    append(path, {"task": "ch-port", "ok": True})
    append(path, {"task": "nt-hola", "ok": False})
    with path.open("ab") as f:
        f.write(b'{"task": "ch-vers')  # a run killed mid-write
    assert done(path) == {"ch-port", "nt-hola"}
    assert [orjson.loads(line)["task"] for line in path.read_bytes().splitlines()[:2]] == ["ch-port", "nt-hola"]


def _call(
    status: int = 200,
    mistakes: tuple[str, ...] = (),
    exhausted: bool = False,
    escalated: bool = False,
    signs: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    told = {"signs": list(signs)} if signs is not None else {}  # None: a record from before x-router-signs
    return {"status": status, "mistakes": list(mistakes), "exhausted": exhausted, "escalated": escalated, **told}


def test_mistakes_caught_and_reached_are_counted_once() -> None:
    calls = [_call(mistakes=("invalid_json",)), _call(), _call(mistakes=("unknown_tool",), exhausted=True), _call(502)]
    stats = Stats(calls=3, malformed={"unknown_tool": 1, "bad_arguments": 1})
    caught, reached = mistakes(calls, stats, '{"name": "cat", "arguments": {}}', None)
    assert caught == {"invalid_json": 1}
    assert reached == {"unknown_tool": 1, "http_502": 1, "bad_arguments": 1, "text_tool_call": 1}
    _, reached = mistakes([], Stats(), "", "ModelBehaviorError: Tool rm not found in agent assistant")
    assert reached == {"unknown_tool": 1}


def test_a_repeat_is_caught_when_escalated_and_reached_when_the_last_tier_wrote_it() -> None:
    calls = [_call(mistakes=("repeated_call",), escalated=True), _call(mistakes=("repeated_call",))]
    assert mistakes(calls, Stats(), "", None) == ({"repeated_call": 1}, {"repeated_call": 1})


def test_a_sampled_repeat_is_read_off_x_router_signs() -> None:
    """The greedy last tier's repeat, sampled: the sample answered (caught), or repeated too (one caught,
    one reached: the sample's, delivered with its sign)."""
    once, twice = ("repeated_call",), ("repeated_call", "repeated_call")
    calls = [_call(mistakes=once, escalated=True, signs=()), _call(mistakes=twice, escalated=True, signs=once)]
    assert mistakes(calls, Stats(), "", None) == ({"repeated_call": 2}, {"repeated_call": 1})


def _record(config: str, task: str, ok: bool, seconds: float, tiers: tuple[str, ...]) -> dict[str, Any]:
    calls = [{"status": 200, "tier": t, "route": "tool-call", "escalated": False, "mistakes": []} for t in tiers]
    return {"task": task, "config": config, "loop": "anthropic", "upstream": "local", "kinds": ["chain"], "level": 2,
            "ok": ok, "error": None, "seconds": seconds, "steps": len(calls), "calls": calls, "tool_errors": 0,
            "recovered": 0, "caught": {}, "reached": {}, "escalated": 0, "sticky": 0,
            "on_full": tiers.count("full"), "tokens": {"input": 10, "output": 2}}  # fmt: skip


def test_the_goal_is_judged_on_runs_of_real_tiers() -> None:
    from bench.agentic.report import build

    full = [_record("full-only", f"t{i}", i < 9, 10.0, ("full", "full")) for i in range(10)]
    routed = [_record("routed", f"t{i}", i < 9, 5.0, ("fast", "full")) for i in range(10)]
    goal = build({("full-only", "anthropic"): full, ("routed", "anthropic"): routed})["goal"]
    assert goal["measured"] and goal["met"] and goal["success_ratio"] == 1.0 and goal["p50_ratio"] == 0.5
    slow = [{**r, "seconds": 7.0} for r in routed]
    summary = build({("full-only", "anthropic"): full, ("routed", "anthropic"): slow})
    assert summary["goal"]["measured"] and not summary["goal"]["met"]  # 0.7x full only's time: over 0.6x
    assert summary["configs"]["routed"]["full_share"] == 0.5 and summary["configs"]["routed"]["p95_seconds"] == 7.0


def test_a_configuration_run_on_part_of_the_tasks_is_compared_on_that_part() -> None:
    from bench.agentic.report import build, markdown

    full = [_record("full-only", f"t{i}", i % 2 == 0, 10.0 + i, ("full",)) for i in range(10)]
    # the learned policy ran the odd tasks only, and got them all: full-only got none of those
    learned = [_record("routed-learned", f"t{i}", True, 4.0, ("fast",)) for i in range(1, 10, 2)]
    runs = {("full-only", "anthropic"): full, ("routed-learned", "anthropic"): learned}
    summary = build(runs)
    versus = summary["configs"]["routed-learned"]["vs_full_only"]
    assert versus["tasks"] == 5 and versus["base_success_rate"] == 0.0 and versus["success_ratio"] is None
    assert versus["base_p50_seconds"] == 15.0 and versus["p50_ratio"] == round(4.0 / 15.0, 3)
    assert "| routed-learned | 5 | 100.0% | 0.0% | — |" in markdown(runs, summary)
    assert "vs_full_only" not in summary["configs"]["full-only"]
    routed = [_record("routed", f"t{i}", True, 5.0, ("fast",)) for i in range(0, 10, 2)]
    goal = build({**runs, ("routed", "anthropic"): routed})["goal"]
    assert goal["tasks"] == 5 and goal["success_ratio"] == 1.0 and goal["p50_ratio"] == round(5.0 / 14.0, 3)


def test_a_task_cut_off_did_not_succeed_whatever_state_it_left(tmp_path: Path) -> None:
    from bench.agentic.report import load
    from bench.agentic.run import finished

    assert finished([], None) and not finished([], "Timeout: the task took more than 300 s")
    assert not finished(["answer has 'x'"], None)
    old = {**_record("routed", "t1", True, 300.1, ("fast",)), "error": "Timeout: the task took more than 300 s"}
    append(tmp_path / "routed" / "anthropic.jsonl", old)  # written before the rule: ok, though cut off
    assert [r["ok"] for r in load(tmp_path)[("routed", "anthropic")]] == [False]


def test_the_report_shows_the_calls_of_each_task_lost_to_full_only() -> None:
    from bench.agentic.report import build, markdown

    full = [_record("full-only", t, True, 5.0, ("full",)) for t in ("t1", "t2")]
    lost = {**_record("routed", "t1", False, 9.0, ("fast", "full")), "failed_checks": ["answer has 42"]}
    lost["calls"][0] |= {"salvaged": True}
    lost["calls"][1] |= {"route": "sticky", "status": 502, "mistakes": ["empty_response"] * 3}
    runs = {("full-only", "anthropic"): full, ("routed", "anthropic"): [lost, _record("routed", "t2", True, 4.0, ())]}
    text = markdown(runs, build(runs))
    row = "| routed | t1 | anthropic | fast/tool-call [salvaged] → full/sticky HTTP 502 [empty_response x3] | 0 |"
    assert row in text and "| routed | t2 |" not in text


def test_samples_are_counted_off_x_router_sampled_and_inferred_in_older_records() -> None:
    from bench.agentic.report import build, markdown, sampled

    told = {"status": 200, "tier": "full", "sampled": "sign"}  # a sign's sample that fell back
    assert sampled(told) and not sampled({**told, "sampled": None})
    assert sampled({"status": 200, "tier": "full-resample"})  # from before the header: answered there
    assert not sampled({"status": 200, "tier": "full-resample", "repeat": "resampled"})  # the agent's retry
    record = _record("routed", "t1", True, 4.0, ("full", "full-resample"))
    record["calls"][0] |= {"sampled": "mistake", "tier": "full-resample"}
    runs = {("routed", "anthropic"): [record]}
    summary = build(runs)
    assert summary["configs"]["routed"]["sampled_calls"] == 2
    assert "| 0 / 0 / 0 / 2 |" in markdown(runs, summary)


def test_what_a_call_costs_on_each_tier_is_read_off_the_opening_calls_of_the_same_tasks() -> None:
    from bench.agentic.report import build, markdown

    def opening(config: str, task: str, tier: str, seconds: float, status: int = 200) -> dict[str, Any]:
        record = _record(config, task, False, 60.0, (tier, tier))
        record["calls"][0] |= {"seconds": seconds, "status": status}
        record["calls"][1] |= {"seconds": 50.0}  # later calls are not the same prompt on both tiers
        return record

    full = [opening("full-only", f"t{i}", "full", 10.0) for i in range(4)]
    fast = [opening("fast-only", "t0", "fast", 4.0), opening("fast-only", "t1", "fast", 5.0),
            opening("fast-only", "t2", "fast", 6.0, status=502), opening("fast-only", "t9", "fast", 1.0)]  # fmt: skip
    routed = [opening("routed", "t3", "fast", 1.0)]  # not the model as is: not a measure of the tier
    runs = {("full-only", "anthropic"): full, ("fast-only", "anthropic"): fast, ("routed", "anthropic"): routed}
    summary = build(runs)
    cost = summary["tier_cost"]
    assert cost == {"pairs": 2, "fast_p50_seconds": 4.0, "full_p50_seconds": 10.0, "ratio_p50": 0.4,
                    "full_share_allowed": round(0.2 / 0.6, 3)}  # fmt: skip
    text = markdown(runs, summary)
    assert "fast taking x0.40 full's time" in text and "leaves at most 33% of the calls to full" in text
    assert "tier_cost" not in build({("full-only", "anthropic"): full, ("routed", "anthropic"): routed})


def test_the_halves_split_every_kind() -> None:
    from bench.agentic.tasks import HALVES, select

    train, held_out = select(half="train"), select(half="held-out")
    assert not {t.id for t in train} & {t.id for t in held_out} and len(train) + len(held_out) == len(TASKS)
    for kind in KINDS:
        assert any(kind in t.kinds for t in train) and any(kind in t.kinds for t in held_out)
    assert all(t.id in HALVES["held-out"] for t in select(half="held-out", limit=5))
    with pytest.raises(ValueError):
        select(half="nope")


def test_select_spreads_a_limit_over_the_kinds() -> None:
    from bench.agentic.tasks import select

    sample = select(limit=10)
    assert len(sample) == 10 and sample[0] is TASKS[0]
    assert {k for t in sample for k in t.kinds} == set(KINDS)
    assert [t.id for t in select(["ch-port", "nt-hola"])] == ["ch-port", "nt-hola"]
    assert all("recovery" in t.kinds for t in select(kinds=["recovery"]))
    with pytest.raises(KeyError):
        select(["nope"])
    with pytest.raises(ValueError):
        select(kinds=["nope"])


def test_the_command_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from bench.agentic.cli import app

    runner = CliRunner()
    listed = runner.invoke(app, ["tasks"])
    assert listed.exit_code == 0 and f"{len(TASKS)} tasks; chain" in listed.output
    assert runner.invoke(app, ["run", "--config", "nope"]).exit_code == 2
    both = ["run", "--config", "routed", "--base", "http://127.0.0.1:9", "--tiers", "1:2"]
    assert runner.invoke(app, both).exit_code == 2
    assert runner.invoke(app, ["run", "--config", "routed", "--loop", "langchain"]).exit_code == 2
    for loop in ("agents-chat", "anthropic"):  # every task done already: nothing is started, nothing is asked
        for t in TASKS:
            append(tmp_path / "routed" / f"{loop}.jsonl", {"task": t.id})
    done_already = runner.invoke(app, ["run", "--config", "routed", "--loop", "agents-chat", "--loop", "anthropic",
                                       "--out", str(tmp_path), "--base", "http://127.0.0.1:9"])  # fmt: skip
    assert done_already.exit_code == 0 and f"0 to run, {2 * len(TASKS)} done before" in done_already.output
    empty = runner.invoke(app, ["report", "--out", str(tmp_path / "empty")])
    assert empty.exit_code == 1 and "no results under" in empty.output


def test_the_report_prices_every_call_and_an_escalated_calls_attempt_on_fast() -> None:
    from bench.agentic.report import money

    prices = {"fast": (1e-6, 2e-6), "full": (10e-6, 20e-6)}
    records = [
        {"ok": True, "calls": [{"tier": "fast", "input_tokens": 1000, "output_tokens": 10, "escalated": False},
                               {"tier": "full", "input_tokens": 2000, "output_tokens": 20, "escalated": True}]},
        {"ok": False, "calls": [{"tier": "fast", "input_tokens": 500, "output_tokens": 5, "escalated": False}]},
    ]  # fmt: skip
    spent = money(records, prices)
    expected = (1000e-6 + 20e-6) + (2000 * 10e-6 + 20 * 20e-6 + 2000e-6) + (500e-6 + 10e-6)
    assert spent["usd"] == pytest.approx(expected, abs=1e-6)
    assert spent["usd_per_task"] == pytest.approx(expected / 2, abs=1e-6)
    assert spent["usd_per_solved_task"] == pytest.approx(expected, abs=1e-6)

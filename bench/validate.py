"""Per-call cost of `router.core.checks.validate` on typical answers: `python -m bench.validate [iterations]`.

One `Validator` is held across calls (as the pipeline does), so schemas are compiled once in the
warm-up and the measured loop sees the cached path. Then the two schema libraries side by side on
the same arguments — `jsonschema` (Python, what the router used before) and `jsonschema-rs` (Rust,
what it uses now) — each with a compiled, cached validator: a valid call (`is_valid`), a violation
(`is_valid` + the first error), and a catastrophic pattern `^(a+)+$` against "aaa…a!" (Python's
backtracking `re` against Rust's linear-time engine). Writes bench/results/validate.md.
"""

from __future__ import annotations

import platform
import statistics
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import jsonschema
import jsonschema_rs
import orjson

from router.core.checks.validate import Validator


def _tool(name: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} tool",
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


# A coding-agent-like request: 8 tools, each schema ~3-5 properties.
TOOLS = [
    _tool(
        "read_file",
        {
            "path": {"type": "string"},
            "offset": {"type": "integer", "minimum": 0},
            "limit": {"type": "integer", "minimum": 1},
            "encoding": {"type": "string", "enum": ["utf-8", "latin-1"]},
            "follow_symlinks": {"type": "boolean"},
        },
        ["path"],
    ),
    _tool(
        "write_file",
        {
            "path": {"type": "string"},
            "content": {"type": "string"},
            "mode": {"type": "string", "enum": ["overwrite", "append"]},
        },
        ["path", "content"],
    ),
    _tool(
        "run_command",
        {
            "command": {"type": "string"},
            "cwd": {"type": "string"},
            "timeout": {"type": "number"},
            "env": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        ["command"],
    ),
    _tool(
        "search",
        {
            "query": {"type": "string"},
            "glob": {"type": "string"},
            "max_results": {"type": "integer"},
            "regex": {"type": "boolean"},
        },
        ["query"],
    ),
    _tool("list_dir", {"path": {"type": "string"}, "depth": {"type": "integer"}}, ["path"]),
    _tool(
        "edit_file",
        {
            "path": {"type": "string"},
            "edits": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"old": {"type": "string"}, "new": {"type": "string"}},
                    "required": ["old", "new"],
                },
            },
        },
        ["path", "edits"],
    ),
    _tool(
        "get_weather", {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}}, ["city"]
    ),
    _tool("web_fetch", {"url": {"type": "string"}, "max_bytes": {"type": "integer"}}, ["url"]),
]
REQUEST: dict[str, Any] = {
    "model": "auto",
    "messages": [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "go"}],
    "tools": TOOLS,
    "tool_choice": "auto",
}


def _call(n: int, name: str, args: dict[str, Any] | str) -> dict[str, Any]:
    arguments = args if isinstance(args, str) else orjson.dumps(args).decode()
    return {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": arguments}}


CASES: list[tuple[str, dict[str, Any]]] = [
    (
        "valid single call",
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                _call(0, "read_file", {"path": "src/app.py", "offset": 0, "limit": 200, "encoding": "utf-8"})
            ],
        },
    ),
    (
        "valid parallel calls (2)",
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                _call(0, "read_file", {"path": "src/app.py"}),
                _call(1, "search", {"query": "def main", "glob": "**/*.py", "max_results": 20}),
            ],
        },
    ),
    (
        "text answer (prose + code)",
        {
            "role": "assistant",
            "content": (
                "The bug is in `parse()`: the loop skips the last item. Change it to:\n\n"
                "```python\ndef parse(items):\n    out = {}\n    for i, item in enumerate(items):\n"
                "        out[i] = item\n    return out\n```\n\n"
                "That fixes the off-by-one; the tests in tests/test_parse.py should pass now."
            ),
        },
    ),
    (
        "broken call (invalid JSON)",
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call(0, "write_file", '{"path": "a.py", "content": "print(1)')],
        },
    ),
    (
        "schema violation",
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call(0, "edit_file", {"path": "a.py", "edits": [{"old": "x"}]})],
        },
    ),
    (
        "text tool call (leaked JSON)",
        {
            "role": "assistant",
            "content": ('```json\n{"name": "read_file", "arguments": {"path": "src/app.py"}}\n```'),
        },
    ),
]


def measure(validator: Validator, message: dict[str, Any], iterations: int) -> tuple[float, float, int]:
    """(p50 µs, mean µs, mistakes) over `iterations` timed calls after a warm-up."""
    for _ in range(min(1000, iterations)):
        validator.check(message, REQUEST)
    samples = [0] * iterations
    clock = time.perf_counter_ns
    check = validator.check
    for i in range(iterations):
        start = clock()
        check(message, REQUEST)
        samples[i] = clock() - start
    return statistics.median(samples) / 1000, statistics.fmean(samples) / 1000, len(check(message, REQUEST))


def per_call(fn: Any, iterations: int) -> float:
    """Median µs of `fn()` over `iterations` calls after a warm-up."""
    for _ in range(min(1000, iterations)):
        fn()
    samples = [0] * iterations
    clock = time.perf_counter_ns
    for i in range(iterations):
        start = clock()
        fn()
        samples[i] = clock() - start
    return statistics.median(samples) / 1000


def first_error_py(v: Any, instance: Any) -> str:
    return "" if v.is_valid(instance) else jsonschema.exceptions.best_match(v.iter_errors(instance)).message


def first_error_rs(v: Any, instance: Any) -> str:
    return "" if v.is_valid(instance) else next(iter(v.iter_errors(instance))).message


def libraries(iterations: int) -> list[str]:
    """The same schema checks with each library: median µs per check, and the ratio."""
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    cases = [
        ("valid read_file call", "read_file", {"path": "src/app.py", "offset": 0, "limit": 200, "encoding": "utf-8"}),
        ("valid edit_file call (nested)", "edit_file", {"path": "a.py", "edits": [{"old": "x", "new": "y"}] * 4}),
        ("violation (missing nested field)", "edit_file", {"path": "a.py", "edits": [{"old": "x"}]}),
        ("violation (wrong type)", "read_file", {"path": 12}),
    ]
    rows = [
        "| check | jsonschema µs | jsonschema-rs µs | rs / py |",
        "|---|---:|---:|---:|",
    ]
    for label, name, args in cases:
        py = jsonschema.Draft202012Validator(schemas[name])
        rs = jsonschema_rs.validator_for(schemas[name])
        t_py = per_call(lambda py=py, args=args: first_error_py(py, args), iterations)
        t_rs = per_call(lambda rs=rs, args=args: first_error_rs(rs, args), iterations)
        rows.append(f"| {label} | {t_py:.2f} | {t_rs:.2f} | {t_rs / t_py:.3f} |")
    pattern = {"type": "object", "properties": {"q": {"type": "string", "pattern": "^(a+)+$"}}}
    py = jsonschema.Draft202012Validator(pattern)
    rs = jsonschema_rs.validator_for(pattern, pattern_options=jsonschema_rs.FancyRegexOptions(backtrack_limit=100_000))
    for n in (16, 20, 22, 24):
        instance = {"q": "a" * n + "!"}
        start = time.perf_counter()
        py.is_valid(instance)
        t_py = (time.perf_counter() - start) * 1e6
        t_rs = per_call(lambda instance=instance: rs.is_valid(instance), 1000)
        rows.append(f"| `^(a+)+$` vs {n} a's + `!` | {t_py:,.0f} | {t_rs:.2f} | {t_rs / t_py:.1e} |")
    rows.append(
        f"| `^(a+)+$` vs 100,000 a's + `!` | (not run: ~2^100,000 steps) | "
        f"{per_call(lambda: rs.is_valid({'q': 'a' * 100_000 + '!'}), 200):.0f} | — |"
    )
    return rows


def main(argv: list[str]) -> None:
    iterations = int(argv[0]) if argv else 20_000
    validator = Validator()
    rows = ["| answer | mistakes | p50 µs/call | mean µs/call |", "|---|---:|---:|---:|"]
    for label, message in CASES:
        p50, mean, found = measure(validator, message, iterations)
        rows.append(f"| {label} | {found} | {p50:.1f} | {mean:.1f} |")
    header = (
        f"# router.core.checks.validate — per-call cost\n\n`python -m bench.validate {iterations}`: "
        f"{iterations} timed calls "
        f"per row after warm-up, one cached `Validator`, request with {len(TOOLS)} tools. "
        f"Python {platform.python_version()}, {platform.machine()}, {platform.system()}.\n"
        f"Schemas compiled during the run: {validator.compiled}.\n"
    )
    compare = (
        "\n## Schema libraries, side by side\n\n"
        f"jsonschema {version('jsonschema')} (Python) and "
        f"jsonschema-rs {version('jsonschema-rs')} (Rust) on the same arguments, each validator compiled once; "
        "median µs per check "
        f"over {iterations} checks (the Python `^(a+)+$` rows: one check each).\n\n"
    )
    table = header + "\n" + "\n".join(rows) + "\n" + compare + "\n".join(libraries(iterations)) + "\n"
    print(table)
    out = Path(__file__).parent / "results" / "validate.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(table, encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])

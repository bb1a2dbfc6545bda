"""Per-call cost of `router.validate` on typical answers: `python -m bench.validate [iterations]`.

One `Validator` is held across calls (as the pipeline does), so schemas are compiled once in the
warm-up and the measured loop sees the cached path. Writes bench/results/validate.md.
"""

from __future__ import annotations

import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from router.validate import Validator


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


def main(argv: list[str]) -> None:
    iterations = int(argv[0]) if argv else 20_000
    validator = Validator()
    rows = ["| answer | mistakes | p50 µs/call | mean µs/call |", "|---|---:|---:|---:|"]
    for label, message in CASES:
        p50, mean, found = measure(validator, message, iterations)
        rows.append(f"| {label} | {found} | {p50:.1f} | {mean:.1f} |")
    header = (
        f"# router.validate — per-call cost\n\n`python -m bench.validate {iterations}`: "
        f"{iterations} timed calls "
        f"per row after warm-up, one cached `Validator`, request with {len(TOOLS)} tools. "
        f"Python {platform.python_version()}, {platform.machine()}, {platform.system()}.\n"
        f"Schemas compiled during the run: {validator.compiled}.\n"
    )
    table = header + "\n" + "\n".join(rows) + "\n"
    print(table)
    out = Path(__file__).parent / "results" / "validate.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(table, encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])

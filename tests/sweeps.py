"""A tool sweep, as the local fast tier (Qwen2.5-Coder-0.5B on llama-server) wrote it in an agentic
eval: one call per offered tool, in the order offered, each with schema-valid arguments — as text,
which salvage would have made eight structured calls."""

from __future__ import annotations

from typing import Any


def tool(name: str, required: tuple[str, ...], properties: dict[str, str]) -> dict[str, Any]:
    """A function tool taking `properties` (name → JSON type), `required` of them."""
    props = {k: {"type": t} for k, t in properties.items()}
    schema = {"type": "object", "properties": props, "required": list(required), "additionalProperties": False}
    return {"type": "function", "function": {"name": name, "description": name, "parameters": schema}}


SHELL_TOOLS = [  # offered in this order
    tool("ls", ("path",), {"path": "string"}),
    tool("cat", ("path",), {"path": "string"}),
    tool("head", ("path",), {"path": "string", "lines": "integer"}),
    tool("tail", ("path",), {"path": "string", "lines": "integer"}),
    tool("grep", ("pattern", "path"), {"pattern": "string", "path": "string"}),
    tool("wc", ("path",), {"path": "string"}),
    tool("find", ("name",), {"name": "string", "path": "string"}),
    tool("calculate", ("expression",), {"expression": "string"}),
]

# verbatim, the stray closing brace at its end included
SWEEP_TEXT = """{"name": "ls", "arguments": {"path": "/data/sales-q1.csv"}},
{"name": "cat", "arguments": {"path": "/data/sales-q1.csv"}},
{"name": "head", "arguments": {"path": "/data/sales-q1.csv", "lines": 10}},
{"name": "tail", "arguments": {"path": "/data/sales-q1.csv", "lines": 10}},
{"name": "grep", "arguments": {"pattern": "north", "path": "/data/sales-q1.csv"}},
{"name": "wc", "arguments": {"path": "/data/sales-q1.csv"}},
{"name": "find", "arguments": {"name": "north", "path": "/data/sales-q1.csv"}},
{"name": "calculate", "arguments": {"expression": "(120 + 140) * 25"}}}"""

SWEEP_CALLS = [  # the same calls, as a model makes them
    ("ls", '{"path": "/data/sales-q1.csv"}'),
    ("cat", '{"path": "/data/sales-q1.csv"}'),
    ("head", '{"path": "/data/sales-q1.csv", "lines": 10}'),
    ("tail", '{"path": "/data/sales-q1.csv", "lines": 10}'),
    ("grep", '{"pattern": "north", "path": "/data/sales-q1.csv"}'),
    ("wc", '{"path": "/data/sales-q1.csv"}'),
    ("find", '{"name": "north", "path": "/data/sales-q1.csv"}'),
    ("calculate", '{"expression": "(120 + 140) * 25"}'),
]


def calls(*named: tuple[str, str]) -> dict[str, Any]:
    """An assistant message making `named` (tool, arguments) calls, in that order."""
    made = [
        {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}
        for i, (name, args) in enumerate(named)
    ]
    return {"role": "assistant", "content": None, "tool_calls": made}

"""Converts function-calling cases in the Berkeley Function-Calling Leaderboard's layout (BFCL:
"simple" and "multiple" categories) into the router's case format (router/eval/cases.py).

    python evals/bfcl.py QUESTIONS.jsonl ANSWERS.jsonl > cases.jsonl

QUESTIONS: one object per line, `{"id", "question": [[{"role", "content"}, ...]], "function": [...]}`,
functions with BFCL's parameter types ("dict", "float", "tuple", "any", ...). ANSWERS: `{"id",
"ground_truth": [{"<function>": {"<arg>": [acceptable values]}}]}`, where "" among the acceptable
values means the argument may be left out. The router's cases take the first ground-truth call
(these categories have one call), an argument's acceptable values as `one_of`, and leave optional
arguments unchecked; dotted function names become `a_b`, as chat APIs require. Nothing here is
fetched: the files are read as given.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

_TYPES = {"dict": "object", "float": "number", "tuple": "array", "int": "integer", "bool": "boolean", "str": "string"}


def api_name(name: str) -> str:
    """Function names as chat APIs take them (`^[a-zA-Z0-9_-]+$`): BFCL's dots become underscores."""
    return name.replace(".", "_")


def json_schema(spec: Any) -> Any:
    """A BFCL parameter spec as JSON Schema: its own type names mapped, "any" dropped, recursively."""
    if isinstance(spec, list):
        return [json_schema(s) for s in spec]
    if not isinstance(spec, dict):
        return spec
    out = {k: json_schema(v) for k, v in spec.items() if not (k == "type" and v == "any")}
    if isinstance(out.get("type"), str):
        out["type"] = _TYPES.get(out["type"], out["type"])
    if "properties" in spec:
        out["properties"] = {name: json_schema(p) for name, p in spec["properties"].items()}
    return out


def _tool(function: dict[str, Any]) -> dict[str, Any]:
    fn = {"name": api_name(function["name"]), "description": function.get("description", "")}
    fn["parameters"] = json_schema(function.get("parameters") or {"type": "dict", "properties": {}})
    return {"type": "function", "function": fn}


def _expected(ground_truth: list[dict[str, Any]]) -> dict[str, Any]:
    ((name, args),) = ground_truth[0].items()
    checked = {arg: {"one_of": values} for arg, values in args.items() if "" not in values}
    return {"tool": api_name(name), "args": checked}


def convert(
    questions: Iterable[dict[str, Any]], answers: Iterable[dict[str, Any]], tag: str
) -> Iterator[dict[str, Any]]:
    truth = {a["id"]: a["ground_truth"] for a in answers}
    for q in questions:
        yield {
            "id": q["id"],
            "tags": ["bfcl-style", tag],
            "messages": q["question"][0],
            "tools": [_tool(f) for f in q["function"]],
            "accept": [_expected(truth[q["id"]])],
        }


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    questions = Path(argv[0])
    tag = questions.stem.rsplit("_", 1)[-1]
    for case in convert(_lines(questions), _lines(Path(argv[1])), tag):
        print(json.dumps(case, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""The eval's tool-call cases: the case file, and the outcome of one answer to a case.

Case format — JSONL, one object per line (blank lines and lines starting with `#` are skipped):

    {"id": "weather-01",                       # unique; optional (default: "line-N")
     "tags": ["weather", "call"],              # optional, free-form
     "messages": [{"role": "user", "content": "What's the weather in Paris?"}],
     "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {...}}}],
     "tool_choice": "auto",                    # optional; sent as given
     "accept": [                               # accepted answers: any one matching is right
        {"tool": "get_weather",                # a tool name, or a list of names
         "args": {"city": {"regex": "(?i)paris"}}}
     ]}

`"accept": "text"` means no call is right: the answer must be text (any text, even empty).
An argument's expected value is one of
    a plain JSON value     equal after normalising: strings stripped and case-folded, numbers
                           compared as numbers (a numeric string counts as its number)
    {"regex": "..."}       `re.search` on the value's text (str() of non-strings)
    {"one_of": [v, ...]}   equal (as above) to one of them
    {"present": true}      the argument is there, any value
Arguments not listed are not checked. Only the answer's first tool call is scored.

Outcomes of one case: `correct`; `wrong_tool`, `wrong_args`, `unneeded_call` (a well-formed call
— an offered tool, arguments a JSON object — that is wrong: these are the **false accepts**, the
wrong calls a format check lets through); `no_call` (text where a call was expected);
`malformed` (arguments not JSON, or a tool that was not offered); `error` (no answer: HTTP error
or timeout).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from router.core.checks.compare import first_call

OUTCOMES = ("correct", "wrong_tool", "wrong_args", "unneeded_call", "no_call", "malformed", "error")
FALSE_ACCEPTS = frozenset({"wrong_tool", "wrong_args", "unneeded_call"})


class CaseError(ValueError):
    """A case file that does not follow the format; the message names file:line."""


@dataclass(frozen=True)
class Expected:
    tools: tuple[str, ...]
    args: Mapping[str, Any]


@dataclass(frozen=True)
class Case:
    id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    accept: tuple[Expected, ...] | None  # None: text is right
    tool_choice: Any = None
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Outcome:
    kind: str
    detail: str = ""

    @property
    def false_accept(self) -> bool:
        return self.kind in FALSE_ACCEPTS


# -- the case file --------------------------------------------------------------------------------
def load_cases(path: Path) -> list[Case]:
    cases: list[Case] = []
    seen: set[str] = set()
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{path}:{n}"
        try:
            raw = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise CaseError(f"{where}: not JSON ({exc})") from None
        case = _case(raw, where, f"line-{n}")
        if case.id in seen:
            raise CaseError(f"{where}: duplicate id {case.id!r}")
        seen.add(case.id)
        cases.append(case)
    if not cases:
        raise CaseError(f"{path}: no cases")
    return cases


def _case(raw: Any, where: str, default_id: str) -> Case:
    if not isinstance(raw, dict):
        raise CaseError(f"{where}: a case must be a JSON object")
    unknown = set(raw) - {"id", "tags", "messages", "tools", "tool_choice", "accept"}
    if unknown:
        raise CaseError(f"{where}: unknown keys {sorted(unknown)}")
    messages, tools, accept = raw.get("messages"), raw.get("tools", []), raw.get("accept")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise CaseError(f"{where}: 'messages' must be a non-empty list of objects")
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise CaseError(f"{where}: 'tools' must be a list of tool objects")
    if accept == "text":
        expected = None
    elif isinstance(accept, list) and accept:
        expected = tuple(_expected(a, where) for a in accept)
    else:
        raise CaseError(f"{where}: 'accept' must be \"text\" or a non-empty list of accepted calls")
    return Case(
        id=str(raw.get("id") or default_id),
        messages=messages,
        tools=tools,
        accept=expected,
        tool_choice=raw.get("tool_choice"),
        tags=tuple(str(t) for t in raw.get("tags") or ()),
    )


def _expected(a: Any, where: str) -> Expected:
    if not isinstance(a, dict) or set(a) - {"tool", "args"}:
        raise CaseError(f'{where}: an accepted call is {{"tool": name or [names], "args": {{...}}}}')
    tool = a.get("tool")
    names = (tool,) if isinstance(tool, str) else tuple(tool) if isinstance(tool, list) else ()
    if not names or not all(isinstance(t, str) and t for t in names):
        raise CaseError(f"{where}: 'tool' must be a name or a list of names")
    args = a.get("args") or {}
    if not isinstance(args, dict):
        raise CaseError(f"{where}: 'args' must be an object")
    for name, spec in args.items():
        if isinstance(spec, dict):
            if len(spec) != 1 or next(iter(spec)) not in ("regex", "one_of", "present"):
                raise CaseError(f"{where}: args.{name}: use a value, {{regex}}, {{one_of}} or {{present}}")
            if "regex" in spec:
                try:
                    re.compile(spec["regex"])
                except (re.error, TypeError) as exc:
                    raise CaseError(f"{where}: args.{name}: bad regex ({exc})") from None
            if "one_of" in spec and not isinstance(spec["one_of"], list):
                raise CaseError(f"{where}: args.{name}: one_of must be a list")
    return Expected(names, args)


# -- scoring -------------------------------------------------------------------------------------
def _norm(v: Any) -> Any:
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str):
        s = v.strip().casefold()
        try:
            f = float(s)
        except ValueError:
            return s
        return f if math.isfinite(f) else s
    if isinstance(v, list):
        return [_norm(x) for x in v]
    if isinstance(v, dict):
        return {k: _norm(x) for k, x in v.items()}
    return v


def value_matches(spec: Any, present: bool, value: Any) -> bool:
    """Does an argument's value (`present` False: the argument is missing) meet its expectation?"""
    if isinstance(spec, dict) and len(spec) == 1:
        ((op, arg),) = spec.items()
        if op == "present":
            return present == bool(arg)
        if not present:
            return False
        if op == "regex":
            text = value if isinstance(value, str) else orjson.dumps(value).decode()
            return re.search(arg, text) is not None
        if op == "one_of":
            return any(_norm(value) == _norm(x) for x in arg)
    return present and _norm(value) == _norm(spec)


def offered_names(tools: Sequence[Mapping[str, Any]]) -> set[str]:
    return {str((t.get("function") or {}).get("name") or t.get("name") or "") for t in tools}


def score(case: Case, message: Mapping[str, Any] | None) -> Outcome:
    """The outcome of one answer (`message`: the answer's choices[0].message; None: no answer)."""
    if message is None:
        return Outcome("error", "no answer")
    first = first_call(message)
    if first is None:
        if case.accept is None:
            return Outcome("correct")
        return Outcome("no_call", str(message.get("content") or "")[:80])
    name, raw_args = first
    if name not in offered_names(case.tools):
        return Outcome("malformed", f"tool {name!r} was not offered")
    try:
        args = orjson.loads(raw_args) if raw_args.strip() else {}
    except orjson.JSONDecodeError:
        return Outcome("malformed", "arguments are not JSON")
    if not isinstance(args, dict):
        return Outcome("malformed", "arguments are not a JSON object")
    if case.accept is None:
        return Outcome("unneeded_call", f"called {name}")
    same_tool = [e for e in case.accept if name in e.tools]
    if not same_tool:
        wanted = "|".join(t for e in case.accept for t in e.tools)
        return Outcome("wrong_tool", f"called {name}, wanted {wanted}")
    problems: list[str] = []
    for e in same_tool:
        bad = [k for k, spec in e.args.items() if not value_matches(spec, k in args, args.get(k))]
        if not bad:
            return Outcome("correct")
        problems.append(", ".join(f"{k}={args.get(k, '<missing>')!r}" for k in bad))
    return Outcome("wrong_args", problems[0][:120])

"""Tool calls an answer writes as text instead of making them, and calls it only announces.

`build_rules()` compiles the regexes for one set of offered tool names into `TextRules` (the
`Validator` of router/core/checks/validate.py caches them); which findings are mistakes, and of which kind, is
the validator's judgement.

    TextRules.mentioned()       the cheap gate: an offered name appears in the text at all
    TextRules.written_calls()   calls leaked into the content: JSON in any common call shape
                                (`name`/`function`/`tool` next to `arguments`/`args`/`input`, in
                                `tool_calls` or `function` wrappers, lists), else `name(...)` as the
                                whole answer or opening a ```tool_code fence (Gemma)
    written_call_objects()      the same JSON calls with their arguments and where they sit (what
                                router/flow/salvage.py turns into structured calls)
    TextRules.announced()       a forward-looking announcement ("I'll call <tool>", "Calling <tool>")
                                matched by `announced_call_patterns`; `<tool>` is any offered name
    opens_like_call(text)       the answer opens like a call written as JSON (`{"name": …, "arguments": …`
                                bare, after a fence or a `<tool_call>` tag; or all of it is `{"name": …,`),
                                whether or not it decodes: a call cut short or naming a tool nobody
                                offered is still a call attempt
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Final

TOOL_PLACEHOLDER: Final = "<tool>"
# Forward-looking announcements only ("After calling X, I found ..." must not match).
DEFAULT_ANNOUNCE: Final = (
    r"\b(?:I['\u2019]ll|I will|I['\u2019]m going to|I am going to|I need to|I should|let me|let['\u2019]s)"
    r"\s+(?:now\s+|first\s+|just\s+)?(?:call|use|invoke|run|execute|query|try)\b[^.!?\n]{0,40}?<tool>",
    r"(?:^|[.!?:]\s+)(?:now\s+|next\s+)?(?:calling|invoking)\s+(?:the\s+)?[`'\"]?<tool>",
)
_ARG_KEYS: Final = ("arguments", "parameters", "args", "input")
_NAME_KEYS: Final = ("name", "function", "tool", "tool_name")
_JSON_SCAN_LIMIT: Final = 64  # '{' positions tried per answer, bounds the cost on brace-heavy code
_DECODER: Final = json.JSONDecoder()
_CALL_OPENING: Final = re.compile(
    r"\A\s*(?:```[ \t]*[\w-]*\s*)?(?:<tool_call>\s*)?\[?\s*\{"
    r'\s*"(?:name|function|tool|tool_name)"\s*:\s*"[^"\n]{0,200}"'
    r'\s*(?:,\s*"(?:arguments|parameters|args|input)"\s*:|,?\s*\Z)'  # arguments follow, or nothing does
    r"|^[ \t]*<tool_call>",
    re.M,
)


def opens_like_call(text: str) -> bool:
    """Does the answer open like a tool call written as JSON (or hold a line-opening `<tool_call>` tag)?
    Decodable or not: what `written_calls` finds nothing in is then a broken call, not prose."""
    return _CALL_OPENING.search(text) is not None


@dataclass(frozen=True, slots=True)
class TextRules:
    """Regexes for one set of offered tool names, compiled once."""

    canonical: dict[str, str]  # lower-cased name -> name as offered
    quoted: re.Pattern[str]  # "name" anywhere: cheap gate before JSON scanning
    pythonic: re.Pattern[str]  # name(...) as the whole answer, or in a ```tool_code fence
    announce: tuple[tuple[re.Pattern[str], bool], ...]  # (pattern, mentions <tool>)

    def mentioned(self, text: str) -> bool:
        """Does an offered name appear in `text`? Every rule that names a tool needs one."""
        lowered = text.lower()
        return any(name in lowered for name in self.canonical)

    def written_calls(self, text: str, names: Collection[str]) -> list[str]:
        """The offered tools (`names`) that `text` calls as JSON, one per call in the order written,
        else as `name(...)`; [] if none."""
        leaked: list[str] = []
        if self.quoted.search(text):
            leaked = _json_text_calls(text, names)
        if not leaked and "(" in text and (m := self.pythonic.search(text)):
            leaked = [self.canonical.get(m.group("tool").lower(), m.group("tool"))]
        return leaked

    def announced(self, text: str, mentioned: bool) -> tuple[str, str] | None:
        """(the tool named or "", the words matched) for the first announcement found, else None."""
        for pattern, needs_name in self.announce:
            if (mentioned or not needs_name) and (m := pattern.search(text)):
                tool = m.groupdict().get("tool") or ""
                return self.canonical.get(tool.lower(), tool), m.group(0)
        return None


def _leaked_names(obj: Any, names: Collection[str], out: list[str], depth: int = 0) -> None:
    """Collect the offered tools that a decoded JSON value calls, in any common call shape."""
    if depth > 3:
        return
    if isinstance(obj, list):
        for item in obj[:16]:
            _leaked_names(item, names, out, depth + 1)
        return
    if not isinstance(obj, dict):
        return
    calls = obj.get("tool_calls")
    if isinstance(calls, list):
        _leaked_names(calls, names, out, depth + 1)
    fn = obj.get("function")
    if isinstance(fn, dict):
        _leaked_names(fn, names, out, depth + 1)
    if any(key in obj for key in _ARG_KEYS):
        for key in _NAME_KEYS:
            value = obj.get(key)
            if isinstance(value, str) and value in names:
                out.append(value)
                return


def _json_text_calls(text: str, names: Collection[str]) -> list[str]:
    out: list[str] = []
    start = text.find("{")
    tries = 0
    while start != -1 and tries < _JSON_SCAN_LIMIT:
        tries += 1
        try:
            value, end = _DECODER.raw_decode(text, start)
        except ValueError:
            start = text.find("{", start + 1)
            continue
        _leaked_names(value, names, out)
        start = text.find("{", end)
    return out


@dataclass(frozen=True, slots=True)
class WrittenCall:
    """One call written as JSON text: the offered tool it names, its arguments as written (any JSON
    value; a string may hold JSON), and where the JSON value that holds it sits in the text."""

    name: str
    arguments: Any
    start: int
    end: int


def _call_objects(obj: Any, names: Collection[str], out: list[tuple[str, Any]], depth: int = 0) -> None:
    """Like `_leaked_names`, but keep each call's arguments (a call needs an arguments key)."""
    if depth > 3:
        return
    if isinstance(obj, list):
        for item in obj[:16]:
            _call_objects(item, names, out, depth + 1)
        return
    if not isinstance(obj, dict):
        return
    if isinstance(calls := obj.get("tool_calls"), list):
        _call_objects(calls, names, out, depth + 1)
        return
    if isinstance(fn := obj.get("function"), dict):
        _call_objects(fn, names, out, depth + 1)
        return
    args = next((k for k in _ARG_KEYS if k in obj), None)
    name = next((v for k in _NAME_KEYS if isinstance(v := obj.get(k), str) and v in names), None)
    if name is not None and args is not None:
        out.append((name, obj[args]))


def written_call_objects(text: str, names: Collection[str]) -> list[WrittenCall]:
    """Every call of an offered tool (`names`) written in `text` as JSON — bare, in a fence, inside
    `<tool_call>` tags — with its arguments and span; [] if none."""
    out: list[WrittenCall] = []
    start = text.find("{")
    tries = 0
    while start != -1 and tries < _JSON_SCAN_LIMIT:
        tries += 1
        decoded = None
        for at in (start - 1, start) if start > 0 and text[start - 1] == "[" else (start,):  # a list whole
            with contextlib.suppress(ValueError):
                decoded = (*_DECODER.raw_decode(text, at), at)
                break
        if decoded is None:
            start = text.find("{", start + 1)
            continue
        value, end, start = decoded
        found: list[tuple[str, Any]] = []
        _call_objects(value, names, found)
        out += [WrittenCall(name, args, start, end) for name, args in found]
        start = text.find("{", end)
    return out


def build_rules(names: frozenset[str], patterns: tuple[str, ...]) -> TextRules:
    """The rules for the offered tool `names`; in the announce `patterns`, `<tool>` is any of them."""
    alternation = "|".join(re.escape(n) for n in sorted(names, key=lambda n: (-len(n), n)))
    tool = rf"(?<![\w.-])(?P<tool>{alternation})(?![\w-])"
    return TextRules(
        canonical={n.lower(): n for n in names},
        quoted=re.compile(rf'"(?:{alternation})"'),
        pythonic=re.compile(_pythonic_pattern(tool), re.S),
        announce=tuple(
            (re.compile(p.replace(TOOL_PLACEHOLDER, tool), re.I | re.M), TOOL_PLACEHOLDER in p) for p in patterns
        ),
    )


def _pythonic_pattern(tool: str) -> str:
    # `name(...)` as the whole answer (optionally in [...]), or opening a ```tool_code fence (Gemma).
    # Python forbids a group name twice, so both alternatives share the one `tool` group.
    return (
        r"(?:\A\s*\[?\s*(?=.*\)\s*\]?\s*\Z)"
        r"|```[ \t]*(?:tool_code|tool_call|function_call)[ \t]*\n\s*(?:print\(\s*)?)"
        rf"{tool}\s*\("
    )

"""Answer comparison, shared by the verifiers (router/core/checks/verify.py), shadow mode (router/core/live/shadow.py),
`agent-router qa` and the eval harness:

    first_call / call_key / normalised   a message's first tool call, and a key two calls share when
                                         they call the same tool with the same normalised arguments
    last_user_text / tool_lines          what a judge is shown of the request
    parameter_lines                      and of the called tool's parameters
    json_object / ask_json               a JSON answer from a tier (`response_format: json_object`)
    compare(judge, request, a, b, ...)   is answer `a` as good as reference `b`? (`Comparison`)

`compare`: answers that are the same — the same tool calls with the same normalised arguments, or
the same text — pass without asking. Otherwise the judge tier sees the offered tools, the system
prompt, the last messages and both answers, and must answer JSON `{"score": 0-100, "pass": bool,
"reason": str, "difference": str}` (temperature 0). A missing `pass` is read from the score
(≥ PASS_SCORE); an answer without either, or a failing judge, is `unsure`: neither a pass nor a
fail, counted apart.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson

from router.constants import JUDGE_CONTEXT_MESSAGES, JUDGE_TEXT_MAX, PASS_SCORE
from router.errors import UpstreamError
from router.upstream.base import Reply, Upstream


def first_call(message: Mapping[str, Any]) -> tuple[str, str] | None:
    calls = message.get("tool_calls") or ()
    if not calls or not isinstance(calls[0], dict):
        return None
    fn = calls[0].get("function") or {}
    args = fn.get("arguments")
    return str(fn.get("name") or ""), args if isinstance(args, str) else ""


def normalised(value: Any) -> Any:
    """Arguments compared by `agree`: keys sorted, strings stripped and case-folded, numbers as floats."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        return " ".join(value.split()).casefold()
    if isinstance(value, list):
        return [normalised(v) for v in value]
    if isinstance(value, dict):
        return {k: normalised(value[k]) for k in sorted(value)}
    return value


def call_key(message: Mapping[str, Any]) -> tuple[str, Any] | None:
    """(tool, normalised arguments) of the first call; None when there is no call."""
    first = first_call(message)
    if first is None:
        return None
    name, raw = first
    try:
        args = orjson.loads(raw) if raw.strip() else {}
    except orjson.JSONDecodeError:
        args = raw
    return name, orjson.dumps(normalised(args), option=orjson.OPT_SORT_KEYS)


def last_user_text(body: Mapping[str, Any]) -> str:
    for m in reversed(body.get("messages") or ()):
        if isinstance(m, dict) and m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, list):
                content = " ".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
            return str(content or "")[:JUDGE_TEXT_MAX]
    return ""


def tool_functions(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The offered tools' function definitions (chat-style `{"function": {...}}`, or flat)."""
    fns = []
    for t in body.get("tools") or ():
        if isinstance(t, dict):
            inner = t.get("function")
            fns.append(inner if isinstance(inner, dict) else t)
    return fns


def tool_line(fn: Mapping[str, Any]) -> str:
    """`- name: description` (the description's whitespace folded, cut at 160 characters)."""
    desc = " ".join(str(fn.get("description") or "").split())[:160]
    return f"- {fn.get('name')}: {desc}" if desc else f"- {fn.get('name')}"


def tool_lines(body: Mapping[str, Any]) -> list[str]:
    return [tool_line(fn) for fn in tool_functions(body)]


def function_parameter_lines(fn: Mapping[str, Any]) -> list[str]:
    """A tool's parameters, one line each: `- key (type, required): description`. At most 24, each
    description cut at 120 characters; [] when its schema has no properties."""
    schema = fn.get("parameters") or fn.get("input_schema")
    if not isinstance(schema, dict) or not isinstance(props := schema.get("properties"), dict):
        return []
    required = set(req) if isinstance(req := schema.get("required"), list) and len(req) <= 1024 else set()
    lines = []
    for key, spec in itertools.islice(props.items(), 24):
        spec = spec if isinstance(spec, dict) else {}
        kind = str(spec["type"]) if isinstance(spec.get("type"), str) else "any"
        if isinstance(spec.get("enum"), list):
            kind += " one of " + ", ".join(str(v)[:40] for v in spec["enum"][:8])
        desc = " ".join(str(spec.get("description") or "").split())[:120]
        tags = f"{kind}, required" if isinstance(key, str) and key in required else kind
        lines.append(f"- {key} ({tags}): {desc}" if desc else f"- {key} ({tags})")
    return lines


def parameter_lines(body: Mapping[str, Any], name: str) -> list[str]:
    """The parameters of offered tool `name` (`function_parameter_lines`); [] when it is not offered."""
    fn = next((fn for fn in tool_functions(body) if fn.get("name") == name), None)
    return function_parameter_lines(fn) if fn is not None else []


def json_object(content: str) -> dict[str, Any] | None:
    """The JSON object in a model's answer (from its first `{` to its last `}`), or None."""
    text = content.strip()
    start, end = text.find("{"), text.rfind("}")
    try:
        data = orjson.loads(text[start : end + 1]) if 0 <= start < end else None
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


async def ask_json(upstream: Upstream, messages: list[dict[str, str]], max_tokens: int, deadline: float) -> str:
    """The text a tier answers to `messages`, asked for as JSON (`response_format: json_object`,
    temperature 0). Raises UpstreamError."""
    request = {
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "response_format": {"type": "json_object"},
    }
    reply = await upstream.complete(request, deadline)
    choices = reply.data.get("choices") or [{}]
    return str(((choices[0] or {}).get("message") or {}).get("content") or "")


# -- comparing two answers ------------------------------------------------------------------------
COMPARE_SYSTEM = (
    "You compare two answers to the same request. Answer A comes from a fast model, answer B from a "
    "stronger reference model. Decide whether A is as good as B: correct (the right tool with the "
    "right argument values, or a right reply), following the instructions, and safe. Wording may "
    'differ. Answer with JSON only: {"score": <0-100>, "pass": true or false, "reason": "<at most '
    '20 words>", "difference": "<the main difference between A and B, at most 20 words, or empty>"}.'
)


@dataclass(frozen=True, slots=True)
class Comparison:
    passed: bool
    score: int | None
    reason: str
    difference: str = ""
    judge: str = ""  # the judging tier, or "identical" when no judge was needed
    unsure: bool = False

    @property
    def outcome(self) -> str:
        return "unsure" if self.unsure else "agree" if self.passed else "disagree"

    def to_json(self) -> dict[str, Any]:
        return {
            "score": self.score,
            "pass": self.passed,
            "reason": self.reason,
            "difference": self.difference,
            "judge": self.judge,
            "unsure": self.unsure,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Comparison:
        score = data.get("score")
        return cls(
            passed=data.get("pass") is True,
            score=score if isinstance(score, int) else None,
            reason=str(data.get("reason") or ""),
            difference=str(data.get("difference") or ""),
            judge=str(data.get("judge") or ""),
            unsure=data.get("unsure") is True,
        )


# -- the comparison -------------------------------------------------------------------------------
def message_of(reply: Reply) -> dict[str, Any]:
    """choices[0].message of a whole answer ({} when there is none)."""
    choices = reply.data.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message = choice.get("message")
    return message if isinstance(message, dict) else {}


def _text(content: Any) -> str:
    if isinstance(content, list):
        content = " ".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return str(content or "")


def render(message: Mapping[str, Any]) -> str:
    """An answer as the judge reads it: its text, then each tool call as name(arguments)."""
    parts = [_text(message.get("content")).strip()]
    for c in message.get("tool_calls") or ():
        fn = (c.get("function") if isinstance(c, dict) else None) or {}
        parts.append(f"call {fn.get('name')}({str(fn.get('arguments') or '')[:JUDGE_TEXT_MAX]})")
    return "\n".join(p for p in parts if p)[:JUDGE_TEXT_MAX] or "(empty answer)"


def _conversation(request: Mapping[str, Any]) -> list[str]:
    messages = [m for m in request.get("messages") or () if isinstance(m, dict)]
    system = next((m for m in messages if m.get("role") in ("system", "developer")), None)
    lines = [f"System prompt: {_text(system.get('content'))[:JUDGE_TEXT_MAX]}", ""] if system else []
    for m in messages[-JUDGE_CONTEXT_MESSAGES:]:
        if m is not system:
            lines.append(f"[{m.get('role')}] {render(m)[:600]}")
    return lines


def compare_messages(
    request: Mapping[str, Any], answer: Mapping[str, Any], reference: Mapping[str, Any]
) -> list[dict[str, str]]:
    tools = tool_lines(request)
    prompt = "\n".join(
        [
            *(["Tools offered:", *tools, ""] if tools else []),
            *_conversation(request),
            "",
            f"Last user request: {last_user_text(request)}",
            "",
            f"Answer A (fast model):\n{render(answer)}",
            "",
            f"Answer B (reference model):\n{render(reference)}",
            "",
            "Is A as good as B? JSON only.",
        ]
    )
    return [{"role": "system", "content": COMPARE_SYSTEM}, {"role": "user", "content": prompt}]


def same_answer(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """The same tool calls with the same normalised arguments, or the same (non-empty) text."""
    calls_a, calls_b = a.get("tool_calls") or [], b.get("tool_calls") or []
    if calls_a or calls_b:
        keys = [[call_key({"tool_calls": [c]}) for c in calls] for calls in (calls_a, calls_b)]
        return keys[0] == keys[1]
    text_a = normalised(_text(a.get("content")))
    return bool(text_a) and text_a == normalised(_text(b.get("content")))


def _score(value: Any) -> int | None:
    if isinstance(value, str):
        try:
            value = float(value.strip().rstrip("%"))
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:  # NaN
        return None
    return int(max(0, min(100, round(value))))


def _flag(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "pass", "false", "no", "fail"):
        return value.strip().lower() in ("true", "yes", "pass")
    return None


def read_comparison(content: str) -> Comparison:
    """The judge's JSON answer → Comparison (unsure when it says neither pass nor a score)."""
    data = json_object(content)
    if data is None:
        return Comparison(False, None, f"judge answer unreadable: {content.strip()[:60]!r}", unsure=True)
    score, passed = _score(data.get("score")), _flag(data.get("pass"))
    if passed is None and score is None:
        return Comparison(False, None, f"judge answer has no verdict: {content.strip()[:60]!r}", unsure=True)
    if passed is None:
        passed = score is not None and score >= PASS_SCORE
    return Comparison(passed, score, str(data.get("reason") or "")[:300], str(data.get("difference") or "")[:300])


async def compare(
    judge: Upstream,
    request: Mapping[str, Any],
    answer: Mapping[str, Any],
    reference: Mapping[str, Any],
    deadline: float,
    max_tokens: int,
) -> Comparison:
    """Is `answer` as good as `reference` (two answers to `request`)? Never raises."""
    if same_answer(answer, reference):
        return Comparison(True, 100, "the same answer", judge="identical")
    try:
        content = await ask_json(judge, compare_messages(request, answer, reference), max_tokens, deadline)
    except UpstreamError as exc:
        return Comparison(False, None, f"judge failed: {exc.mistake}", judge=judge.tier, unsure=True)
    return replace(read_comparison(content), judge=judge.tier)

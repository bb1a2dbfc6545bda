"""Tool-call checks on an OpenAI chat-completions answer, against the request that produced it.

The app holds ONE `Validator` (router/runtime.py) and calls `validator.check(message, request,
checks, finish_reason=...)` on every tier's answer. It owns three small LRU caches: compiled JSON
Schemas (by the schema's canonical JSON), text rules (by the offered names and announce patterns),
and offered tool lists as read (by the list's JSON as it came: an agent sends the same list every
call). The module-level `check()` builds a throw-away one (tests, one-off use). Calls written as text
or only announced are found by router/core/checks/text_calls.py; what counts as a mistake is decided here.

Judgement calls (see also the tests):
- `arguments` must be a JSON *string* holding an object. An empty/whitespace or absent string counts
  as `{}` only when the schema has no top-level `required`; otherwise it is `invalid_json`. The text
  `null`, an array, or a dict instead of a string (non-conforming upstream) is `invalid_json`:
  agents `json.loads()` the string and expect an object.
- A schema that cannot be compiled (not a schema, fails its meta-schema, unknown `$ref`, recursion)
  means "cannot check": the call is not flagged. Remote `$ref`s are never fetched.
- Schemas are checked with jsonschema-rs (several times faster than `jsonschema`, bench/validate.py):
  a `pattern` runs on Rust's linear-time regex engine, or (lookaround, backreferences) a backtracking
  one with a step budget: no client regex can stall the proxy. `admit(tools)` compiles the offered
  tools' schemas as the request arrives: one over `max_schema_bytes`, or with a pattern `re` reads but
  the engine refuses within `max_pattern_bytes` (a huge repetition), is `SchemaTooCostly` (400) then.
  Such a pattern is remembered (`max_costly_patterns`, LRU: giving up takes the engine milliseconds):
  a schema that differs only elsewhere is refused on sight.
- `tool_choice: "none"` offers no tool: any call is `unknown_tool`; text is never inspected.
- Text that opens like a call written as JSON (`opens_like_call`) but holds none that decodes and
  names an offered tool (cut short, an unknown name) is `text_tool_call` too: a call attempt.
- One root cause, one mistake: an empty answer is only `empty_response`; a call leaked into text only
  `text_tool_call` (it satisfies `tool_choice` naming it); an announced call only when nothing else is.
- What an answer's calls show together — a sweep, a spray, the agent's last calls again — is
  router/core/checks/together.py's: each is the answer's one mistake.
- `finish_reason="tool_calls"` with text and no calls is `missing_tool_call`; `"length"` is noted in
  the detail of `invalid_json` / `empty_response`. A `refusal` with no content is not an empty one.
- Tool definitions may be chat-style `{"type":"function","function":{...}}`, Responses-style
  (flat `name`/`parameters`) or Anthropic-style (`input_schema`); `custom` tools take free text.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import jsonschema_rs
import orjson

from router.constants import MAX_RULES, MAX_SCHEMAS, MAX_TOOL_SETS, TOOL_SET_BYTES
from router.core.checks.offered import (
    FREEFORM,
    NO_TOOLS,
    ToolSet,
    content_text,
    json_answer,
    tool_choice,
    tool_index,
)
from router.core.checks.schemas import BACKTRACK_LIMIT, TOO_COSTLY, CostlyPattern, compile_schema, patterns_of
from router.core.checks.text_calls import DEFAULT_ANNOUNCE, TOOL_PLACEHOLDER, TextRules, build_rules, opens_like_call
from router.core.checks.together import SPRAY, SWEEP, repeated, short, spray, sweep
from router.errors import BadRequest
from router.mistakes import (
    ANSWER_KINDS,
    EMPTY_RESPONSE,
    INVALID_JSON,
    MISSING_TOOL_CALL,
    SCHEMA_VIOLATION,
    TEXT_TOOL_CALL,
    UNKNOWN_TOOL,
    Mistake,
)
from router.settings import default

KINDS: Final = ANSWER_KINDS  # what the checks find (router/mistakes.py owns every kind)

_MISS: Final = object()


class SchemaTooCostly(BadRequest):
    code = "schema_too_costly"


@dataclass(frozen=True, slots=True)
class Checks:
    """Options (from the policy). `<tool>` in a pattern stands for any offered tool name."""

    announced_call_patterns: tuple[str, ...] = DEFAULT_ANNOUNCE
    detect_text_tool_calls: bool = True
    detect_announced_calls: bool = True

    def __post_init__(self) -> None:
        for pattern in self.announced_call_patterns:  # a bad policy fails at load, not per call
            try:
                re.compile(pattern.replace(TOOL_PLACEHOLDER, "(?P<tool>x)"))
            except re.error as exc:
                raise ValueError(f"announced_call_patterns: bad regex {pattern!r}: {exc}") from exc


DEFAULT_CHECKS: Final = Checks()


class Validator:
    """Checks answers; owns the compiled-schema and text-rule caches. Hold one per app."""

    __slots__ = (
        "_costly", "_max_costly", "_max_rules", "_max_schemas", "_max_tool_sets", "_patterns", "_rules",
        "_schema_bytes", "_schemas", "_tool_sets", "compiled", "costly_hits", "hits",
    )  # fmt: skip

    def __init__(
        self,
        *,
        max_schemas: int = MAX_SCHEMAS,
        max_rules: int = MAX_RULES,
        max_schema_bytes: int = default("max_schema_bytes"),
        max_pattern_bytes: int = default("max_pattern_bytes"),
        max_costly_patterns: int = default("max_costly_patterns"),
        max_tool_sets: int = MAX_TOOL_SETS,
    ) -> None:
        self._max_schemas = max_schemas
        self._max_tool_sets = max_tool_sets
        self._max_costly = max_costly_patterns
        self._max_rules = max_rules
        self._schema_bytes = max_schema_bytes
        self._patterns = jsonschema_rs.FancyRegexOptions(
            backtrack_limit=BACKTRACK_LIMIT, size_limit=max_pattern_bytes, dfa_size_limit=max_pattern_bytes
        )
        self._schemas: OrderedDict[bytes, Any] = OrderedDict()
        self._rules: OrderedDict[tuple[frozenset[str], tuple[str, ...]], TextRules] = OrderedDict()
        self._costly: OrderedDict[str, None] = OrderedDict()  # patterns found too costly (LRU)
        self._tool_sets: OrderedDict[bytes, ToolSet] = OrderedDict()
        self.compiled = 0  # schema compilations (cache misses), including schemas found invalid
        self.hits = 0  # schema cache hits
        self.costly_hits = 0  # schema cache misses refused by a pattern remembered as too costly, not compiled

    @property
    def cached_schemas(self) -> int:
        return len(self._schemas)

    @property
    def costly_patterns(self) -> int:
        return len(self._costly)

    @property
    def cached_tool_sets(self) -> int:
        return len(self._tool_sets)

    def admit(self, tools: Any) -> ToolSet:
        """Compile the offered tools' schemas (cached); raise `SchemaTooCostly` for one that is.
        The tools as read, for `check` to take instead of reading them again."""
        tool_set = self._tool_set(tools)
        for name, key in tool_set.keys.items():
            if key is not None and self._by_key(key) is TOO_COSTLY:
                raise SchemaTooCostly(
                    f"The schema of tool {name!r} is too costly to check (over {self._schema_bytes} bytes, "
                    "or a pattern too large for a linear-time regex engine).",
                    param="tools",
                )
        return tool_set

    def check(
        self,
        message: Mapping[str, Any],
        request: Mapping[str, Any],
        checks: Checks = DEFAULT_CHECKS,
        *,
        finish_reason: str | None = None,
        tool_set: ToolSet | None = None,
    ) -> list[Mistake]:
        """Every mistake in `message` (the assistant message) against `request` (the chat body);
        `tool_set`: `admit`'s reading of `request`'s tools, if the caller kept it."""
        mistakes: list[Mistake] = []
        if tool_set is None:
            tool_set = self._tool_set(request.get("tools"))
        tools = tool_set.index
        no_tools, required, named = tool_choice(request.get("tool_choice"))
        calls = message.get("tool_calls")
        if calls:
            if not isinstance(calls, list):
                return [Mistake(UNKNOWN_TOOL, "", "malformed tool_calls (not a list)")]
            if not no_tools and len(calls) >= SWEEP and (swept := sweep([_named(c)[2] for c in calls], tools)):
                return [swept]
            if not no_tools and len(calls) >= SPRAY and (sprayed := spray([_named(c)[2] for c in calls])):
                return [sprayed]
            called: set[str] = set()
            for call in calls:
                self._check_call(call, NO_TOOLS if no_tools else tool_set, finish_reason, mistakes, called)
            if no_tools and mistakes:
                mistakes = [Mistake(m.kind, m.tool, "tool_choice is none") for m in mistakes]
            if named and named not in called:
                detail = f"tool_choice names {named}; called {', '.join(sorted(called)) or 'no offered tool'}"
                mistakes.append(Mistake(MISSING_TOOL_CALL, named, short(detail)))
            if not mistakes and not no_tools and (again := repeated(calls, request.get("messages"))):
                return [again]
            return mistakes

        text = content_text(message)
        if not text.strip():
            if not message.get("refusal"):
                suffix = f" (finish_reason={finish_reason})" if finish_reason else ""
                mistakes.append(Mistake(EMPTY_RESPONSE, "", "no content and no tool calls" + suffix))
            return mistakes
        if not tools or no_tools:
            return mistakes

        rules = self._text_rules(tool_set.names, checks)
        mentioned = rules.mentioned(text)
        leaked = rules.written_calls(text, tools) if checks.detect_text_tool_calls and mentioned else []
        if swept := sweep(leaked, tools, " (written as text)"):
            return [swept]
        for name in dict.fromkeys(leaked):
            mistakes.append(Mistake(TEXT_TOOL_CALL, name, "tool call written as text content"))
        if not leaked and checks.detect_text_tool_calls and not json_answer(request) and opens_like_call(text):
            # a call written as text that does not decode, or names no offered tool: still a call attempt
            mistakes.append(Mistake(TEXT_TOOL_CALL, "", "text opens like a tool call but holds no valid call"))
            return mistakes
        if required:
            if not leaked or (named and named not in leaked):
                why = f"tool_choice names {named}" if named else "tool_choice is required"
                mistakes.append(Mistake(MISSING_TOOL_CALL, named, why + " but no tool call was made"))
        elif not leaked:
            if checks.detect_announced_calls and (found := rules.announced(text, mentioned)):
                tool, words = found
                detail = f"text announces a call but none was made: {words!r}"
                mistakes.append(Mistake(MISSING_TOOL_CALL, tool, short(detail)))
                return mistakes
            if finish_reason == "tool_calls":
                mistakes.append(Mistake(MISSING_TOOL_CALL, "", "finish_reason is tool_calls but no tool_calls"))
        return mistakes

    def _check_call(
        self,
        call: Any,
        tool_set: ToolSet,
        finish_reason: str | None,
        mistakes: list[Mistake],
        called: set[str],
    ) -> None:
        if not isinstance(call, Mapping):
            mistakes.append(Mistake(UNKNOWN_TOOL, "", "malformed tool call"))
            return
        kind, spec, name = _named(call)
        if not name:
            mistakes.append(Mistake(UNKNOWN_TOOL, "", "tool call without a function name"))
            return
        tools = tool_set.index
        if name not in tools:
            mistakes.append(Mistake(UNKNOWN_TOOL, name, short(f"{name!r} is not among the request's tools")))
            return
        called.add(name)  # the tool was called; a bad call is its own mistake, not a missing one
        schema = tools[name]
        if schema is FREEFORM or kind == "custom":
            return
        args = spec.get("arguments") if isinstance(spec, Mapping) else None
        truncated = " (finish_reason=length)" if finish_reason == "length" else ""
        if args is None or (isinstance(args, str) and not args.strip()):
            if isinstance(schema, Mapping) and schema.get("required"):
                required = ", ".join(map(str, schema["required"]))
                detail = f"empty arguments; required: {required}{truncated}"
                mistakes.append(Mistake(INVALID_JSON, name, short(detail)))
                return
            parsed: Any = {}
        elif isinstance(args, str):
            try:
                parsed = orjson.loads(args)
            except orjson.JSONDecodeError as exc:
                mistakes.append(Mistake(INVALID_JSON, name, short(f"arguments are not JSON: {exc}{truncated}")))
                return
        else:
            detail = f"arguments must be a JSON string, got {type(args).__name__}"
            mistakes.append(Mistake(INVALID_JSON, name, detail))
            return
        if not isinstance(parsed, dict):
            detail = f"arguments are JSON {type(parsed).__name__}, not an object{truncated}"
            mistakes.append(Mistake(INVALID_JSON, name, short(detail)))
            return
        if schema is None or (key := tool_set.keys.get(name)) is None:
            return
        validator = self._by_key(key)
        if validator is None or validator is TOO_COSTLY:
            return
        try:
            if validator.is_valid(parsed):
                return
            error = next(iter(validator.iter_errors(parsed)), None)
        except Exception:  # unresolvable $ref, recursion...: cannot check
            return
        if error is None:
            return
        where = "/".join(map(str, error.instance_path))
        detail = f"{where}: {error.message}" if where else error.message
        mistakes.append(Mistake(SCHEMA_VIOLATION, name, short(detail)))

    def _tool_set(self, tools: Any) -> ToolSet:
        """`tools` read (cached by its JSON, unless that is longer than TOOL_SET_BYTES)."""
        try:
            key = orjson.dumps(tools) if tools else b""
        except (orjson.JSONEncodeError, TypeError):
            key = None  # not JSON (cannot come from a parsed body): read, not kept
        cached = self._tool_sets.get(key) if key is not None else None
        if cached is not None:
            self._tool_sets.move_to_end(key)  # type: ignore[arg-type]
            return cached
        index = tool_index(tools)
        keys = {name: _schema_key(s) for name, s in index.items() if s is not None and s is not FREEFORM}
        tool_set = ToolSet(index, keys, frozenset(index), len(key) if key is not None else 0)
        if key is not None and len(key) <= TOOL_SET_BYTES:
            self._tool_sets[key] = tool_set
            if len(self._tool_sets) > self._max_tool_sets:
                self._tool_sets.popitem(last=False)
        return tool_set

    def _by_key(self, key: bytes) -> Any:
        """The cached validator of the schema whose canonical JSON is `key`: None (cannot check) or
        `TOO_COSTLY` (refused)."""
        cached = self._schemas.get(key, _MISS)
        if cached is not _MISS:
            self.hits += 1
            self._schemas.move_to_end(key)
            return cached
        self.compiled += 1
        validator = TOO_COSTLY if len(key) > self._schema_bytes else self._compile(orjson.loads(key))
        self._schemas[key] = validator
        if len(self._schemas) > self._max_schemas:
            self._schemas.popitem(last=False)
        return validator

    def _compile(self, schema: Any) -> Any:
        """`compile_schema(schema)`, or `TOO_COSTLY` on sight for a pattern already found too costly."""
        if self._costly:
            for pattern in patterns_of(schema):
                if pattern in self._costly:
                    self._costly.move_to_end(pattern)
                    self.costly_hits += 1
                    return TOO_COSTLY
        validator = compile_schema(schema, self._patterns)
        if isinstance(validator, CostlyPattern):
            if self._max_costly:
                self._costly[validator.pattern] = None
                if len(self._costly) > self._max_costly:
                    self._costly.popitem(last=False)
            return TOO_COSTLY
        return validator

    def _text_rules(self, names: frozenset[str], checks: Checks) -> TextRules:
        key = (names, checks.announced_call_patterns)
        rules = self._rules.get(key)
        if rules is not None:
            self._rules.move_to_end(key)
            return rules
        rules = build_rules(key[0], checks.announced_call_patterns)
        self._rules[key] = rules
        if len(self._rules) > self._max_rules:
            self._rules.popitem(last=False)
        return rules


def _named(call: Any) -> tuple[Any, Any, str]:
    """A call's type (default "function"), its object of that type, and the tool it names ("" if none)."""
    if not isinstance(call, Mapping):
        return None, None, ""
    kind = call.get("type") or "function"
    spec = call.get(kind) if isinstance(kind, str) else None
    name = spec.get("name") if isinstance(spec, Mapping) else None
    return kind, spec, name if isinstance(name, str) else ""


def _schema_key(schema: Any) -> bytes | None:
    """A schema's canonical JSON (its key among compiled schemas), None if it is not JSON."""
    try:
        return orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
    except (orjson.JSONEncodeError, TypeError):
        return None  # not JSON (cannot come from a parsed body): cannot check


def check(
    message: Mapping[str, Any],
    request: Mapping[str, Any],
    checks: Checks = DEFAULT_CHECKS,
    *,
    finish_reason: str | None = None,
    validator: Validator | None = None,
) -> list[Mistake]:
    """Convenience: `validator.check(...)`; without `validator`, a throw-away one (no caching)."""
    return (validator or Validator()).check(message, request, checks, finish_reason=finish_reason)

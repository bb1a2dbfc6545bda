"""Pure helpers for the fake upstream: deterministic text, tool answers, and defects.

Nothing here does I/O. Every function takes the caller's ``random.Random`` so that the fake server
stays deterministic for a given seed and request order (see ``router.fake``). The schema-valid
arguments a call carries are router/fake/values.py's.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import orjson

from router.fake.values import VOCAB, make_args, merge_all_of, resolve
from router.mistakes import INVALID_JSON, MISSING_TOOL_CALL, SCHEMA_VIOLATION, TEXT_TOOL_CALL, TOOL_SWEEP, UNKNOWN_TOOL

# the defects the fake makes on purpose: the checks' kinds of a call (router/mistakes.py)
BAD_KINDS: tuple[str, ...] = (
    INVALID_JSON, UNKNOWN_TOOL, SCHEMA_VIOLATION, MISSING_TOOL_CALL, TEXT_TOOL_CALL, TOOL_SWEEP,
)  # fmt: skip


@dataclass(slots=True)
class Answer:
    """What the fake model says, independent of the wire format (OpenAI or Anthropic)."""

    text: str | None = None
    tool_name: str | None = None
    tool_args: str | None = None  # JSON text of the arguments (invalid on purpose for invalid_json)
    call_id: str | None = None
    defect: str | None = None  # the injected bad kind, if any


def make_text(rng: random.Random, words: int) -> str:
    chosen = rng.choices(VOCAB, k=max(1, words))
    chosen[0] = chosen[0].capitalize()
    return " ".join(chosen) + "."


_WRONG: tuple[tuple[Any, frozenset[str]], ...] = (
    ("not-a-number", frozenset({"string"})),
    (12345, frozenset({"integer", "number"})),
    ([1, 2], frozenset({"array"})),
    (None, frozenset({"null"})),
)


def _wrong_value(sub: dict[str, Any]) -> Any:
    """A value of a JSON type that ``sub`` does not allow (or, without ``type``, outside its enum)."""
    t = sub.get("type")
    allowed = {t} if isinstance(t, str) else {x for x in t if isinstance(x, str)} if isinstance(t, list) else set()
    if not allowed:
        enum = sub.get("enum") or []
        return next(v for v in ("__not_in_enum__", 12345, None) if v not in enum)
    return next((v for v, types in _WRONG if not types & allowed), 12345)


def violate(params: Any, args: dict[str, Any], rng: random.Random) -> Any:
    """Break ``args`` against ``params``: wrong type for an argument, or a missing required one.

    Falls back to a JSON array (not an object) when the schema constrains nothing.
    """
    root: dict[str, Any] = params if isinstance(params, dict) else {}
    root = merge_all_of(root, root) if isinstance(root.get("allOf"), list) else root
    props: dict[str, Any] = root["properties"] if isinstance(root.get("properties"), dict) else {}
    listed = root.get("required")
    required = [r for r in listed if isinstance(r, str)] if isinstance(listed, list) else []
    typed: dict[str, dict[str, Any]] = {}
    for name in [*required, *props]:
        sub = resolve(props.get(name), root)
        if isinstance(sub, dict) and ("type" in sub or "enum" in sub):
            typed.setdefault(name, sub)
    broken = dict(args)
    if required and (not typed or rng.random() < 0.5):
        broken.pop(required[0], None)
        return broken
    if typed:
        name, sub = next(iter(typed.items()))
        broken[name] = _wrong_value(sub)
        return broken
    return [args]


def unknown_name(offered: list[str]) -> str:
    names = set(offered)
    base = f"{offered[0]}_v2" if offered else "do_something"
    candidate, n = base, 2
    while candidate in names:
        n += 1
        candidate = f"{base}{n}"
    return candidate


def canonical(arguments: Any) -> str:
    """Arguments as canonical JSON (keys sorted), from a JSON text or a decoded object."""
    try:
        value = orjson.loads(arguments or "{}") if isinstance(arguments, str) else arguments
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except (orjson.JSONDecodeError, TypeError):
        return str(arguments)


def last_calls(messages: list[Any]) -> frozenset[tuple[str, str]]:
    """(name, canonical arguments) of the model turn whose results close `messages`, in any of the
    three APIs: chat `tool` messages after an assistant's `tool_calls`, Responses `*_call_output`
    items after `function_call` items, an Anthropic user turn of `tool_result` blocks after `tool_use`."""
    items = [m for m in messages if isinstance(m, dict)]
    i = len(items)
    while i > 0 and (items[i - 1].get("role") == "tool" or str(items[i - 1].get("type", "")).endswith("call_output")):
        i -= 1
    if i < len(items):  # chat or Responses
        made: list[tuple[str, Any]] = []
        while i > 0 and items[i - 1].get("type") in ("function_call", "reasoning"):
            i -= 1
            if items[i].get("type") == "function_call":
                made.append((str(items[i].get("name", "")), items[i].get("arguments")))
        if not made and i > 0 and isinstance(calls := items[i - 1].get("tool_calls"), list):
            fns = [c.get("function") for c in calls if isinstance(c, dict)]
            made = [(str(f.get("name", "")), f.get("arguments")) for f in fns if isinstance(f, dict)]
        return frozenset((name, canonical(arguments)) for name, arguments in made)
    content = items[-1].get("content") if len(items) >= 2 and items[-1].get("role") == "user" else None
    results = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
    if not any(b.get("type") == "tool_result" for b in results):
        return frozenset()
    blocks = items[-2].get("content") if items[-2].get("role") == "assistant" else None
    blocks = blocks if isinstance(blocks, list) else []
    uses = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"]
    return frozenset((str(b.get("name", "")), canonical(b.get("input"))) for b in uses)


def again(params: Any, args: dict[str, Any]) -> dict[str, Any]:
    """`args` with its first free-text string argument changed ("Paris" → "Paris 2"); as it was if
    there is none (a tool with no arguments can only be called again the same)."""
    props = params.get("properties") if isinstance(params, dict) else None
    for key, value in args.items():
        schema = props.get(key) if isinstance(props, dict) else None
        free = isinstance(schema, dict) and not ({"enum", "const", "pattern", "format", "maxLength"} & schema.keys())
        if isinstance(value, str) and free:
            return {**args, key: f"{value} 2"}
    return args


def tool_answer(
    tools: list[tuple[str, Any]],
    chosen: str | None,
    rng: random.Random,
    rate: dict[str, float],
    default_rate: float,
    kinds: tuple[str, ...],
    forced_kind: str | None,
    prefer: tuple[str, ...] = (),
    last: frozenset[tuple[str, str]] = frozenset(),
) -> Answer:
    """Plan a tool-call answer. Draw order: tool index, bad draw, kind index, args, call id. The tool is
    `chosen`, else the first of `prefer` that is offered, else the drawn one (the draws are the same).
    `last`: the calls of the turn whose results the request brings back (`last_calls`); a model that
    has a call's result does not ask for it again, so a clean call that would repeat one word for word
    gets another value (`again`), drawing nothing more."""
    index = rng.randrange(len(tools))
    bad_draw = rng.random()
    kind_index = rng.randrange(len(kinds)) if kinds else 0
    names = [n for n, _ in tools]
    if (wanted := chosen or next((p for p in prefer if p in names), None)) is not None:
        index = next((i for i, n in enumerate(names) if n == wanted), index)
    name, params = tools[index]
    args = make_args(params, rng)
    call_id = f"call_{rng.getrandbits(96):024x}"
    kind = forced_kind
    if kind is None and kinds and bad_draw < rate.get(name, default_rate):
        kind = kinds[kind_index]
    if kind is None and (name, canonical(args)) in last:
        args = again(params, args)
    text_args = orjson.dumps(args).decode()
    if kind is None:
        return Answer(tool_name=name, tool_args=text_args, call_id=call_id)
    if kind == INVALID_JSON:
        return Answer(tool_name=name, tool_args=text_args[:-1], call_id=call_id, defect=kind)
    if kind == UNKNOWN_TOOL:
        bad_name = unknown_name([n for n, _ in tools])
        return Answer(tool_name=bad_name, tool_args=text_args, call_id=call_id, defect=kind)
    if kind == SCHEMA_VIOLATION:
        broken = orjson.dumps(violate(params, args, rng)).decode()
        return Answer(tool_name=name, tool_args=broken, call_id=call_id, defect=kind)
    if kind == MISSING_TOOL_CALL:
        return Answer(text=f"I will call {name} now.", defect=kind)
    if kind == TEXT_TOOL_CALL:
        return Answer(text=orjson.dumps({"name": name, "arguments": args}).decode(), defect=kind)
    if kind == TOOL_SWEEP:  # every offered tool in turn, as a small model writes them: as text, each valid
        calls = [{"name": n, "arguments": args if i == index else make_args(p, rng)} for i, (n, p) in enumerate(tools)]
        return Answer(text=",\n".join(orjson.dumps(c).decode() for c in calls), defect=kind)
    raise ValueError(f"unknown bad kind {kind!r}; expected one of {', '.join(BAD_KINDS)}")

"""Client tool schemas compiled for router/core/checks/validate.py, within bounds.

`compile_schema` gives a jsonschema-rs validator (no remote `$ref` is ever fetched), None for a
schema that cannot be checked (not a schema, fails its meta-schema, unknown `$ref`), or — for a
`pattern` (or `patternProperties` name) that Python's `re` reads but the regex engine refuses within
its size bounds — a `CostlyPattern` naming it; `TOO_COSTLY` marks a schema refused outright.
`patterns_of` lists a schema's regexes, so a pattern already found too costly is recognised
without compiling again (the engine takes milliseconds to give up on one).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import jsonschema_rs

TOO_COSTLY: Final = object()  # a compiled-schema cache entry: refused at request time
BACKTRACK_LIMIT: Final = 100_000  # steps of the backtracking engine (lookaround, backreferences) per match
PATTERN_CHARS: Final = 64 * 1024  # a longer pattern the engine refused is not read by `re` either


@dataclass(frozen=True, slots=True)
class CostlyPattern:
    """`compile_schema`'s answer for a schema refused for this pattern (too costly)."""

    pattern: str


_DATA_KEYWORDS: Final = frozenset(("const", "enum", "default", "examples"))  # values, not subschemas


def patterns_of(schema: Any) -> Iterator[str]:
    """The regexes of `schema`: every `pattern` and `patternProperties` name, at any depth."""
    if isinstance(schema, dict):
        if isinstance(pattern := schema.get("pattern"), str):
            yield pattern
        if isinstance(named := schema.get("patternProperties"), dict):
            yield from named
        for key, value in schema.items():
            if key not in _DATA_KEYWORDS and isinstance(value, dict | list):
                yield from patterns_of(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from patterns_of(item)


def compile_schema(schema: Any, patterns: Any) -> Any:
    """A validator (no `$ref` is ever fetched), None when `schema` cannot be checked, or a
    `CostlyPattern` (`TOO_COSTLY` when the engine does not say which pattern)."""
    if not isinstance(schema, (dict, bool)):
        return None
    try:
        return jsonschema_rs.validator_for(schema, pattern_options=patterns, offline=True)
    except jsonschema_rs.ValidationError as exc:
        if "Unknown meta-schema" in str(exc) and isinstance(schema, dict) and "$schema" in schema:
            # an unknown `$schema`: checked as the default draft (2020-12)
            return compile_schema({k: v for k, v in schema.items() if k != "$schema"}, patterns)
        if exc.schema_path[-1:] == ["pattern"] or "patternProperties" in exc.schema_path:
            if not isinstance(pattern := exc.instance, str):
                return TOO_COSTLY
            if len(pattern) > PATTERN_CHARS:
                return CostlyPattern(pattern)
            try:
                re.compile(pattern)
            except (re.error, RecursionError, OverflowError):
                return None  # not a regex at all: a bad schema, which cannot be checked
            return CostlyPattern(pattern)  # a regex, but too large for the engine's bounds
        return None  # not a schema, unknown `$ref`...: cannot check
    except Exception:  # a client's bad schema is not our crash
        return None

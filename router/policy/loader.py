"""Read a policy file: YAML → `${VAR}` interpolation → pydantic `Policy`, with file:line errors.

Every problem in a file is reported at once, each as `file:line: dotted.path: message`:
YAML syntax errors, duplicate keys (PyYAML would silently keep the last), unknown keys, wrong
types, references to tiers that do not exist, and `${VAR}` with no value and no default.

Interpolation: in string values, `${VAR}` is replaced by the environment variable VAR (an error
when it is unset or empty), `${VAR:-default}` falls back to `default`, and `$${` is a literal `${`.
Error messages never contain input values, and anything that came from the environment or sits
in `api_key` / `client_keys` is redacted from them, so secrets never reach a terminal or a log.
"""

from __future__ import annotations

import difflib
import os
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from router.errors import redact
from router.policy.model import Policy
from router.policy.references import reference_problems

__all__ = ["PolicyError", "check_file", "load_policy", "parse_policy"]

Loc = tuple[Any, ...]

_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_BOOL_TAG = "tag:yaml.org,2002:bool"
# `$${` (escape) | `${NAME}` / `${NAME:-default}` | any other `${` (malformed)
_REF = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$\{")
_SECRET_FIELDS = ("api_key",)


class PolicyError(ValueError):
    """A policy file is invalid. `errors` holds one `file:line: path: message` line per problem."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))

    def __str__(self) -> str:
        return "\n".join(self.errors)


def _dotted(loc: Loc) -> str:
    return ".".join(str(p) for p in loc)


class _LineLoader(yaml.SafeLoader):
    """A SafeLoader that builds plain Python data itself, recording the line of every key and item.

    It also reports duplicate keys and interpolates `${VAR}` in string scalars as it goes.
    Booleans are YAML 1.2's `true`/`false` only: in YAML 1.1 `on:` (a key of `escalation`!),
    `yes`, `no` and `off` are booleans too.
    """

    # private API: yaml-implicit-resolvers, see docs/architecture.md (no public way to drop a resolver)
    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL_TAG]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def __init__(self, text: str, env: Mapping[str, str]) -> None:
        super().__init__(text)
        self.env = env
        self.lines: dict[Loc, int] = {}
        self.problems: list[tuple[int, Loc, str]] = []
        self.env_values: set[str] = set()  # values taken from the environment (redacted from errors)
        self.failed: set[Loc] = set()  # values already reported as unreadable (their other errors are noise)

    def problem(self, line: int, loc: Loc, message: str, *, unreadable: bool = False) -> None:
        self.problems.append((line, loc, message))
        if unreadable:
            self.failed.add(loc)

    def build(self, node: yaml.Node, loc: Loc, stack: frozenset[int] = frozenset()) -> Any:
        line = node.start_mark.line + 1
        self.lines.setdefault(loc, line)
        if isinstance(node, yaml.MappingNode | yaml.SequenceNode):
            if id(node) in stack:
                self.problem(line, loc, "recursive YAML alias", unreadable=True)
                return None
            stack = stack | {id(node)}
        if isinstance(node, yaml.MappingNode):
            if node.tag != _MAP_TAG:
                self.problem(line, loc, f"unsupported YAML tag {node.tag!r}", unreadable=True)
                return None
            return self._build_mapping(node, loc, stack)
        if isinstance(node, yaml.SequenceNode):
            if node.tag != _SEQ_TAG:
                self.problem(line, loc, f"unsupported YAML tag {node.tag!r}", unreadable=True)
                return None
            return [self.build(item, (*loc, i), stack) for i, item in enumerate(node.value)]
        try:
            value = self.construct_object(node)
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or "cannot read this value"
            self.problem(line, loc, f"YAML error: {problem}", unreadable=True)
            return None
        if isinstance(value, str) and "${" in value:
            return self._interpolate(value, loc, line)
        return value

    def _build_mapping(self, node: yaml.MappingNode, loc: Loc, stack: frozenset[int]) -> dict[Any, Any]:
        result: dict[Any, Any] = {}
        # `<<: *anchor` merges first; the mapping's own keys override what was merged.
        for key_node, value_node in node.value:
            if key_node.tag != _MERGE_TAG:
                continue
            sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            for source in sources:
                merged = self.build(source, loc, stack)
                if isinstance(merged, dict):
                    result.update(merged)
                else:
                    self.problem(source.start_mark.line + 1, loc, "`<<` merges only mappings")
        first_line: dict[Any, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode):
                self.problem(line, loc, "mapping keys must be plain values, not lists or mappings")
                continue
            try:
                key = self.construct_object(key_node)
            except yaml.YAMLError:
                self.problem(line, loc, "cannot read this key")
                continue
            if key in first_line:
                self.problem(line, (*loc, key), f"duplicate key {key!r} (first at line {first_line[key]})")
            first_line[key] = line
            self.lines[(*loc, key)] = line
            result[key] = self.build(value_node, (*loc, key), stack)
        return result

    def _interpolate(self, text: str, loc: Loc, line: int) -> str:
        def substitute(m: re.Match[str]) -> str:
            if m.group(0) == "$${":
                return "${"
            name, default = m.group(1), m.group(2)
            if name is None:
                malformed = "malformed ${...}: write ${NAME} or ${NAME:-default}, and $${ for a literal ${"
                self.problem(line, loc, malformed, unreadable=True)
                return ""
            value = self.env.get(name)
            if value:
                self.env_values.add(value)
                return value
            if default is not None:
                return default
            unset = f"environment variable {name} is not set (use ${{{name}:-default}} for a default)"
            self.problem(line, loc, unset, unreadable=True)
            return ""

        return _REF.sub(substitute, text)


_LineLoader.add_implicit_resolver(_BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def _compose(text: str, filename: str, env: Mapping[str, str]) -> tuple[_LineLoader, Any]:
    try:
        loader = _LineLoader(text, env)
    except yaml.YAMLError as exc:  # the reader refuses control characters
        raise PolicyError([_reader_error(text, filename, exc)]) from None
    try:
        node = loader.get_single_node()
        if node is None:
            raise PolicyError([f"{filename}:1: the policy file is empty"])
        data = loader.build(node, ())
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        message = f"YAML syntax error: {exc.problem or exc.context or 'invalid YAML'}"
        if exc.context and exc.problem and exc.context_mark:
            message += f" ({exc.context} at line {exc.context_mark.line + 1})"
        raise PolicyError([f"{filename}:{line}: {message}"]) from None
    except yaml.YAMLError as exc:
        raise PolicyError([_reader_error(text, filename, exc)]) from None
    finally:
        loader.dispose()
    return loader, data


def _reader_error(text: str, filename: str, exc: yaml.YAMLError) -> str:
    position = getattr(exc, "position", 0) or 0
    line = text.count("\n", 0, position) + 1
    reason = getattr(exc, "reason", None) or type(exc).__name__
    return f"{filename}:{line}: YAML error: {reason}"


def _walk(data: Any, loc: Loc, missing: bool) -> tuple[Loc, bool]:
    """The part of pydantic's `loc` that exists in the data (plus a missing key's name).

    Anything else in `loc` is a pydantic union-branch tag such as `str` or `list[str]`; the second
    value tells whether such tags were dropped.
    """
    shown: list[Any] = []
    for i, part in enumerate(loc):
        if (isinstance(data, dict) and part in data) or (
            isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data)
        ):
            data = data[part]
        elif missing and i == len(loc) - 1:
            shown.append(part)
            return tuple(shown), False
        else:
            return tuple(shown), True
        shown.append(part)
    return tuple(shown), False


def _unwrap(tp: Any) -> Any:
    """The model, dict or list type inside an Optional/Union annotation."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        for want in (BaseModel, dict, list):
            for arg in args:
                origin = typing.get_origin(arg) or arg
                if isinstance(origin, type) and issubclass(origin, want):
                    return arg
    return tp


def _model_at(loc: Loc) -> type[BaseModel] | None:
    tp: Any = Policy
    for part in loc:
        tp = _unwrap(tp)
        origin = typing.get_origin(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            field = tp.model_fields.get(str(part))
            if field is None:
                return None
            tp = field.annotation
        elif origin is dict:
            tp = typing.get_args(tp)[1]
        elif origin is list:
            tp = typing.get_args(tp)[0]
        else:
            return None
    tp = _unwrap(tp)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def _unknown_key_message(parent: Loc, key: Any) -> str:
    message = f"unknown key {key!r}"
    model = _model_at(parent)
    if model is None:
        return message
    allowed = list(model.model_fields)
    close = difflib.get_close_matches(str(key), allowed, n=1)
    if close:
        return f"{message}; did you mean {close[0]!r}?"
    return f"{message} (allowed: {', '.join(allowed)})"


def _message(err: ErrorDetails, shown: Loc) -> str:
    kind, msg = err["type"], err["msg"]
    if kind == "extra_forbidden" and shown:
        return _unknown_key_message(shown[:-1], shown[-1])
    if kind == "missing" and shown:
        return f"missing required key {shown[-1]!r}"
    if kind == "value_error":
        return msg.removeprefix("Value error, ")
    return msg


def _validation_problems(exc: ValidationError, data: Any, loader: _LineLoader) -> list[tuple[Loc, str]]:
    out: list[tuple[Loc, str]] = []
    branches: dict[Loc, list[str]] = {}  # one error per union branch → one line: "a or b"
    root_checks: list[str] = []
    for err in exc.errors(include_url=False, include_input=False, include_context=False):
        loc = tuple(err["loc"])
        if not loc and err["type"] == "value_error":
            root_checks += _message(err, loc).split("; ")  # re-run below on the raw data, with locations
            continue
        shown, union = _walk(data, loc, err["type"] == "missing")
        if any(_caused_by(failed, shown, err["type"]) for failed in loader.failed):
            continue  # a consequence of a value already reported as unreadable
        message = _message(err, shown)
        if union:
            messages = branches.setdefault(shown, [])
            if message not in messages:
                messages.append(message)
        else:
            out.append((shown, message))
    out += [(loc, " or ".join(messages)) for loc, messages in branches.items()]
    references = [
        (loc, message)
        for loc, message in _raw_reference_problems(data)
        if not any(_caused_by(failed, loc, "") for failed in loader.failed)
    ]
    located = {f"{_dotted(loc)}: {message}" for loc, message in references}
    out += [((), check) for check in root_checks if check not in located]  # any other whole-policy check
    return out + references


def _caused_by(failed: Loc, shown: Loc, kind: str) -> bool:
    """An error at or below a value whose interpolation failed, or a model check of its owner."""
    if shown[: len(failed)] == failed:
        return True
    return kind == "value_error" and bool(shown) and failed[: len(shown)] == shown


def _raw_reference_problems(data: Any) -> list[tuple[Loc, str]]:
    """Tier references checked on the raw data, so they are reported alongside other errors."""
    if not isinstance(data, dict):
        return []
    models, aliases, routes = data.get("models"), data.get("aliases"), data.get("routes")
    escalation = data.get("escalation")
    escalation = escalation if isinstance(escalation, dict) else {}
    repeat = escalation.get("repeat")
    if not isinstance(models, dict) or not models:
        return []
    return reference_problems(
        [str(k) for k in models],
        aliases if isinstance(aliases, dict) else {},
        routes if isinstance(routes, list) else [],
        escalation.get("to"),
        repeat.get("tier") if isinstance(repeat, dict) else None,
    )


def _secret_values(data: Any) -> set[str]:
    """Raw api_key / client_keys strings in the file (never shown in errors)."""
    found: set[str] = set()
    if not isinstance(data, dict):
        return found
    keys = data.get("client_keys")
    if isinstance(keys, list):
        found.update(str(k) for k in keys if k is not None)
    models = data.get("models")
    for tier in models.values() if isinstance(models, dict) else ():
        if isinstance(tier, dict):
            found.update(str(tier[f]) for f in _SECRET_FIELDS if tier.get(f) is not None)
    return found


def _line_of(lines: Mapping[Loc, int], loc: Loc) -> int:
    for n in range(len(loc), -1, -1):
        if loc[:n] in lines:
            return lines[loc[:n]]
    return 1


def parse_policy(text: str, filename: str, env: Mapping[str, str] | None = None) -> Policy:
    """Parse policy text; `filename` is only used in error lines. Raises `PolicyError`."""
    loader, data = _compose(text, filename, os.environ if env is None else env)
    problems: list[tuple[int, Loc, str]] = list(loader.problems)
    policy: Policy | None = None
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        for loc, message in _validation_problems(exc, data, loader):
            problems.append((_line_of(loader.lines, loc), loc, message))
    if policy is not None and not problems:
        return policy
    if not problems:  # cannot happen, but an invalid policy must never pass as an empty error list
        problems.append((1, (), "the policy is invalid"))
    secrets = tuple(sorted(loader.env_values | _secret_values(data), key=len, reverse=True))
    errors: list[str] = []
    for line, loc, message in sorted(problems, key=lambda p: p[0]):
        where = f"{_dotted(loc)}: " if loc else ""
        entry = f"{filename}:{line}: {redact(where + message, secrets)}"
        if entry not in errors:
            errors.append(entry)
    raise PolicyError(errors)


def load_policy(path: Path, env: Mapping[str, str] | None = None) -> Policy:
    """Read and validate a policy file. Raises `PolicyError` listing every problem."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError([f"{path}: cannot read the policy file: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError:
        raise PolicyError([f"{path}: the policy file is not UTF-8 text"]) from None
    return parse_policy(text, str(path), env)


def check_file(path: Path, env: Mapping[str, str] | None = None) -> list[str]:
    """Every error of a policy file as `file:line: ...` lines; empty when it is valid."""
    try:
        load_policy(path, env)
    except PolicyError as exc:
        return exc.errors
    return []

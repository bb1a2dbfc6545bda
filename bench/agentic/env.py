"""The environment the agents act in: executable tools over in-process state, deterministic and
resettable. Nothing here touches the real file system, a shell or the network.

    env = Environment()                  a fresh copy of the starting state (bench/agentic/world.py)
    result = env.call("cat", '{"path": "/notes/todo.txt"}')   → ToolResult(text, kind)
    env.reset()                          back to the starting state (the log cleared)
    env.changes()                        what the agent changed, one line each (for the report)

Tools (TOOLS, 30 of them, in groups): a file tree with shell-like commands (ls, cat, head, tail,
grep, wc, find; write_file, append_file, delete_file, move_file; and `shell`, the same commands as
a command line with pipes), a calculator, a calendar, contacts, a message box, an issue tracker,
weather, unit and currency conversion. Every result is text. A failure is a result too, starting
with "Error:" (as the router's default failure patterns read an agent's tool results), with a hint
of what to do instead; its kind says who was wrong:

    error          the call was well formed, the world said no (no such file, unknown recipient, …):
                   part of the task, an agent recovers from it
    invalid_json   the arguments were not a JSON object
    bad_arguments  a required argument missing, or one of the wrong type (schema-level)
    unknown_tool   a tool that does not exist or was not offered to the task
"""

from __future__ import annotations

import ast
import copy
import fnmatch
import math
import operator
import posixpath
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from bench.agentic import world

MAX_OUTPUT = 60_000  # characters a tool returns at most (the rest is cut, with a note)
GROUPS: dict[str, tuple[str, ...]] = {
    "files": ("ls", "cat", "head", "tail", "grep", "wc", "find"),
    "write": ("write_file", "append_file", "delete_file", "move_file"),
    "shell": ("shell",),
    "calc": ("calculate",),
    "calendar": ("today", "list_events", "create_event", "delete_event"),
    "contacts": ("lookup_contact", "list_contacts"),
    "messages": ("send_message", "list_messages", "read_message"),
    "issues": ("list_issues", "get_issue", "create_issue", "update_issue", "comment_issue"),
    "misc": ("get_weather", "convert_units", "convert_currency"),
}
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
TIME = re.compile(r"^([01]\d|2[0-3]):[0-5]\d$")


class ToolError(Exception):
    """A tool said no. `kind`: error (the world), bad_arguments (the call's shape)."""

    def __init__(self, message: str, kind: str = "error") -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class ToolResult:
    text: str
    kind: str | None = None  # None: it worked; else error | invalid_json | bad_arguments | unknown_tool

    @property
    def failed(self) -> bool:
        return self.kind is not None


@dataclass
class ToolEvent:
    """One tool call as the environment saw it."""

    tool: str
    arguments: Any
    kind: str | None
    output: str


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    run: Callable[..., str]

    def openai(self) -> dict[str, Any]:
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}  # fmt: skip

    def anthropic(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.parameters}


def _schema(required: tuple[str, ...] = (), **props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(required)}


def _s(description: str, **more: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **more}


def _i(description: str) -> dict[str, Any]:
    return {"type": "integer", "description": description}


def _n(description: str) -> dict[str, Any]:
    return {"type": "number", "description": description}


def _strings(description: str) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string"}, "description": description}


@dataclass
class State:
    files: dict[str, str]
    events: list[dict[str, Any]]
    contacts: list[dict[str, str]]
    inbox: list[dict[str, str]]
    sent: list[dict[str, str]]
    issues: list[dict[str, Any]]
    next_event: int = 7
    next_issue: int = 9

    @classmethod
    def initial(cls) -> State:
        return cls(
            files=dict(world.FILES),
            events=copy.deepcopy(world.EVENTS),
            contacts=copy.deepcopy(world.CONTACTS),
            inbox=copy.deepcopy(world.INBOX),
            sent=[],
            issues=copy.deepcopy(world.ISSUES),
        )

    def snapshot(self) -> dict[str, Any]:
        return copy.deepcopy(self.__dict__)


class Environment:
    """One task's world. `offered`: the tools the task offers (None: all); calling another is an
    `unknown_tool` failure, as for a name that does not exist."""

    def __init__(self, offered: tuple[str, ...] | None = None) -> None:
        self.offered = frozenset(offered) if offered is not None else frozenset(TOOLS)
        self.state = State.initial()
        self.log: list[ToolEvent] = []

    def reset(self) -> None:
        self.state = State.initial()
        self.log = []

    # --- calling -------------------------------------------------------------------------------

    def call(self, name: str, arguments: str | dict[str, Any] | None) -> ToolResult:
        result = self._call(name, arguments)
        text = result.text
        if len(text) > MAX_OUTPUT:
            text = text[:MAX_OUTPUT] + f"\n[output cut at {MAX_OUTPUT} characters]"
            result = ToolResult(text, result.kind)
        self.log.append(ToolEvent(name, arguments, result.kind, text))
        return result

    def _call(self, name: str, arguments: str | dict[str, Any] | None) -> ToolResult:
        tool = TOOLS.get(name)
        if tool is None or name not in self.offered:
            names = ", ".join(sorted(self.offered))
            return ToolResult(f"Error: unknown tool {name!r}. Tools: {names}", "unknown_tool")
        if isinstance(arguments, str):
            try:
                arguments = orjson.loads(arguments) if arguments.strip() else {}
            except orjson.JSONDecodeError as exc:
                return ToolResult(f"Error: the arguments are not valid JSON ({exc})", "invalid_json")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            return ToolResult("Error: the arguments must be a JSON object", "invalid_json")
        try:
            kwargs = _checked(tool, arguments)
            return ToolResult(tool.run(self.state, **kwargs))
        except ToolError as exc:
            return ToolResult(f"Error: {exc}", exc.kind)

    # --- what happened -------------------------------------------------------------------------

    def changes(self) -> list[str]:
        """What differs from the starting state, one short line each."""
        start, now = State.initial(), self.state
        out = []
        for path in sorted(set(start.files) | set(now.files)):
            before, after = start.files.get(path), now.files.get(path)
            if before != after:
                what = "deleted" if after is None else "created" if before is None else "changed"
                out.append(f"file {what}: {path}" + (f" ({after[:80]!r})" if after is not None else ""))
        ids = {e["id"]: e for e in start.events}
        now_ids = {e["id"]: e for e in now.events}
        for eid, e in ids.items():
            if eid not in now_ids:
                out.append(f"event deleted: {eid} {e['title']}")
        for eid, e in now_ids.items():
            if eid not in ids or ids[eid] != e:
                out.append(f"event {'created' if eid not in ids else 'changed'}: {_event_line(e)}")
        out += [f"message sent to {m['to']}: {m['text'][:120]!r}" for m in now.sent]
        before_issues = {i["id"]: i for i in start.issues}
        for issue in now.issues:
            old = before_issues.get(issue["id"])
            if old is None:
                out.append(f"issue created: #{issue['id']} {issue['title']!r} labels={issue['labels']}")
            elif old != issue:
                diff = {k: v for k, v in issue.items() if old.get(k) != v}
                out.append(f"issue changed: #{issue['id']} {diff}")
        return out

    def tool_errors(self) -> list[ToolEvent]:
        return [e for e in self.log if e.kind == "error"]


def _checked(tool: Tool, arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments the tool's function takes: required ones present, every known one of its
    schema's type; unknown ones ignored (as many real tools do)."""
    props = tool.parameters["properties"]
    for name in tool.parameters.get("required", ()):
        if arguments.get(name) is None:
            raise ToolError(f"{tool.name}: missing required argument {name!r}", "bad_arguments")
    out = {}
    for name, value in arguments.items():
        spec = props.get(name)
        if spec is None or value is None:
            continue
        kind = spec["type"]
        ok = {
            "string": isinstance(value, str),
            "integer": (isinstance(value, int) and not isinstance(value, bool))
            or (isinstance(value, float) and value.is_integer()),
            "number": isinstance(value, int | float) and not isinstance(value, bool),
            "boolean": isinstance(value, bool),
            "array": isinstance(value, list) and all(isinstance(v, str) for v in value),
        }[kind]
        if not ok:
            raise ToolError(f"{tool.name}: argument {name!r} must be of type {kind}", "bad_arguments")
        out[name] = int(value) if kind == "integer" else value
    return out


# --- files ------------------------------------------------------------------------------------


def _path(path: str) -> str:
    path = path.strip() or "/"
    return posixpath.normpath(posixpath.join("/", path))


def _dirs(state: State) -> set[str]:
    dirs = {"/"}
    for path in state.files:
        parent = posixpath.dirname(path)
        while parent not in dirs:
            dirs.add(parent)
            parent = posixpath.dirname(parent)
    return dirs


def _read(state: State, path: str, command: str) -> str:
    p = _path(path)
    if p in state.files:
        return state.files[p]
    if p in _dirs(state):
        raise ToolError(f"{command}: {p} is a directory (ls lists it)")
    raise ToolError(f"{command}: no such file: {p} (ls or find show what exists)")


def ls(state: State, path: str = "/") -> str:
    p = _path(path)
    if p in state.files:
        return p
    dirs = _dirs(state)
    if p not in dirs:
        raise ToolError(f"ls: no such directory: {p}")
    prefix = p.rstrip("/") + "/"
    entries = set()
    for candidate in (*state.files, *dirs):
        if candidate != p and candidate.startswith(prefix):
            rest = candidate[len(prefix) :]
            entries.add(rest.split("/")[0] + ("/" if "/" in rest or candidate in dirs else ""))
    return "\n".join(sorted(entries)) if entries else "(empty)"


def cat(state: State, path: str) -> str:
    return _read(state, path, "cat")


def head(state: State, path: str, lines: int = 10) -> str:
    return "\n".join(_read(state, path, "head").splitlines()[: max(lines, 0)])


def tail(state: State, path: str, lines: int = 10) -> str:
    text = _read(state, path, "tail").splitlines()
    return "\n".join(text[-lines:] if lines > 0 else [])


def _files_under(state: State, path: str, command: str) -> list[str]:
    p = _path(path)
    if p in state.files:
        return [p]
    if p not in _dirs(state):
        raise ToolError(f"{command}: no such file or directory: {p}")
    prefix = p.rstrip("/") + "/"
    return sorted(f for f in state.files if f.startswith(prefix))


def grep(state: State, pattern: str, path: str = "/", ignore_case: bool = False) -> str:
    try:
        rx = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise ToolError(f"grep: invalid pattern {pattern!r}: {exc}") from None
    hits = [
        f"{f}:{n}:{line}"
        for f in _files_under(state, path, "grep")
        for n, line in enumerate(state.files[f].splitlines(), 1)
        if rx.search(line)
    ]
    return "\n".join(hits) if hits else "(no matches)"


def wc(state: State, path: str) -> str:
    text = _read(state, path, "wc")
    return f"{len(text.splitlines())} lines, {len(text.split())} words, {len(text)} characters: {_path(path)}"


def find(state: State, name: str, path: str = "/") -> str:
    found = [f for f in _files_under(state, path, "find") if fnmatch.fnmatch(posixpath.basename(f), name)]
    return "\n".join(found) if found else "(nothing found)"


def write_file(state: State, path: str, content: str) -> str:
    p = _path(path)
    if p in _dirs(state):
        raise ToolError(f"write_file: {p} is a directory")
    state.files[p] = content
    return f"wrote {len(content)} characters to {p}"


def append_file(state: State, path: str, content: str) -> str:
    p = _path(path)
    if p not in state.files:
        raise ToolError(f"append_file: no such file: {p} (write_file creates one)")
    state.files[p] += content
    return f"appended {len(content)} characters to {p}"


def delete_file(state: State, path: str) -> str:
    p = _path(path)
    if p not in state.files:
        raise ToolError(f"delete_file: no such file: {p}")
    del state.files[p]
    return f"deleted {p}"


def move_file(state: State, source: str, destination: str) -> str:
    src, dst = _path(source), _path(destination)
    if src not in state.files:
        raise ToolError(f"move_file: no such file: {src} (ls or find show what exists)")
    if dst in _dirs(state):
        dst = posixpath.join(dst, posixpath.basename(src))
    if dst in state.files:
        raise ToolError(f"move_file: {dst} already exists")
    state.files[dst] = state.files.pop(src)
    return f"moved {src} to {dst}"


# --- shell: the same commands as a command line, with pipes --------------------------------------


def _flag_int(args: list[str], flag: str, default: int) -> tuple[int, list[str]]:
    out, value, it = [], default, iter(args)
    for a in it:
        if a == flag:
            value = int(next(it, str(default)))
        elif a.startswith(flag) and a[len(flag) :].isdigit():
            value = int(a[len(flag) :])
        elif re.fullmatch(r"-\d+", a) and flag == "-n":
            value = int(a[1:])
        else:
            out.append(a)
    return value, out


def _shell_one(state: State, argv: list[str], stdin: str | None) -> str:
    cmd, args = argv[0], argv[1:]
    flags = {a for a in args if a.startswith("-") and not re.fullmatch(r"-n?\d+", a) and a != "-n"}
    if cmd == "ls":
        paths = [a for a in args if not a.startswith("-")] or ["/"]
        return "\n".join(ls(state, p) for p in paths)
    if cmd == "cat":
        paths = [a for a in args if not a.startswith("-")]
        return "".join(cat(state, p) for p in paths) if paths else stdin or ""
    if cmd == "echo":
        return " ".join(args) + "\n"
    if cmd in ("head", "tail"):
        n, rest = _flag_int(args, "-n", 10)
        text = cat(state, rest[0]) if rest else stdin or ""
        lines = text.splitlines()
        return "\n".join(lines[:n] if cmd == "head" else lines[-n:] if n > 0 else []) + "\n"
    if cmd == "grep":
        rest = [a for a in args if a not in flags]
        if not rest:
            raise ToolError("shell: grep needs a pattern")
        pattern, paths = rest[0], rest[1:]
        try:
            rx = re.compile(pattern, re.IGNORECASE if "-i" in flags else 0)
        except re.error as exc:
            raise ToolError(f"shell: grep: invalid pattern {pattern!r}: {exc}") from None
        invert = "-v" in flags
        if paths:
            files = [f for p in paths for f in _files_under(state, p, "grep")]
            sources = [(f, state.files[f]) for f in files]
        else:
            sources = [("", stdin or "")]
        many = len(sources) > 1 or "-r" in flags
        hits: list[str] = []
        tallies: list[str] = []
        for name, text in sources:
            matched = [(n, line) for n, line in enumerate(text.splitlines(), 1) if bool(rx.search(line)) != invert]
            tallies.append(f"{name}:{len(matched)}" if many else str(len(matched)))
            for n, line in matched:
                hits.append((f"{name}:" if many else "") + (f"{n}:" if "-n" in flags else "") + line)
        return "\n".join(tallies if "-c" in flags else hits) + "\n"
    if cmd == "wc":
        paths = [a for a in args if not a.startswith("-")]
        text = cat(state, paths[0]) if paths else stdin or ""
        counts = {"-l": len(text.splitlines()), "-w": len(text.split()), "-c": len(text)}
        picked = [str(v) for k, v in counts.items() if k in flags] or [str(v) for v in counts.values()]
        return " ".join(picked) + (f" {_path(paths[0])}" if paths else "") + "\n"
    if cmd == "sort":
        lines = (cat(state, args[-1]) if args and not args[-1].startswith("-") else stdin or "").splitlines()
        if "-n" in flags:
            lines.sort(key=_leading_number, reverse="-r" in flags)
        else:
            lines.sort(reverse="-r" in flags)
        return "\n".join(lines) + "\n"
    if cmd == "uniq":
        out: list[tuple[int, str]] = []
        for line in (stdin or "").splitlines():
            if out and out[-1][1] == line:
                out[-1] = (out[-1][0] + 1, line)
            else:
                out.append((1, line))
        return "\n".join(f"{n:>7} {line}" if "-c" in flags else line for n, line in out) + "\n"
    if cmd == "find":
        path = args[0] if args and not args[0].startswith("-") else "/"
        name = args[args.index("-name") + 1] if "-name" in args and args.index("-name") + 1 < len(args) else "*"
        return find(state, name, path) + "\n"
    if cmd == "cut":
        d = args[args.index("-d") + 1] if "-d" in args else "\t"
        f = args[args.index("-f") + 1] if "-f" in args else "1"
        idx = [int(x) - 1 for x in f.split(",") if x.isdigit()]
        paths = [a for i, a in enumerate(args) if not a.startswith("-") and (i == 0 or args[i - 1] not in ("-d", "-f"))]
        text = cat(state, paths[0]) if paths else stdin or ""
        rows = (line.split(d) for line in text.splitlines())
        return "\n".join(d.join(r[i] for i in idx if i < len(r)) for r in rows) + "\n"
    raise ToolError(f"shell: {cmd}: command not found (commands: {', '.join(SHELL_COMMANDS)})")


def _leading_number(line: str) -> float:
    """sort -n's key: the number the line starts with (after blanks), else 0."""
    found = re.match(r"\s*(-?\d+(?:\.\d+)?)", line)
    return float(found.group(1)) if found else 0.0


SHELL_COMMANDS = ("ls", "cat", "head", "tail", "grep", "wc", "sort", "uniq", "cut", "find", "echo")


def shell(state: State, command: str) -> str:
    if re.search(r"(?<![<>])>{1,2}|<|`|\$\(|&&|\|\||;", command):
        raise ToolError("shell: only commands and pipes (|) are supported; use write_file or append_file to save")
    try:
        stages = [shlex.split(part) for part in command.split("|")]
    except ValueError as exc:
        raise ToolError(f"shell: cannot parse the command: {exc}") from None
    if not stages or any(not s for s in stages):
        raise ToolError("shell: empty command")
    out: str | None = None
    try:
        for argv in stages[:8]:
            out = _shell_one(state, argv, out)
    except ToolError as exc:
        raise ToolError(str(exc) if str(exc).startswith("shell") else f"shell: {exc}") from None
    except (ValueError, IndexError, AttributeError) as exc:
        raise ToolError(f"shell: bad arguments ({exc})") from None
    return (out or "").rstrip("\n") or "(no output)"


# --- calculator -------------------------------------------------------------------------------

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}  # fmt: skip
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "round": round, "abs": abs, "min": min, "max": max, "sqrt": math.sqrt, "floor": math.floor,
    "ceil": math.ceil, "sum": lambda *a: sum(a),
}  # fmt: skip


def _eval(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _eval(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and (abs(right) > 100 or abs(left) > 1e6):
            raise ToolError("calculate: exponent too large")
        return _BINARY[type(node.op)](left, right)  # type: ignore[no-any-return]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS:
        return _FUNCTIONS[node.func.id](*(_eval(a) for a in node.args))  # type: ignore[no-any-return]
    raise ToolError(
        "calculate: only numbers, + - * / // % ** and round, abs, min, max, sqrt, floor, ceil, sum are allowed"
    )


def calculate(state: State, expression: str) -> str:
    if len(expression) > 500:
        raise ToolError("calculate: expression too long")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ToolError(f"calculate: cannot parse {expression!r}; write it like (120 + 140) * 0.15") from None
    try:
        value = _eval(tree)
    except ZeroDivisionError:
        raise ToolError("calculate: division by zero") from None
    except (OverflowError, ValueError, TypeError) as exc:
        raise ToolError(f"calculate: {exc}") from None
    return _number(value)


def _number(value: float) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.10g}" if isinstance(value, float) else str(value)


# --- calendar ---------------------------------------------------------------------------------


def _event_line(e: dict[str, Any]) -> str:
    who = f" with {', '.join(e['attendees'])}" if e["attendees"] else ""
    return f"{e['id']}: {e['date']} {e['start']}-{e['end']} {e['title']}{who}"


def today(state: State) -> str:
    return f"{world.WEEKDAY} {world.TODAY}, {world.NOW}"


def list_events(state: State, date: str | None = None) -> str:
    if date is not None and not DATE.match(date):
        raise ToolError(f"list_events: date must be YYYY-MM-DD, got {date!r}")
    events = [e for e in state.events if date is None or e["date"] == date]
    events.sort(key=lambda e: (e["date"], e["start"]))
    if not events:
        return f"no events on {date}" if date else "no events"
    return "\n".join(_event_line(e) for e in events)


def _minutes(hhmm: str) -> int:
    return int(hhmm[:2]) * 60 + int(hhmm[3:])


def create_event(
    state: State, title: str, date: str, start: str, duration_minutes: int = 60, attendees: list[str] | None = None
) -> str:
    if not DATE.match(date):
        raise ToolError(f"create_event: date must be YYYY-MM-DD, got {date!r}")
    if not TIME.match(start):
        raise ToolError(f"create_event: start must be HH:MM (24-hour), got {start!r}")
    if not 5 <= duration_minutes <= 12 * 60:
        raise ToolError("create_event: duration_minutes must be between 5 and 720")
    if not title.strip():
        raise ToolError("create_event: the title is empty")
    end = _minutes(start) + duration_minutes
    if end >= 24 * 60:
        raise ToolError("create_event: the event must end on the same day")
    who = [_recipient(state, a, "create_event")["handle"] for a in attendees or ()]
    event = {"id": f"ev-{state.next_event}", "title": title.strip(), "date": date, "start": start,
             "end": f"{end // 60:02d}:{end % 60:02d}", "attendees": who}  # fmt: skip
    state.next_event += 1
    state.events.append(event)
    clash = [e for e in state.events if e is not event and e["date"] == date
             and _minutes(e["start"]) < end and _minutes(start) < _minutes(e["end"])]  # fmt: skip
    note = "".join(f"\nnote: overlaps {_event_line(e)}" for e in clash)
    return f"created {_event_line(event)}{note}"


def delete_event(state: State, event_id: str) -> str:
    for e in state.events:
        if e["id"] == event_id.strip():
            state.events.remove(e)
            return f"deleted {_event_line(e)}"
    raise ToolError(f"delete_event: no event {event_id!r} (list_events shows the ids)")


# --- contacts and messages --------------------------------------------------------------------


def _contact_line(c: dict[str, str]) -> str:
    return f"{c['name']} ({c['handle']}, {c['email']}), team {c['team']}"


def _recipient(state: State, who: str, command: str) -> dict[str, str]:
    """A contact by handle, email or full name (case-insensitive); a first name that fits several is ambiguous."""
    key = who.strip().lower()
    for c in state.contacts:
        if key in (c["handle"], c["email"], c["name"].lower()) or "@" + key == c["handle"]:
            return c
    first = [c for c in state.contacts if c["name"].lower().split()[0] == key]
    if len(first) > 1:
        options = "; ".join(_contact_line(c) for c in first)
        raise ToolError(f"{command}: {who!r} is ambiguous: {options}. Use a handle.")
    if len(first) == 1:
        return first[0]
    raise ToolError(f"{command}: unknown recipient {who!r}; lookup_contact or list_contacts give handles like @maria")


def lookup_contact(state: State, name: str) -> str:
    key = name.strip().lower().lstrip("@")
    found = [c for c in state.contacts if key and (key in c["name"].lower() or key in c["handle"] or key in c["email"])]
    if not found:
        raise ToolError(f"lookup_contact: nobody matches {name!r} (list_contacts lists everyone)")
    return "\n".join(_contact_line(c) for c in found)


def list_contacts(state: State, team: str | None = None) -> str:
    found = [c for c in state.contacts if team is None or c["team"] == team.strip().lower()]
    if not found:
        teams = ", ".join(sorted({c["team"] for c in state.contacts}))
        raise ToolError(f"list_contacts: no team {team!r}; teams: {teams}")
    return "\n".join(_contact_line(c) for c in found)


def send_message(state: State, to: str, text: str) -> str:
    if not text.strip():
        raise ToolError("send_message: the text is empty")
    contact = _recipient(state, to, "send_message")
    state.sent.append({"to": contact["handle"], "text": text})
    return f"sent to {contact['name']} ({contact['handle']})"


def list_messages(state: State, folder: str = "inbox") -> str:
    if folder == "inbox":
        return "\n".join(f"{m['id']}: {m['date']} from {m['from']}: {m['subject']}" for m in state.inbox)
    if folder == "sent":
        return "\n".join(f"sent to {m['to']}: {m['text'][:80]}" for m in state.sent) or "(nothing sent)"
    raise ToolError(f"list_messages: folder must be 'inbox' or 'sent', got {folder!r}")


def read_message(state: State, message_id: str) -> str:
    for m in state.inbox:
        if m["id"] == message_id.strip():
            return f"From: {m['from']}\nDate: {m['date']}\nSubject: {m['subject']}\n\n{m['body']}"
    raise ToolError(f"read_message: no message {message_id!r} (list_messages shows the ids)")


# --- issues -----------------------------------------------------------------------------------


def _issue(state: State, issue_id: int, command: str) -> dict[str, Any]:
    for issue in state.issues:
        if issue["id"] == issue_id:
            return issue
    raise ToolError(f"{command}: no issue #{issue_id} (list_issues shows them)")


def _issue_line(i: dict[str, Any]) -> str:
    return (f"#{i['id']} [{i['status']}] {i['title']} labels={','.join(i['labels']) or '-'} "
            f"assignee={i['assignee'] or '-'}")  # fmt: skip


def list_issues(state: State, status: str = "open", label: str | None = None) -> str:
    if status not in ("open", "closed", "all"):
        raise ToolError(f"list_issues: status must be open, closed or all, got {status!r}")
    found = [i for i in state.issues if status in ("all", i["status"]) and (label is None or label in i["labels"])]
    return "\n".join(_issue_line(i) for i in found) or "(no issues)"


def get_issue(state: State, issue_id: int) -> str:
    i = _issue(state, issue_id, "get_issue")
    comments = "".join(f"\ncomment: {c}" for c in i["comments"])
    return f"{_issue_line(i)}\n{i['body']}{comments}"


def create_issue(state: State, title: str, body: str = "", labels: list[str] | None = None) -> str:
    if not title.strip():
        raise ToolError("create_issue: the title is empty")
    issue = {"id": state.next_issue, "title": title.strip(), "status": "open", "labels": list(labels or ()),
             "assignee": None, "body": body, "comments": []}  # fmt: skip
    state.next_issue += 1
    state.issues.append(issue)
    return f"created {_issue_line(issue)}"


def update_issue(
    state: State, issue_id: int, status: str | None = None, assignee: str | None = None,
    add_labels: list[str] | None = None,
) -> str:  # fmt: skip
    i = _issue(state, issue_id, "update_issue")
    if status is not None and status not in ("open", "closed"):
        raise ToolError(f"update_issue: status must be open or closed, got {status!r}")
    if status is None and assignee is None and not add_labels:
        raise ToolError("update_issue: nothing to change (status, assignee or add_labels)")
    handle = _recipient(state, assignee, "update_issue")["handle"] if assignee is not None else None
    if status is not None:
        i["status"] = status
    if handle is not None:
        i["assignee"] = handle
    for label in add_labels or ():
        if label not in i["labels"]:
            i["labels"].append(label)
    return f"updated {_issue_line(i)}"


def comment_issue(state: State, issue_id: int, text: str) -> str:
    i = _issue(state, issue_id, "comment_issue")
    if not text.strip():
        raise ToolError("comment_issue: the text is empty")
    i["comments"].append(text)
    return f"commented on #{issue_id}"


# --- weather, units, currencies ---------------------------------------------------------------


def get_weather(state: State, city: str) -> str:
    for name, (celsius, sky) in world.WEATHER.items():
        if city.strip().lower() == name.lower():
            return f"{name}: {celsius} °C, {sky}"
    raise ToolError(f"get_weather: unknown city {city!r}; cities: {', '.join(world.WEATHER)}")


_UNITS: dict[str, tuple[str, float]] = {  # unit → (dimension, value in the dimension's base unit)
    "km": ("length", 1000.0), "m": ("length", 1.0), "mi": ("length", 1609.344), "ft": ("length", 0.3048),
    "kg": ("mass", 1.0), "lb": ("mass", 0.45359237), "l": ("volume", 1.0), "gal": ("volume", 3.785411784),
}  # fmt: skip


def convert_units(state: State, value: float, from_unit: str, to_unit: str) -> str:
    a, b = from_unit.strip().lower(), to_unit.strip().lower()
    if {a, b} <= {"c", "f"}:
        out = value if a == b else value * 9 / 5 + 32 if a == "c" else (value - 32) * 5 / 9
    elif a in _UNITS and b in _UNITS and _UNITS[a][0] == _UNITS[b][0]:
        out = value * _UNITS[a][1] / _UNITS[b][1]
    else:
        units = ", ".join([*_UNITS, "c", "f"])
        raise ToolError(f"convert_units: cannot convert {from_unit!r} to {to_unit!r}; units: {units}")
    return f"{_number(value)} {a} = {round(out, 4):g} {b}"


def convert_currency(state: State, amount: float, from_currency: str, to_currency: str) -> str:
    a, b = from_currency.strip().upper(), to_currency.strip().upper()
    if a not in world.RATES or b not in world.RATES:
        codes = ", ".join(world.RATES)
        raise ToolError(f"convert_currency: use currency codes: {codes} (got {from_currency!r}, {to_currency!r})")
    out = amount / world.RATES[a] * world.RATES[b]
    return f"{_number(amount)} {a} = {out:.2f} {b}"


def _tool(run: Callable[..., str], description: str, parameters: dict[str, Any]) -> Tool:
    return Tool(run.__name__, description, parameters, run)


_PATH = _s("absolute path, e.g. /notes/todo.txt")
TOOLS: dict[str, Tool] = {
    t.name: t
    for t in (
        _tool(ls, "List a directory of the file tree.", _schema(path=_s("directory, default /"))),
        _tool(cat, "Print a whole file.", _schema(("path",), path=_PATH)),
        _tool(head, "Print the first lines of a file.", _schema(("path",), path=_PATH, lines=_i("default 10"))),
        _tool(tail, "Print the last lines of a file.", _schema(("path",), path=_PATH, lines=_i("default 10"))),
        _tool(grep, "Search files for lines matching a regular expression; prints path:line:text.",
              _schema(("pattern",), pattern=_s("regular expression"), path=_s("file or directory, default /"),
                      ignore_case={"type": "boolean", "description": "default false"})),
        _tool(wc, "Count the lines, words and characters of a file.", _schema(("path",), path=_PATH)),
        _tool(find, "Find files by name (a glob like *.txt) under a directory.",
              _schema(("name",), name=_s("file name or glob"), path=_s("directory, default /"))),
        _tool(write_file, "Create or overwrite a file.",
              _schema(("path", "content"), path=_PATH, content=_s("the whole new content"))),
        _tool(append_file, "Append text to the end of an existing file.",
              _schema(("path", "content"), path=_PATH, content=_s("text to add, with its newline"))),
        _tool(delete_file, "Delete a file.", _schema(("path",), path=_PATH)),
        _tool(move_file, "Move or rename a file.",
              _schema(("source", "destination"), source=_PATH, destination=_s("new path or directory"))),
        _tool(shell, "Run a command line over the file tree: " + ", ".join(SHELL_COMMANDS)
              + " (grep -i -c -n -v, head/tail -n N, wc -l -w -c, sort -n -r, uniq -c, cut -d -f), "
                "joined by pipes. No redirection.",
              _schema(("command",), command=_s("e.g. grep -c ERROR /logs/app.log"))),
        _tool(calculate, "Evaluate an arithmetic expression (+ - * / // % **, round, min, max, sqrt, sum).",
              _schema(("expression",), expression=_s("e.g. (120 + 140) * 25"))),
        _tool(today, "Today's date and the time.", _schema()),
        _tool(list_events, "List calendar events, of one day or all.", _schema(date=_s("YYYY-MM-DD"))),
        _tool(create_event, "Create a calendar event.",
              _schema(("title", "date", "start"), title=_s("title"), date=_s("YYYY-MM-DD"),
                      start=_s("HH:MM, 24-hour"), duration_minutes=_i("default 60"),
                      attendees=_strings("handles like @ana"))),
        _tool(delete_event, "Delete a calendar event by its id.", _schema(("event_id",), event_id=_s("e.g. ev-3"))),
        _tool(lookup_contact, "Find contacts by name: handle, email, team.", _schema(("name",), name=_s("name"))),
        _tool(list_contacts, "List contacts, of one team or all.", _schema(team=_s("team"))),
        _tool(send_message, "Send a chat message to a contact.",
              _schema(("to", "text"), to=_s("handle like @maria, email or full name"), text=_s("message"))),
        _tool(list_messages, "List the messages of a folder.", _schema(folder=_s("inbox (default) or sent"))),
        _tool(read_message, "Read one message of the inbox.", _schema(("message_id",), message_id=_s("e.g. m2"))),
        _tool(list_issues, "List issues of the tracker.",
              _schema(status=_s("open (default), closed or all"), label=_s("only issues with this label"))),
        _tool(get_issue, "Show one issue with its comments.", _schema(("issue_id",), issue_id=_i("e.g. 3"))),
        _tool(create_issue, "Open a new issue.",
              _schema(("title",), title=_s("title"), body=_s("description"), labels=_strings("e.g. [\"bug\"]"))),
        _tool(update_issue, "Change an issue's status or assignee, or add labels.",
              _schema(("issue_id",), issue_id=_i("e.g. 3"), status=_s("open or closed"),
                      assignee=_s("handle like @tom"), add_labels=_strings("labels to add"))),
        _tool(comment_issue, "Add a comment to an issue.",
              _schema(("issue_id", "text"), issue_id=_i("e.g. 3"), text=_s("comment"))),
        _tool(get_weather, "Current weather of a city.", _schema(("city",), city=_s("city name in English"))),
        _tool(convert_units, "Convert between units: km m mi ft, kg lb, l gal, c f.",
              _schema(("value", "from_unit", "to_unit"), value=_n("amount"), from_unit=_s("e.g. km"),
                      to_unit=_s("e.g. mi"))),
        _tool(convert_currency, "Convert money between currencies at today's rates.",
              _schema(("amount", "from_currency", "to_currency"), amount=_n("amount"),
                      from_currency=_s("code like EUR"), to_currency=_s("code like USD"))),
    )
}  # fmt: skip
assert sum(len(names) for names in GROUPS.values()) == len(TOOLS) == 30
assert {n for names in GROUPS.values() for n in names} == set(TOOLS)


def tools_of(*groups_or_names: str) -> tuple[str, ...]:
    """Tool names, in TOOLS order, of the given groups (GROUPS keys) and single tool names; "all": every tool."""
    wanted: set[str] = set()
    for g in groups_or_names:
        if g == "all":
            wanted |= set(TOOLS)
        elif g in GROUPS:
            wanted |= set(GROUPS[g])
        elif g in TOOLS:
            wanted.add(g)
        else:
            raise KeyError(f"no tool or group {g!r}")
    return tuple(n for n in TOOLS if n in wanted)


@dataclass
class Stats:
    """A task's tool calls, counted from its Environment's log."""

    calls: int = 0
    errors: int = 0  # the world said no (part of the task)
    recovered: int = 0  # of those, followed by a tool call that worked
    malformed: dict[str, int] = field(default_factory=dict)  # invalid_json / bad_arguments / unknown_tool

    @classmethod
    def of(cls, log: list[ToolEvent]) -> Stats:
        s = cls(calls=len(log))
        for n, e in enumerate(log):
            if e.kind == "error":
                s.errors += 1
                s.recovered += any(later.kind is None for later in log[n + 1 :])
            elif e.kind is not None:
                s.malformed[e.kind] = s.malformed.get(e.kind, 0) + 1
        return s

"""Exact checks of a finished task: each reads the Environment (its final state and its tool log)
and the agent's final answer, and says yes or no. No model judges anything.

Text is compared case-insensitively, with whitespace collapsed and markdown emphasis (`*`, `_` runs,
backticks) dropped; a phrase must stand on its own ("ok" is not found in "book"). A number in an
answer is any decimal number in it, with thousands separators ("2,592.00" is 2592).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from bench.agentic.env import Environment

_NUMBER = re.compile(r"(?<![\d.])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)")
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")  # fmt: skip


def norm(text: str) -> str:
    text = text.replace("\u2011", "-").replace("\u2013", "-").replace("\u2014", "-").replace("\u00a0", " ")
    text = re.sub(r"[*`]+|(?<!\w)_+|_+(?!\w)", "", text)
    return " ".join(text.casefold().split())


def numbers(text: str) -> list[float]:
    return [float(m.replace(",", "")) for m in _NUMBER.findall(text)]


def dates(iso: str) -> tuple[str, ...]:
    """Ways an answer may write a date: 2025-03-12, March 12, 12 March, Mar 12, 12/03/2025, …"""
    year, month, day = iso.split("-")
    name = _MONTHS[int(month) - 1]
    d = str(int(day))
    th = {"1": "st", "2": "nd", "3": "rd"}.get(d[-1] if d not in ("11", "12", "13") else "", "th")
    return (iso, f"{name} {d}", f"{d} {name}", f"{name[:3]} {d}", f"{d} {name[:3]}", f"{name} {d}{th}",
            f"{d}{th} {name}", f"{d}{th} of {name}", f"{day}/{month}/{year}", f"{month}/{day}/{year}",
            f"{day}.{month}.{year}", f"{d}.{int(month)}.")  # fmt: skip


def times(hhmm: str) -> tuple[str, ...]:
    """Ways an answer may write a time of day: 15:00, 3 pm, 3:00 pm, 3pm, 15h."""
    h, m = int(hhmm[:2]), hhmm[3:]
    twelve = h % 12 or 12
    half = "am" if h < 12 else "pm"
    out = [hhmm, f"{h}:{m}", f"{twelve}:{m} {half}", f"{twelve}:{m}{half}", f"{twelve}:{m} {half[0]}.m."]
    if m == "00":
        out += [f"{twelve} {half}", f"{twelve}{half}", f"{h}h", f"{twelve} {half[0]}.m."]
    return tuple(dict.fromkeys(out))


class Check(Protocol):
    def __call__(self, env: Environment, answer: str) -> bool: ...

    def describe(self) -> str: ...


def contains(text: str, phrase: str) -> bool:
    """`phrase` in `text` (both normalised), not as part of a longer word: "ok" is not in "book"."""
    return re.search(r"(?<!\w)" + re.escape(norm(phrase)) + r"(?!\w)", norm(text)) is not None


def _has(text: str, all_of: tuple[str, ...] = (), any_of: tuple[str, ...] = (), none_of: tuple[str, ...] = ()) -> bool:
    return (
        all(contains(text, s) for s in all_of)
        and (not any_of or any(contains(text, s) for s in any_of))
        and not any(contains(text, s) for s in none_of)
    )


def _words(all_of: tuple[str, ...], any_of: tuple[str, ...], none_of: tuple[str, ...] = ()) -> str:
    parts = []
    if all_of:
        parts.append(" and ".join(repr(s) for s in all_of))
    if any_of:
        parts.append("one of " + ", ".join(repr(s) for s in any_of[:4]) + (", …" if len(any_of) > 4 else ""))
    if none_of:
        parts.append("not " + ", ".join(repr(s) for s in none_of))
    return "; ".join(parts)


@dataclass(frozen=True)
class Answer:
    """The final answer contains every `all`, at least one of `any` (if given), none of `none`."""

    all: tuple[str, ...] = ()
    any: tuple[str, ...] = ()
    none: tuple[str, ...] = ()

    def __call__(self, env: Environment, answer: str) -> bool:
        return _has(answer, self.all, self.any, self.none)

    def describe(self) -> str:
        return f"answer has {_words(self.all, self.any, self.none)}"


@dataclass(frozen=True)
class Number:
    """The final answer holds the number `value` (within `tol`)."""

    value: float
    tol: float = 1e-9

    def __call__(self, env: Environment, answer: str) -> bool:
        return any(abs(n - self.value) <= self.tol for n in numbers(answer))

    def describe(self) -> str:
        return f"answer has the number {self.value:g}" + (f" (±{self.tol:g})" if self.tol >= 1e-6 else "")


@dataclass(frozen=True)
class Sent:
    """A message went to `to` (a handle) whose text has every `all` and one of `any`."""

    to: str
    all: tuple[str, ...] = ()
    any: tuple[str, ...] = ()

    def __call__(self, env: Environment, answer: str) -> bool:
        return any(m["to"] == self.to and _has(m["text"], self.all, self.any) for m in env.state.sent)

    def describe(self) -> str:
        what = _words(self.all, self.any)
        return f"a message to {self.to}" + (f" with {what}" if what else "")


@dataclass(frozen=True)
class NotSent:
    """No message went to `to` (to anyone, when None)."""

    to: str | None = None

    def __call__(self, env: Environment, answer: str) -> bool:
        return not any(self.to is None or m["to"] == self.to for m in env.state.sent)

    def describe(self) -> str:
        return f"no message to {self.to}" if self.to else "no message sent"


@dataclass(frozen=True)
class SentCount:
    n: int

    def __call__(self, env: Environment, answer: str) -> bool:
        return len(env.state.sent) == self.n

    def describe(self) -> str:
        return f"exactly {self.n} message(s) sent"


def _minutes(hhmm: str) -> int:
    return int(hhmm[:2]) * 60 + int(hhmm[3:])


@dataclass(frozen=True)
class Event:
    """An event on `date` at `start` whose title has one of `title` (and lasting `minutes`, with
    every handle of `attendees`, when given)."""

    date: str
    start: str
    title: tuple[str, ...] = ()
    minutes: int | None = None
    attendees: tuple[str, ...] = ()

    def _fits(self, e: dict[str, Any]) -> bool:
        return (
            e["date"] == self.date
            and e["start"] == self.start
            and _has(e["title"], any_of=self.title)
            and (self.minutes is None or _minutes(e["end"]) - _minutes(e["start"]) == self.minutes)
            and all(a in e["attendees"] for a in self.attendees)
        )

    def __call__(self, env: Environment, answer: str) -> bool:
        return any(self._fits(e) for e in env.state.events)

    def describe(self) -> str:
        extra = (f", {self.minutes} min" if self.minutes else "") + (f", with {', '.join(self.attendees)}"
                                                                   if self.attendees else "")  # fmt: skip
        return f"an event on {self.date} at {self.start} titled {_words((), self.title)}{extra}"


@dataclass(frozen=True)
class NoEvent:
    """No event whose title has one of `title` (on `date` at `start`, when given)."""

    title: tuple[str, ...]
    date: str | None = None
    start: str | None = None

    def __call__(self, env: Environment, answer: str) -> bool:
        return not any(
            _has(e["title"], any_of=self.title)
            and (self.date is None or e["date"] == self.date)
            and (self.start is None or e["start"] == self.start)
            for e in env.state.events
        )

    def describe(self) -> str:
        when = f" on {self.date}" if self.date else ""
        return f"no event titled {_words((), self.title)}{when}" + (f" at {self.start}" if self.start else "")


@dataclass(frozen=True)
class EventCount:
    n: int

    def __call__(self, env: Environment, answer: str) -> bool:
        return len(env.state.events) == self.n

    def describe(self) -> str:
        return f"exactly {self.n} events in the calendar"


@dataclass(frozen=True)
class File:
    """The file exists and has every `all` (and its last non-empty line is `last`, when given), none of `none`."""

    path: str
    all: tuple[str, ...] = ()
    none: tuple[str, ...] = ()
    last: str | None = None

    def __call__(self, env: Environment, answer: str) -> bool:
        text = env.state.files.get(self.path)
        if text is None or not _has(text, self.all, (), self.none):
            return False
        lines = [line for line in text.splitlines() if line.strip()]
        return self.last is None or (bool(lines) and norm(lines[-1]) == norm(self.last))

    def describe(self) -> str:
        what = _words(self.all, (), self.none)
        return f"{self.path} exists" + (f" with {what}" if what else "") + (
            f", ending with {self.last!r}" if self.last else "")  # fmt: skip


@dataclass(frozen=True)
class NoFile:
    path: str

    def __call__(self, env: Environment, answer: str) -> bool:
        return self.path not in env.state.files

    def describe(self) -> str:
        return f"{self.path} does not exist"


@dataclass(frozen=True)
class Issue:
    """An issue (number `id`, or any whose title has one of `title`) with the given status, label,
    assignee and a comment with one of `comment`."""

    id: int | None = None
    title: tuple[str, ...] = ()
    status: str | None = None
    label: str | None = None
    assignee: str | None = None
    comment: tuple[str, ...] = ()

    def _fits(self, i: dict[str, Any]) -> bool:
        return (
            (self.id is None or i["id"] == self.id)
            and _has(i["title"], any_of=self.title)
            and (self.status is None or i["status"] == self.status)
            and (self.label is None or self.label in i["labels"])
            and (self.assignee is None or i["assignee"] == self.assignee)
            and (not self.comment or any(_has(c, any_of=self.comment) for c in i["comments"]))
        )

    def __call__(self, env: Environment, answer: str) -> bool:
        return any(self._fits(i) for i in env.state.issues)

    def describe(self) -> str:
        which = f"issue #{self.id}" if self.id is not None else f"an issue titled {_words((), self.title)}"
        parts = [f"{k} {v}" for k, v in (("status", self.status), ("label", self.label),
                                         ("assignee", self.assignee)) if v]  # fmt: skip
        if self.comment:
            parts.append(f"a comment with {_words((), self.comment)}")
        return which + (" with " + ", ".join(parts) if parts else "")


@dataclass(frozen=True)
class NoIssue:
    """No issue whose title has one of `title`."""

    title: tuple[str, ...]

    def __call__(self, env: Environment, answer: str) -> bool:
        return not any(_has(i["title"], any_of=self.title) for i in env.state.issues)

    def describe(self) -> str:
        return f"no issue titled {_words((), self.title)}"


@dataclass(frozen=True)
class IssueCount:
    n: int

    def __call__(self, env: Environment, answer: str) -> bool:
        return len(env.state.issues) == self.n

    def describe(self) -> str:
        return f"exactly {self.n} issues in the tracker"


@dataclass(frozen=True)
class Closed:
    """Exactly these issues are closed."""

    ids: tuple[int, ...]

    def __call__(self, env: Environment, answer: str) -> bool:
        return sorted(i["id"] for i in env.state.issues if i["status"] == "closed") == sorted(self.ids)

    def describe(self) -> str:
        return "exactly issues " + ", ".join(f"#{i}" for i in self.ids) + " closed"


@dataclass(frozen=True)
class Unchanged:
    """Nothing was changed: no file, event, message or issue differs from the start."""

    def __call__(self, env: Environment, answer: str) -> bool:
        return not env.changes()

    def describe(self) -> str:
        return "nothing changed"


@dataclass(frozen=True)
class NoToolCalls:
    """No tool was called at all."""

    def __call__(self, env: Environment, answer: str) -> bool:
        return not env.log

    def describe(self) -> str:
        return "no tool called"


def failed(checks: tuple[Check, ...], env: Environment, answer: str) -> list[str]:
    """The descriptions of the checks the run fails (empty: the task succeeded)."""
    return [c.describe() for c in checks if not c(env, answer)]

"""Answers that go round in a loop, stopped early.

A small model answering greedily can write the same thing over and over until it runs out of
tokens: the 0.5B local tier wrote one tool call 40 times, and on CPU each such answer took 40 to 70 s
of a task's time for nothing (bench/results/agentic/, docs/agentic.md). A tier with `cut_loops`
(router/policy/model.py) is read as a stream, and `Loop` watches what it writes — the text and the
tool calls' names and arguments as they come. Once the answer ends in `COPIES` copies in a row of one
stretch of at least `MIN_UNIT` characters, the tier is not read further (closing the stream stops a
llama-server generating) and the answer ends there. A whole answer keeps its text up to the end of
the first copy (`Loop.kept`) and each call once (`Answer.drop_repeated_calls`, router/upstream/answer.py);
a stream, whose text went out as it came unless held as a call written as text, ends where it was
stopped. What the loop repeated is what the model meant; salvage makes a call written N times one call.

Only long periods count: a stretch whose own shortest period is under `MIN_UNIT` characters (a run
of one character, a list of zeros, a separator line) is what text and code legitimately repeat, and
is never cut. `loop_end` is a pure function of the text; `Loop` applies it as chunks arrive.
"""

from __future__ import annotations

from typing import Any

MIN_UNIT = 32  # characters: the shortest stretch whose repetition is a loop
COPIES = 3  # copies in a row
MAX_UNIT = 4096  # characters: a longer stretch is not looked for
_TRIES = 8  # earlier occurrences of the answer's end looked at, at most
_WINDOW = COPIES * MAX_UNIT + MIN_UNIT  # characters of an answer's end a loop can span


def loop_end(text: str, min_unit: int = MIN_UNIT, copies: int = COPIES, max_unit: int = MAX_UNIT) -> int | None:
    """Where the first copy ends, when `text` ends in `copies` copies in a row of one stretch of
    `min_unit` to `max_unit` characters (that shortest period of its end); else None.

    The end's last `min_unit` characters are looked for earlier in the text: an occurrence `d`
    characters back is a candidate period, true when the last `copies * d` characters are the last
    `d` ones `copies` times over. A period under `min_unit` ends the search: that end repeats a short
    stretch (`"0, 0, 0, "`, `"----"`), never cut."""
    n = len(text)
    if n < copies * min_unit:
        return None
    needle = text[n - min_unit :]
    reach = max(0, n - copies * max_unit - min_unit)  # as far back as a loop can begin
    found = text.rfind(needle, reach, n - 1)
    for _ in range(_TRIES):
        if found < 0:
            return None
        period = n - min_unit - found
        if period < min_unit or period > max_unit or copies * period > n:
            return None
        unit = text[n - period :]
        if text.endswith(unit * copies):
            start = n - copies * period  # back to where the repeating began
            while start > 0 and text[start - 1] == text[start - 1 + period]:
                start -= 1
            return start + period
        found = text.rfind(needle, reach, found + min_unit - 1)
    return None


class Loop:
    """One streamed answer watched for a loop: `feed` each chunk's data; True once it loops."""

    __slots__ = ("_calls", "_text", "deltas", "looped")

    def __init__(self) -> None:
        self._text = ""  # the end of the answer's content, as far back as a loop reaches
        self._calls = ""  # the same of its calls' names and arguments, each name on a new line
        self.deltas = 0  # chunks that wrote something (llama-server: one token each)
        self.looped = False

    def feed(self, data: dict[str, Any]) -> bool:
        choices = data.get("choices")
        if not choices or not isinstance(choices[0], dict):
            return False
        delta = choices[0].get("delta") or {}
        grew = None
        if isinstance(text := delta.get("content"), str) and text:
            self._text = grew = (self._text + text)[-_WINDOW:]
        for call in delta.get("tool_calls") or ():
            fn = (call.get("function") if isinstance(call, dict) else None) or {}
            name, args = fn.get("name"), fn.get("arguments")
            if name or args:
                self._calls = grew = (self._calls + (f"\n{name} " if name else "") + str(args or ""))[-_WINDOW:]
        if grew is not None:
            self.deltas += 1
            self.looped = self.looped or loop_end(grew) is not None
        return self.looped

    @property
    def finish(self) -> str:
        """The finish reason of an answer stopped here: a stop, unless it made calls."""
        return "tool_calls" if self._calls else "stop"

    def kept(self, text: str) -> str:
        """`text` (the answer's content) up to the end of its loop's first copy, if it looped there."""
        end = loop_end(text)
        return text if end is None else text[:end]

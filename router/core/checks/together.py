"""What an answer's calls show together, each the answer's one mistake (router/core/checks/validate.py
runs them):

- A sweep (small models write one valid call per offered tool, down the list): calls, made or
  written as text, that begin with the first three of at least three offered tools in the order
  offered are `tool_sweep`. Strict on purpose: parallel calls an agent means (Read, Read, Grep),
  one tool thrice, two tools, a sweep from the second tool are not.
- A spray: `SPRAY` (8) or more calls of one tool in one answer are `tool_spray` (the 0.5B wrote 18
  `create_event` calls, an hour apart, for one meeting). Agents do read several files at once; the
  kind only moves a call on to a stronger tier (router/mistakes.py, `SIGNS`).
- A repeat: well-formed calls, every one the same tool with the same arguments (as JSON, not as
  spelled) as a call of the agent's last turn — the assistant message whose results close the
  request — are `repeated_call`. A greedy model that writes its last call again writes it every
  turn after (seen: 12 identical messages sent). Only the last turn, and only when nothing is new:
  a file read again after a write two turns back, or a repeat beside a new call, is not one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from itertools import islice
from typing import Any, Final

from router.core.checks.turns import call_key, newest_turn
from router.mistakes import REPEATED_CALL, TOOL_SPRAY, TOOL_SWEEP, Mistake

SWEEP: Final = 3  # calls of the first offered tools, in the order offered, that make a sweep
SPRAY: Final = 8  # calls of one tool in one answer that make a spray
_DETAIL_MAX: Final = 120


def short(text: str) -> str:
    """`text` on one line, at most `_DETAIL_MAX` characters: a mistake's detail."""
    text = " ".join(text.split())
    return text if len(text) <= _DETAIL_MAX else text[: _DETAIL_MAX - 1] + "…"


def sweep(called: Sequence[str], tools: Mapping[str, Any], how: str = "") -> Mistake | None:
    """`tool_sweep` if the calls (the tools they name, in order) begin with the first `SWEEP` offered
    tools (`tools`, in the order offered), else None."""
    if len(called) < SWEEP or len(tools) < SWEEP or tuple(called[:SWEEP]) != tuple(islice(tools, SWEEP)):
        return None
    detail = f"{len(called)} calls of the {len(tools)} offered tools in the order offered: {', '.join(called)}"
    return Mistake(TOOL_SWEEP, "", short(detail + how))


def spray(called: Sequence[str]) -> Mistake | None:
    """`tool_spray` if `SPRAY` or more of the calls (the tools they name) name one tool, else None."""
    name, count = Counter(called).most_common(1)[0] if called else ("", 0)
    return Mistake(TOOL_SPRAY, name, short(f"{count} calls of {name} in one answer")) if count >= SPRAY else None


def repeated(calls: Sequence[Any], messages: Any) -> Mistake | None:
    """`repeated_call` if every call in `calls` is one of the agent's last turn (router/core/checks/turns.py),
    else None."""
    last = {call_key(c) for c in newest_turn(messages).calls}
    made = [call_key(c) for c in calls]
    if not last or not made or not set(made) <= last:
        return None
    names = ", ".join(dict.fromkeys(name for name, _ in made))
    return Mistake(REPEATED_CALL, made[0][0], short(f"the agent's last call(s) again, same arguments: {names}"))
